"""The 'ray' executor on a Ray cluster of two nodes, both on this machine and on 127.0.0.1 only.

One cluster (`ray.cluster_utils.Cluster`: a head node and a second node, one CPU each, so the two
workers' actors run on different nodes) serves the module: the local executor's results on it
(logic files, random queries), partitions kept on the workers across statements, and a node lost
in the middle of a statement, then a node added.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import numpy as np
import pytest

import trdb
from helpers.external_tensors import Externals, s3_uploader
from helpers.logic_runner import format_row, logic_files, parse_file
from helpers.random_queries import assert_same_results, build_case, executor_results
from helpers.ray_feeds import at_first_feed
from helpers.ray_placement import received_tiles
from trdb.config.unit_costs import MIN_PARALLEL_COST

pytestmark = pytest.mark.ray

SQL_ROOT = Path(__file__).parent.parent / "sql"
QUERIES = Path(__file__).parent.parent.parent / "queries"
SLOW = "SELECT S.i, SUM(EXP(S.v) * T.v) AS v FROM S, S AS T GROUP BY S.i"  # seconds of work: 65536 tile pairs
# Each node: one CPU, a small object store; node deaths noticed within about a second.
NODE = {"num_cpus": 1, "object_store_memory": 100 << 20, "node_ip_address": "127.0.0.1"}
HEAD = dict(NODE, include_dashboard=False,
            _system_config={"health_check_period_ms": 200, "health_check_failure_threshold": 3})
ENV = {"TRDB_MIN_PARALLEL_COST": "0",           # small test plans still get their exchanges
       "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every Ray address is the loopback one, never the host's
       # the S3 server's credentials, in the environment of the nodes (so of the actors) as on a real cluster
       "AWS_ACCESS_KEY_ID": "trdb-key", "AWS_SECRET_ACCESS_KEY": "trdb-secret", "AWS_DEFAULT_REGION": "us-east-1",
       "AWS_EC2_METADATA_DISABLED": "true"}
# External tensors: the whole set of logic files and seeds with TRDB_RAY_EXTERNAL_ALL=1; CI runs a few.
EXTERNAL_ALL = bool(os.environ.get("TRDB_RAY_EXTERNAL_ALL"))
QUERIES_IN_CI = 3  # of the logic file, with its statements before them
BUCKET = "trdb-cluster"


@pytest.fixture(scope="module")
def cluster():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install 'trdb[ray]')")
    env = dict(ENV)  # the auth token: tests/conftest.py
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        import ray
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        ray_constants.ENABLE_RAY_CLUSTER = False  # as the environment says, where Ray was imported before
        nodes = Cluster(initialize_head=True, head_node_args=HEAD)
        try:
            nodes.add_node(**NODE)
            nodes.wait_for_nodes()
            ray.init(address=nodes.address, log_to_driver=False)
            yield nodes
        finally:
            ray.shutdown()
            nodes.shutdown()
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


def _actors(count: int = 2) -> list:
    from trdb.execution.ray.driver.cluster import POOL
    return POOL.actors(count, False)


def _nodes_of(actors) -> list[str]:
    import ray
    return ray.get([actor.node.remote() for actor in actors], timeout=60)


def _dataset_numbers_out(outcome):
    """An outcome with each external dataset's folder (`<n>_<tensor>`, numbered by the connection that made
    it) named without its number."""
    return re.sub(r"/\d+_(\w+)", r"/_\1", repr(outcome))


def _outcome(cur, sql: str):
    """Rows as text (sorted: parallel plans may gather in any order), or the error's type and text."""
    try:
        cur.execute(sql)
    except trdb.Error as exc:
        return type(exc).__name__, str(exc)
    return sorted(format_row(r) for r in cur.fetchall()) if cur.description else None


def test_the_workers_run_on_both_nodes(cluster):
    import ray
    assert [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]] == ["127.0.0.1", "127.0.0.1"]
    con = trdb.connect(executor="ray", workers=2)
    assert con.execute("CREATE TENSOR A SHAPE (8, 8) TILE (4, 4) FILL ONES") is not None
    assert len(set(_nodes_of(_actors()))) == 2
    con.close()


def test_actors_of_both_nodes_on_the_drivers_machine_write_a_product_into_the_fetched_array(cluster, monkeypatch):
    seen = received_tiles(monkeypatch)
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((300, 200), dtype=np.float32), rng.standard_normal((200, 250), dtype=np.float32)
    con = trdb.connect(executor="ray", workers=2)
    cur = con.cursor()
    cur.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [a])
    cur.execute("CREATE TENSOR B FROM ? TILE (128, 128)", [b])
    got = cur.execute("SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i "
                      "GROUP BY A.i, B.j").fetch_tensor()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    assert len(set(_nodes_of(_actors()))) == 2
    assert [placed for _, placed in seen] == [True] * 6  # two Ray nodes, one machine: each actor maps the driver's array
    con.close()


@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: p.name)
def test_logic_statements_match_the_local_executor(cluster, path):
    _match_the_local_executor(path)


@pytest.mark.parametrize("path", [p for p in logic_files(SQL_ROOT) if p.name in ("queries.test", "dml.test")],
                         ids=lambda p: p.name)
def test_logic_statements_at_the_default_parallel_cost_match_the_local_executor(cluster, path):
    """Where cheap plans run on one partition, as a user's do (this module sets min_parallel_cost = 0): a plan
    kept on one partition that read one tensor twice once failed on Ray."""
    _match_the_local_executor(path, min_parallel_cost=MIN_PARALLEL_COST)


@pytest.mark.parametrize("seed", [1, 21])
def test_random_queries_at_the_default_parallel_cost_match_the_local_executor(cluster, seed):
    case, cost = build_case(seed), MIN_PARALLEL_COST
    assert_same_results(case, executor_results(case, min_parallel_cost=cost),
                        executor_results(case, executor="ray", min_parallel_cost=cost))


def _match_the_local_executor(path: Path, **settings) -> None:
    local = trdb.connect(workers=2, **settings)
    remote = trdb.connect(executor="ray", workers=2, **settings)
    try:
        for record in parse_file(path):
            if " ".join(record.sql.split()).upper().rstrip(";") == "SHOW ALL":
                continue  # the connection's settings: `executor` differs by design
            expected = _outcome(local.cursor(), record.sql)
            assert _outcome(remote.cursor(), record.sql) == expected, f"{path.name}:{record.line}\n{record.sql}"
    finally:
        local.close()
        remote.close()


@pytest.mark.parametrize("seed", [1, 21, 31])  # 11 (4 workers: two more actors to start): external below
def test_random_queries_match_the_local_executor(cluster, seed):
    case = build_case(seed)
    assert_same_results(case, executor_results(case), executor_results(case, executor="ray"))


@pytest.fixture(scope="module")
def s3_endpoint(cluster):
    """A local S3 server (moto) on 127.0.0.1 with a bucket; the credentials are the environment's (ENV)."""
    moto_server = pytest.importorskip("moto.server", reason="the S3 tests need moto[server]")
    boto3 = pytest.importorskip("boto3")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        boto3.client("s3", endpoint_url=f"http://{host}:{port}").create_bucket(Bucket=BUCKET)
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(params=["shared path", "s3"])
def externals(request, tmp_path):
    """How stored tensors become external ones (tests/helpers/external_tensors.py), and the settings that allow them."""
    root = tmp_path / "datasets"
    root.mkdir()
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        prefix = tmp_path.name
        return (Externals(root, s3_uploader(endpoint, BUCKET, prefix)),
                [f"SET external_roots = 's3://{BUCKET}/{prefix}'", f"SET s3_endpoint = '{endpoint}'"])
    return Externals(root), [f"SET external_roots = '{root}'"]


@pytest.mark.parametrize("path", [p for p in logic_files(SQL_ROOT) if EXTERNAL_ALL or p.name == "queries.test"],
                         ids=lambda p: p.name)
def test_logic_queries_on_external_tensors_match_the_local_executor(cluster, externals, path):
    """Each query of the file with every stored tensor made external first (then stored again for the rest)."""
    made, settings = externals
    connections = trdb.connect(workers=2), trdb.connect(executor="ray", workers=2)
    cursors = [con.cursor() for con in connections]
    try:
        for cur in cursors:
            for statement in settings:
                cur.execute(statement)
        queries = 0
        for record in parse_file(path):
            if " ".join(record.sql.split()).upper().rstrip(";") == "SHOW ALL":
                continue
            queries += record.kind == "query"
            if queries > QUERIES_IN_CI and not EXTERNAL_ALL:
                break
            moved = [made.externalize(cur) if record.kind == "query" else [] for cur in cursors]
            expected, got = (_outcome(cur, record.sql) for cur in cursors)
            for cur, names in zip(cursors, moved):
                made.restore(cur, names)
            # each connection made its own datasets: SHOW TENSORS names the folder each tensor was read from
            assert _dataset_numbers_out(got) == _dataset_numbers_out(expected), f"{path.name}:{record.line}\n{record.sql}"
            assert moved[0] == moved[1]
    finally:
        for con in connections:
            con.close()


@pytest.mark.parametrize("seed", range(1, 40, 10) if EXTERNAL_ALL else [1])
def test_random_queries_on_external_tensors_match_the_local_executor(cluster, externals, seed):
    from trdb.execution.ray.driver.residency import TOTAL
    made, settings = externals
    case = build_case(seed)

    sent_before = []

    def prepare(cur):
        for statement in settings:
            cur.execute(statement)
        assert made.externalize(cur)
        sent_before.append(TOTAL.tensors)  # COPY, writing the dataset, may run on the workers
    expected = executor_results(case, prepare)
    assert_same_results(case, expected, executor_results(case, prepare, executor="ray"))
    assert TOTAL.tensors == sent_before[-1]  # the actors read every tensor themselves: the driver sent none of it


def _mlp(steps: int, **settings) -> tuple[dict, np.ndarray, int]:
    """Make and train queries/mlp.sql's model for `steps` steps on the cluster: (what the driver sent
    meanwhile, the trained W1, the bytes of X)."""
    from trdb.execution.ray.driver.residency import TOTAL
    statements = (QUERIES / "mlp.sql").read_text().replace("steps = 60", f"steps = {steps}")
    setup, minimize = statements.split("MINIMIZE")
    con = trdb.connect(executor="ray", workers=2, **settings)
    cur = con.cursor()
    before = TOTAL.as_dict()
    cur.execute(setup)  # its query (Y from X) reads X on the workers too
    cur.execute("MINIMIZE" + minimize)
    sent = {name: value - before[name] for name, value in TOTAL.as_dict().items()}
    sent["shared_kept"] = _shared_copies()  # what the actors still keep of the steps' shared subplans
    x = cur.execute("SELECT * FROM X").fetch_tensor()
    w1 = cur.execute("SELECT * FROM W1").fetch_tensor()
    con.close()
    return sent, w1, x.nbytes


def _shared_copies() -> int:
    import ray

    from trdb.execution.ray.kept_subplans import SHARED_DATABASE
    held = ray.get([actor.held.remote() for actor in _actors()], timeout=60)
    return sum(key.database == SHARED_DATABASE for keys in held for key in keys)


def test_minimize_ships_its_data_once_and_the_parameters_each_step(cluster):
    sent, w1, x_bytes = _mlp(20)
    params = (32 * 64 + 64) * 4  # W1 and W2, float32
    # X (256 KiB) and Y (8 KiB) once, then W1 and W2 (a scan or two of each) each step; the shared forward
    # pass (its hidden layer: 512 KiB a step) stays on the actors that computed it (85 MB sent before)
    assert x_bytes <= sent["bytes_sent"] < 2 * x_bytes + 20 * 2 * params, sent
    assert sent["partitions_reused"] >= 20, sent  # X's partitions, at every step
    assert sent["shared_kept"] == 0, sent  # each step's copies were dropped when it ended
    assert np.isfinite(w1).all()  # trained results equal the local executor's: test_ray.py (MINIMIZE)


def test_without_resident_partitions_every_step_ships_the_data(cluster):
    sent, _, x_bytes = _mlp(2, ray_resident_bytes=0)
    assert sent["tensor_bytes_sent"] >= 2 * x_bytes and sent["partitions_reused"] == 0, sent


def test_a_write_ships_only_the_tiles_it_changed(cluster):
    from trdb.execution.ray.driver.residency import TOTAL
    query = "SELECT S.i, SUM(S.v * 2) AS v FROM S GROUP BY S.i"
    results, sent = {}, []
    for executor in ("local", "ray"):
        con = trdb.connect(executor=executor, workers=2)
        cur = con.cursor()
        cur.execute("CREATE TENSOR S SHAPE (512, 512) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 7)")  # 64 tiles, 1 MiB
        before = TOTAL.tensors
        cur.execute(query)
        sent.append(TOTAL.tensors - before)
        cur.execute("UPDATE S SET v = S.v + 1 WHERE S.j = 3")  # 8 tiles changed
        before = TOTAL.tensors
        results[executor] = cur.execute(query).fetch_tensor()
        sent.append(TOTAL.tensors - before)
        con.close()
    np.testing.assert_allclose(results["ray"], results["local"], rtol=1e-5, atol=1e-4)
    tile = 64 * 64 * 4
    assert sent[2] >= 64 * tile, sent  # the first query on the workers ships S, all of it
    assert 8 * tile <= sent[3] < 10 * tile, sent  # after the write, the 8 changed tiles only (not 64)


def test_actors_read_their_own_partitions_of_an_external_tensor(cluster, tmp_path):
    """A Parquet dataset on a path both nodes read: each actor reads its partition; the driver sends none of it."""
    from trdb.execution.ray.driver.residency import TOTAL
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((96, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    maker = trdb.connect(str(tmp_path / "db.trdb"))
    maker.execute("CREATE TENSOR A FROM ? TILE (16, 16)", [a])
    maker.execute(f"COPY A TO '{tmp_path / 'a'}' (FORMAT parquet, PARTITIONS 2)")
    maker.execute("CREATE TENSOR B FROM ? TILE (16, 16)", [b])
    maker.close()
    query = "SELECT X.i, B.j, SUM(MATMUL(X.v, B.v)) AS v FROM X JOIN B ON X.j = B.i GROUP BY X.i, B.j"
    results = []
    for settings in ({}, {"executor": "ray", "workers": 2}):
        con = trdb.connect(str(tmp_path / "db.trdb"), **settings)
        con.execute(f"CREATE TENSOR IF NOT EXISTS X SHAPE (96, 64) TILE (16, 16) LOCATION '{tmp_path / 'a'}'")
        before = TOTAL.as_dict()
        results.append(con.execute(query).fetch_tensor())
        sent = {name: value - before[name] for name, value in TOTAL.as_dict().items()}
        con.close()
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(results[1], a @ b, rtol=1e-4, atol=1e-4)
    # B (stored) is shipped, a copy to each worker; X (24 KiB) is read by the actors, none of it sent
    assert sent["tensor_bytes_sent"] <= 2 * b.nbytes + 1024 < a.nbytes, sent


def test_a_node_lost_mid_statement_fails_it_and_the_next_runs_on_the_node_left(cluster, monkeypatch):
    import ray
    con = trdb.connect(executor="ray", workers=2)
    cur = con.cursor()
    cur.execute("CREATE TENSOR S SHAPE (1536, 1536) TILE (96, 96) FILL RANDOM_NORMAL(0, 1, 3)")
    expected = cur.execute("SELECT S.i, SUM(S.v) AS v FROM S GROUP BY S.i").fetch_tensor()
    before = cur.execute("SHOW TENSORS").fetchall()
    head = ray.get_runtime_context().get_node_id()
    second = next(node for node in cluster.list_all_nodes() if node.node_id != head)
    worker = _nodes_of(_actors()).index(second.node_id)
    lost = at_first_feed(monkeypatch, lambda actor: cluster.remove_node(second, allow_graceful=False), worker)
    cur.execute("SET ray_resident_bytes = 0")  # the driver feeds S (SLOW's plan on kept S forwards nothing)
    with pytest.raises(trdb.OperationalError, match=f"Ray worker {worker} died") as error:
        cur.execute(f"CREATE TENSOR R AS {SLOW}")
    cur.execute("RESET ray_resident_bytes")
    assert lost.is_set() and "rolled back" in str(error.value)
    monkeypatch.undo()
    assert cur.execute("SHOW TENSORS").fetchall() == before  # R was not created
    got = cur.execute("SELECT S.i, SUM(S.v) AS v FROM S GROUP BY S.i").fetch_tensor()  # S re-shipped
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    assert set(_nodes_of(_actors())) == {head}

    added = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    got = cur.execute("SELECT S.i, SUM(S.v) AS v FROM S GROUP BY S.i").fetch_tensor()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    assert set(_nodes_of(_actors())) == {head, added.node_id}  # the next statement used the new node
    con.close()
