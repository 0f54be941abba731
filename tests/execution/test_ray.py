"""The 'ray' executor on a local Ray cluster: the same results as the local executor, and its failures.

One cluster (2 CPUs) serves the whole module. Token authentication is on, as Ray documents for
`ray.init()`: the token comes from the environment (tests/conftest.py), so nothing is written under ~/.ray.
Statement-by-statement comparisons of the logic files: test_ray_cluster.py, on two nodes.
"""
from __future__ import annotations

import _thread
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import trdb
from helpers.logic_runner import logic_files, run_file
from helpers.random_queries import assert_same_results, build_case, executor_results
from helpers.ray_feeds import at_first_feed
from helpers.ray_placement import received_tiles

pytestmark = pytest.mark.ray

SQL_ROOT = Path(__file__).parent.parent / "sql"
MATMUL = "SELECT A.i, B.j, SUM(MATMUL(A.v, B.v)) AS v FROM A JOIN B ON A.j = B.i GROUP BY A.i, B.j"
SLOW = "SELECT S.i, SUM(EXP(S.v) * T.v) AS v FROM S, S AS T GROUP BY S.i"  # seconds of work: 65536 tile pairs


@pytest.fixture(scope="module")
def cluster():
    if not _ray_installed():
        pytest.skip("Ray is not installed (pip install 'trdb[ray]')")
    env = {"TRDB_MIN_PARALLEL_COST": "0"}  # small test plans still get their exchanges
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    seen: set[int] = set()
    try:
        import ray
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never a running one
        try:
            yield seen
        finally:
            ray.shutdown()
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
    assert _still_running(seen) == [], "actor processes outlived ray.shutdown()"


def _ray_installed() -> bool:
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def _still_running(pids: set[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture
def ray_cur(cluster):
    con = trdb.connect(executor="ray", workers=2)
    yield con.cursor()
    con.close()
    cluster.update(_actor_pids())  # to check at the end that none outlives the cluster


def _actors() -> list:
    from trdb.execution.ray.driver.cluster import POOL
    return POOL.actors(2, False)


def _actor_pids() -> list[int]:
    import ray
    return ray.get([actor.ping.remote() for actor in _actors()], timeout=30)


def test_without_ray_the_setting_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails, as when it is not installed
    con = trdb.connect()
    with pytest.raises(trdb.ProgrammingError, match=r"pip install 'trdb\[ray\]'"):
        con.execute("SET executor = 'ray'")
    con.close()


def test_a_ray_client_address_is_refused_with_the_reason():
    pytest.importorskip("ray")
    con = trdb.connect(executor="ray", address="ray://127.0.0.1:10001", workers=2)
    with pytest.raises(trdb.NotSupportedError, match="Ray Client does not support") as error:
        con.execute("CREATE TENSOR A SHAPE (8, 8) TILE (4, 4) FILL ONES; SELECT SUM(A.v) AS v FROM A")
    assert "ray_address = 'host:port'" in str(error.value)
    con.close()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("path", logic_files(SQL_ROOT), ids=lambda p: p.name)
def test_logic_file_under_ray(cluster, path, workers):
    run_file(path, setup=("SET executor = 'ray'", f"SET workers = {workers}"))


@pytest.mark.parametrize("seed", range(0, 40, 4))  # 10 seeds; the 2-node cluster runs 4 more
def test_random_queries_match_the_local_executor(cluster, seed):
    case = build_case(seed)
    assert_same_results(case, executor_results(case), executor_results(case, executor="ray"))


def test_fragments_run_in_actor_processes(ray_cur, monkeypatch):
    from trdb.execution.ray.driver.execution import RayExecution
    executions = []
    original = RayExecution.__enter__
    monkeypatch.setattr(RayExecution, "__enter__", lambda self: executions.append(self) or original(self))
    ray_cur.execute("CREATE TENSOR A SHAPE (256, 256) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 1)")
    ray_cur.execute("CREATE TENSOR B SHAPE (256, 256) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 2)")
    a, b = (ray_cur.execute(f"SELECT * FROM {n}").fetch_tensor() for n in "AB")
    np.testing.assert_allclose(ray_cur.execute(MATMUL).fetch_tensor(), a @ b, rtol=1e-4, atol=1e-3)
    pids = executions[-1].pids
    assert pids == set(_actor_pids()) and os.getpid() not in pids  # both workers ran fragments, none on the driver
    plan = [r[0] for r in ray_cur.execute("EXPLAIN ANALYZE " + MATMUL)]
    join = next(line for line in plan if "HashJoinExec" in line)
    assert "actual tuples=64" in join  # counted where it ran, in the actors
    assert any("moved=" in line and "moved=0 " not in line for line in plan)


def test_a_repeated_statement_costs_one_actor_call_per_fragment_and_sends_its_plan_once(ray_cur, monkeypatch):
    import ray.actor
    ray_cur.execute("CREATE TENSOR T SHAPE (4, 4) TILE (2, 2) FILL ONES")
    tiny = "SELECT T.i, T.j, T.v * 2 AS v FROM T WHERE T.i = 0"
    ray_cur.execute(tiny).fetchall()  # ships T's partitions and the fragments
    calls = []
    original = ray.actor.ActorHandle._actor_method_call

    def spy(self, method_name, args=None, **options):
        calls.append((method_name, args))
        return original(self, method_name, args=args, **options)
    monkeypatch.setattr(ray.actor.ActorHandle, "_actor_method_call", spy)
    rows = ray_cur.execute(tiny).fetchall()
    assert sorted((i, j) for i, j, _ in rows) == [(0, 0), (0, 1)] and all((v == 2).all() for *_, v in rows)
    # no ping, no release: each fragment's submission is the only call, its key sent without the fragment,
    # and its small result comes back in the reply's one item
    assert [name for name, _ in calls] == ["run", "run"]
    assert all(args[1][1] is None for _, args in calls)
    ray_cur.execute("SET ray_resident_bytes = 0")  # another variant of the plan (its scans fed): sent again
    calls.clear()
    assert len(ray_cur.execute(tiny).fetchall()) == 2
    assert any(name == "run" and isinstance(args[1][1], bytes) for name, args in calls)


def test_a_fragment_waiting_for_resume_is_closed_when_its_statement_ends():
    from trdb.execution.ray.actor.inbox import ActorExecution
    closed = []

    def output():
        try:
            yield "second piece"
        finally:
            closed.append(True)  # the fragment's close
    execution = ActorExecution()
    items = output()
    token = execution.park("first piece", items)
    assert execution.unpark(token)[0] == "first piece" and execution.unpark(token) is None
    execution.park("first piece", items)
    next(items)  # started, as a parked fragment's output is
    execution.end()
    assert closed == [True] and execution.state.cancelled.is_set()


def test_pieces_held_back_are_streamed_though_ray_sends_into_the_generator():
    """Small batches are held back for the reply; once a large one comes, they are streamed first. Ray
    sends its generator statistics into the generator (not None), which a `yield from` a list cannot take."""
    from trdb.execution.interpreter import router_for
    from trdb.execution.ray.actor.worker import INLINE_BYTES, _items
    from trdb.kernels.numpy_backend import NUMPY_BACKEND
    from trdb.plan.physical_operators import Gather

    small, large = [(0, np.ones(8))], [(1, np.ones(INLINE_BYTES // 4))]

    class Fragment:
        batches = [small, small, large]

        def next_batch(self):
            return self.batches.pop(0) if self.batches else None
    items = _items(Fragment(), router_for(Gather()), 1, NUMPY_BACKEND, None)
    got = [next(items)]
    with pytest.raises(StopIteration) as end:
        while True:
            got.append(items.send(object()))  # as Ray does
    assert end.value.value == []  # nothing left held for the last item
    assert [item[3] for item in got[:2]] == [small, small] and got[2][:3] == ([0], 1, got[2][2])
    assert got[3] is large and len(got) == 4


def test_connect_takes_the_executor_and_the_cluster_address(cluster):
    import ray
    address = ray.get_runtime_context().gcs_address
    con = trdb.connect(executor="ray", address=address, workers=2)
    cur = con.cursor()
    assert cur.execute("SHOW executor").fetchone()[0] == "ray"
    assert cur.execute("SHOW ray_address").fetchone()[0] == address
    cur.execute("CREATE TENSOR A SHAPE (8, 8) TILE (4, 4) FILL ONES")
    assert cur.execute("SELECT SUM(A.v) AS v FROM A").fetchone()[0].sum() == 64
    con.close()


def test_an_error_in_an_actor_is_the_local_executors_error(ray_cur):
    ray_cur.execute("CREATE TENSOR A SHAPE (8, 8) TILE (4, 4) FILL ONES")
    ray_cur.execute("CREATE TENSOR X SHAPE (6, 10) TILE (4, 4) FILL ONES")  # edge tiles of one column differ
    for _ in range(3):
        with pytest.raises(trdb.DataError, match=r"SUM: tiles of one group have shapes"):
            ray_cur.execute("SELECT X.j, SUM(X.v) AS v FROM X GROUP BY X.j")
    assert ray_cur.execute("SELECT COUNT(*) FROM A").fetchone() == (4,)


def test_plans_kept_on_one_partition_run_self_joins_and_single_tile_products(ray_cur):
    from trdb.config.unit_costs import MIN_PARALLEL_COST
    ray_cur.execute(f"SET min_parallel_cost = {MIN_PARALLEL_COST}")  # the default; this module sets 0
    small = np.random.default_rng(5).standard_normal((64, 64)).astype(np.float32)
    one = np.random.default_rng(6).standard_normal((512, 512)).astype(np.float32)
    ray_cur.execute("CREATE TENSOR S FROM ? TILE (32, 32)", [small])  # a cheap plan: one partition
    ray_cur.execute("CREATE TENSOR O FROM ? TILE (512, 512)", [one])  # one tuple: one partition
    square = "SELECT {0}.i, T.j, SUM(MATMUL({0}.v, T.v)) AS v FROM {0} JOIN {0} AS T ON {0}.j = T.i GROUP BY {0}.i, T.j"
    for name, value in (("S", small), ("O", one)):
        plan = "\n".join(row[0] for row in ray_cur.execute("EXPLAIN " + square.format(name)))
        assert "GatherExec" not in plan
        for _ in range(2):  # the second reads the partitions kept by the first
            got = ray_cur.execute(square.format(name)).fetch_tensor()  # both scans of one tensor: its refs twice
            expected = value.astype(np.float64) @ value.astype(np.float64)
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


def test_a_killed_actor_fails_the_statement_which_changes_nothing(ray_cur, monkeypatch):
    ray_cur.execute("CREATE TENSOR S SHAPE (1536, 1536) TILE (96, 96) FILL RANDOM_NORMAL(0, 1, 3)")
    ray_cur.execute("SET ray_resident_bytes = 0")  # the driver feeds S: see at_first_feed
    before = ray_cur.execute("SHOW TENSORS").fetchall()
    killed = at_first_feed(monkeypatch, _kill)
    with pytest.raises(trdb.OperationalError) as error:
        ray_cur.execute(f"CREATE TENSOR R AS {SLOW}")
    assert killed.is_set()
    assert "Ray worker 1 died" in str(error.value) and "rolled back" in str(error.value)
    assert ray_cur.execute("SHOW TENSORS").fetchall() == before  # R was not created
    monkeypatch.undo()
    ray_cur.execute("CREATE TENSOR A SHAPE (256, 256) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 1)")
    ray_cur.execute("CREATE TENSOR B SHAPE (256, 256) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 2)")
    a, b = (ray_cur.execute(f"SELECT * FROM {n}").fetch_tensor() for n in "AB")
    np.testing.assert_allclose(ray_cur.execute(MATMUL).fetch_tensor(), a @ b, rtol=1e-4, atol=1e-3)


def _forwarding() -> int:
    from trdb.execution.ray.driver.threads import running
    return running()


def _kill(actor) -> None:
    import ray
    ray.kill(actor)
    _wait_until_dead(actor)  # ray.kill is asynchronous


def test_an_actor_killed_between_statements_is_replaced(ray_cur):
    import ray
    ray_cur.execute("CREATE TENSOR A SHAPE (64, 64) TILE (16, 16) FILL ONES")
    assert ray_cur.execute("SELECT COUNT(*) FROM A").fetchone() == (16,)
    actor = _actors()[0]
    ray.kill(actor)
    _wait_until_dead(actor)  # ray.kill is asynchronous: until it lands the actor still answers, and
    assert ray_cur.execute("SELECT COUNT(*) FROM A").fetchone() == (16,)  # would die mid-statement


def _wait_until_dead(actor, seconds: float = 30.0) -> None:
    import ray
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ping.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def test_cursor_close_cancels_a_ray_query(ray_cur, monkeypatch):
    ray_cur.execute("CREATE TENSOR S SHAPE (1536, 1536) TILE (96, 96) FILL RANDOM_NORMAL(0, 1, 3)")
    ray_cur.execute("SET ray_resident_bytes = 0")  # the driver feeds S: see at_first_feed
    closed = at_first_feed(monkeypatch, lambda actor: ray_cur.close())
    began = time.monotonic()
    with pytest.raises(trdb.OperationalError, match="cancelled"):
        ray_cur.execute(SLOW)
    assert closed.is_set() and time.monotonic() - began < 20
    assert _forwarding() == 0  # the driver's tasks of the statement have all ended
    assert ray_cur.connection.cursor().execute("SELECT COUNT(*) FROM S").fetchone() == (256,)


def test_ctrl_c_stops_a_ray_query_and_the_connection_survives(ray_cur, monkeypatch):
    ray_cur.execute("CREATE TENSOR S SHAPE (1536, 1536) TILE (96, 96) FILL RANDOM_NORMAL(0, 1, 3)")
    ray_cur.execute("SET ray_resident_bytes = 0")  # the driver feeds S: see at_first_feed
    interrupted = at_first_feed(monkeypatch, lambda actor: _thread.interrupt_main())  # what Ctrl-C does
    with pytest.raises(KeyboardInterrupt):
        ray_cur.execute(SLOW)
    assert interrupted.is_set()
    assert _forwarding() == 0  # the driver's tasks of the statement have all ended
    assert ray_cur.execute("SELECT COUNT(*) FROM S").fetchone() == (256,)


def test_minimize_trains_the_same_model(cluster):
    script = Path(__file__).parent.parent.parent / "queries" / "linear_regression.sql"
    statements = script.read_text().replace("steps = 60", "steps = 3")
    weights = []
    for settings in ({}, {"executor": "ray"}):
        con = trdb.connect(workers=2, **settings)
        cur = con.cursor()
        cur.execute(statements)
        weights.append(cur.execute("SELECT * FROM W").fetch_tensor())
        con.close()
    np.testing.assert_allclose(weights[1], weights[0], rtol=1e-5, atol=1e-6)


def test_the_shell_runs_on_the_cluster(cluster, tmp_path):
    import ray
    env = dict(os.environ, TRDB_EXECUTOR="ray", TRDB_WORKERS="2",
               TRDB_RAY_ADDRESS=ray.get_runtime_context().gcs_address)
    done = subprocess.run([sys.executable, "-m", "trdb", "-c",
                           "CREATE TENSOR A SHAPE (8, 8) TILE (4, 4) FILL ONES; SHOW executor; "
                           "SELECT COUNT(*) AS n FROM A", "--mode", "csv"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["executor", "ray", "n", "4"]


def test_kept_partitions_are_reused_until_a_write_and_never_stale(ray_cur):
    from trdb.execution.ray.driver.residency import TOTAL
    ray_cur.execute("CREATE TENSOR A SHAPE (256, 256) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 1)")
    ray_cur.execute("CREATE TENSOR B SHAPE (256, 256) TILE (64, 64) FILL RANDOM_NORMAL(0, 1, 2)")

    def product() -> tuple[np.ndarray, dict]:
        before = TOTAL.as_dict()
        result = ray_cur.execute(MATMUL).fetch_tensor()
        return result, {name: value - before[name] for name, value in TOTAL.as_dict().items()}
    a, b = (ray_cur.execute(f"SELECT * FROM {n}").fetch_tensor() for n in "AB")
    product()  # ships A and B
    again, sent = product()
    np.testing.assert_allclose(again, a @ b, rtol=1e-4, atol=1e-3)
    assert sent["bytes_sent"] == 0 and sent["partitions_reused"] > 0, sent
    ray_cur.execute("UPDATE A SET v = A.v * 2")  # a new version of A: shipped again, B still kept
    changed, sent = product()
    np.testing.assert_allclose(changed, 2 * (a @ b), rtol=1e-4, atol=1e-3)
    assert 0 < sent["tensor_bytes_sent"] <= a.nbytes + 4096 and sent["partitions_reused"] > 0, sent
    ray_cur.execute("BEGIN")
    ray_cur.execute("UPDATE A SET v = A.v * 3")
    np.testing.assert_allclose(product()[0], 6 * (a @ b), rtol=1e-4, atol=1e-3)
    ray_cur.execute("ROLLBACK")  # the version read inside the transaction is gone: never reused
    np.testing.assert_allclose(product()[0], 2 * (a @ b), rtol=1e-4, atol=1e-3)
    ray_cur.execute("UPDATE A SET v = A.v * 5")
    np.testing.assert_allclose(product()[0], 10 * (a @ b), rtol=1e-4, atol=1e-3)


def test_partitions_past_the_memory_budget_wait_on_the_nodes_disk(ray_cur):
    import glob
    import tempfile

    from trdb.execution.ray.actor.disk_cache import PREFIX
    from trdb.execution.ray.driver.residency import RESIDENCY, TOTAL, database_id
    rng = np.random.default_rng(0)
    values = {name: rng.standard_normal((256, 256), dtype=np.float32) for name in "ABCD"}
    for name, value in values.items():
        ray_cur.execute(f"CREATE TENSOR {name} FROM ? TILE (64, 64)", [value])
    ray_cur.execute("SET ray_resident_bytes = '300KB'")  # each actor holds the partitions of one product only

    def product(left: str, right: str) -> dict:
        before = TOTAL.as_dict()
        got = ray_cur.execute(f"SELECT {left}.i, {right}.j, SUM(MATMUL({left}.v, {right}.v)) AS v FROM {left} "
                              f"JOIN {right} ON {left}.j = {right}.i GROUP BY {left}.i, {right}.j").fetch_tensor()
        np.testing.assert_allclose(got, values[left] @ values[right], rtol=1e-4, atol=1e-3)
        return {name: value - before[name] for name, value in TOTAL.as_dict().items()}
    product("A", "B")
    product("C", "D")  # A's and B's partitions go to the actors' disk
    database = database_id(ray_cur.connection._session().catalog.pool)
    on_disk = [key.table for actor in _actors() for key in RESIDENCY.on_disk(actor) if key.database == database]
    files = glob.glob(f"{tempfile.gettempdir()}/{PREFIX}*/*.arrow")
    assert len(set(on_disk)) == 2 and len(files) >= len(on_disk)
    sent = product("A", "B")  # read back from disk: nothing shipped
    assert sent["bytes_sent"] == 0 and sent["partitions_reused"] > 0, sent
    table = ray_cur.connection._session().catalog.require_tensor("C").table

    def versions_of_c(where) -> set:
        return {key.version for actor in _actors() for key in where(actor)
                if key.table == table and key.database == database}
    old = versions_of_c(RESIDENCY.on_disk)  # C and D went to disk as A and B came back
    assert old
    ray_cur.execute("UPDATE C SET v = C.v * 2")  # reads C: its partitions come back from disk
    values["C"] = values["C"] * 2
    assert product("C", "D")["tensor_bytes_sent"] > 0  # C's new version is shipped (its changed tiles)
    product("A", "B")  # C's and D's partitions leave memory: the old version of C is dropped, not kept on disk
    assert versions_of_c(RESIDENCY.on_disk) and not (versions_of_c(RESIDENCY.on_disk) | versions_of_c(RESIDENCY.held)) & old


def test_a_cache_file_removed_from_a_workers_disk_fails_one_statement_and_the_next_ships_again(ray_cur):
    import glob
    import tempfile

    from trdb.execution.ray.actor.disk_cache import PREFIX
    rng = np.random.default_rng(1)
    values = {name: rng.standard_normal((256, 256), dtype=np.float32) for name in ("E", "F", "G", "H")}
    for name, value in values.items():
        ray_cur.execute(f"CREATE TENSOR {name} FROM ? TILE (64, 64)", [value])
    ray_cur.execute("SET ray_resident_bytes = '300KB'")

    def product(left: str, right: str) -> np.ndarray:
        return ray_cur.execute(f"SELECT {left}.i, {right}.j, SUM(MATMUL({left}.v, {right}.v)) AS v FROM {left} "
                               f"JOIN {right} ON {left}.j = {right}.i GROUP BY {left}.i, {right}.j").fetch_tensor()
    product("E", "F")
    product("G", "H")  # E's and F's partitions go to the actors' disk
    files = glob.glob(f"{tempfile.gettempdir()}/{PREFIX}*/*.arrow")
    assert files
    for path in files:  # a cleaner of the temp directory
        os.unlink(path)
    ray_cur.execute("CREATE TENSOR P SHAPE (256, 256) TILE (64, 64)")
    with pytest.raises(trdb.OperationalError, match="lost a partition it had moved to its node's disk"):
        ray_cur.execute("INSERT INTO P SELECT E.i, F.j, SUM(MATMUL(E.v, F.v)) AS v FROM E JOIN F ON E.j = F.i "
                        "GROUP BY E.i, F.j")
    assert ray_cur.execute("SELECT COUNT(*) FROM P").fetchone()[0] == 0  # changed nothing
    np.testing.assert_allclose(product("E", "F"), values["E"] @ values["F"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(product("G", "H"), values["G"] @ values["H"], rtol=1e-4, atol=1e-3)


def _result_descriptors() -> list[str]:
    """This process's open descriptors of result arrays in shared memory."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return [name for name in names if "trdb-result" in name]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_actors_on_the_drivers_node_write_the_products_into_the_fetched_array(ray_cur, monkeypatch, dtype):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((300, 200)).astype(dtype)
    a[128:256] = 0  # row tile 1 of A is absent: so are the result's tiles (1, *), zeros in the array
    b = rng.standard_normal((200, 250)).astype(dtype)
    ray_cur.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [a])  # edge tiles on every axis
    ray_cur.execute("DELETE FROM A WHERE A.i = 1")  # a dense load keeps the zero tiles (zeros are values)
    ray_cur.execute("CREATE TENSOR B FROM ? TILE (128, 128)", [b])
    seen = received_tiles(monkeypatch)
    got = ray_cur.execute(MATMUL).fetch_tensor()
    assert got.dtype == np.dtype(dtype) and got.shape == (300, 250)
    assert got.flags.c_contiguous and got.flags.writeable  # an array like any other fetch_tensor() gives
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    assert [placed for _, placed in seen] == [True] * 4  # both actors on this machine: each present tile placed
    assert _result_descriptors() == []  # the shared array's descriptor went with the statement
    rows = ray_cur.execute(MATMUL).fetchall()  # rows hold views of the shared array, in their places
    ray_cur.execute("SET executor = 'local'")
    local = ray_cur.execute(MATMUL).fetchall()
    assert sorted(r[:2] for r in rows) == sorted(r[:2] for r in local) == [(0, 0), (0, 1), (2, 0), (2, 1)]
    for (i, j, v), (_, _, w) in zip(sorted(rows, key=lambda r: r[:2]), sorted(local, key=lambda r: r[:2])):
        np.testing.assert_allclose(v, w, rtol=1e-4, atol=1e-3)
    again = ray_cur.execute(MATMUL).fetch_tensor()  # the first result is the caller's: a new array
    assert not np.shares_memory(again, got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


def test_tiles_an_actor_could_not_place_are_copied_into_the_fetched_array_as_they_arrive(ray_cur, monkeypatch):
    from trdb.execution.ray.driver.execution import RayExecution
    from trdb.execution.result_canvas import ResultCanvas
    handed_over = []
    assembled = ResultCanvas.assembled
    monkeypatch.setattr(ResultCanvas, "assembled", lambda self, *args: handed_over.append(assembled(self, *args))
                        or handed_over[-1])
    monkeypatch.setattr(RayExecution, "_ticket", lambda self, node: None)  # as for actors on another machine
    seen = received_tiles(monkeypatch)
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((300, 200), dtype=np.float32), rng.standard_normal((200, 250), dtype=np.float32)
    ray_cur.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [a])
    ray_cur.execute("CREATE TENSOR B FROM ? TILE (128, 128)", [b])
    got = ray_cur.execute(MATMUL).fetch_tensor()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    assert [placed for _, placed in seen] == [False] * 6  # every tile came as values
    assert len(handed_over) == 1 and handed_over[0] is got  # each was copied into its place: no assembly after


def test_a_failed_statement_leaves_no_shared_result_array(ray_cur, monkeypatch):
    from trdb.execution.ray import cross_process_canvas as shared_canvas
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((300, 200), dtype=np.float32), rng.standard_normal((200, 250), dtype=np.float32)
    ray_cur.execute("CREATE TENSOR A FROM ? TILE (128, 128)", [a])
    ray_cur.execute("CREATE TENSOR B FROM ? TILE (128, 128)", [b])

    def fail(self, rows):
        raise trdb.OperationalError("the driver failed while placing the result")
    with monkeypatch.context() as patched:
        patched.setattr(shared_canvas.SharedCanvas, "received", fail)
        with pytest.raises(trdb.OperationalError, match="while placing"):
            ray_cur.execute(MATMUL).fetch_tensor()
    assert _result_descriptors() == []
    np.testing.assert_allclose(ray_cur.execute(MATMUL).fetch_tensor(), a @ b, rtol=1e-4, atol=1e-3)


def test_a_ticket_maps_only_the_array_it_was_made_for(cluster, monkeypatch):
    import dataclasses

    from trdb.execution.ray import cross_process_canvas as shared_canvas
    from trdb.execution.ray.cross_process_canvas import SharedCanvas, attach
    from trdb.execution.result_canvas import ResultCanvas
    shared = SharedCanvas(ResultCanvas(None, (6, 4), (3, 4), np.dtype(np.float64)))
    ticket = shared.ticket
    mapped = attach(ticket)  # as an actor on this node maps it (this process is as good as any)
    mapped.array[...] = 7.0
    np.testing.assert_array_equal(shared.canvas.array, np.full((6, 4), 7.0))
    assert attach(dataclasses.replace(ticket, token=bytes(len(ticket.token)))) is None  # another array's token
    assert attach(dataclasses.replace(ticket, machine=("another machine", 0, 0))) is None
    opened = []
    with open(__file__, "rb") as other, monkeypatch.context() as patched:  # not a memory file of trdb's:
        patched.setattr(shared_canvas.os, "open", lambda *args: opened.append(args))  # never opened
        assert attach(dataclasses.replace(ticket, fd=other.fileno())) is None
    assert opened == []
    assert attach(dataclasses.replace(ticket, size=ticket.size + 1)) is None
    assert attach(dataclasses.replace(ticket, fd=0)) is None  # not the array (standard input)
    assert attach(None) is None
    shared.close()
    assert attach(ticket) is None  # its descriptor is gone (or is another file now)
    np.testing.assert_array_equal(shared.canvas.array, np.full((6, 4), 7.0))  # the array itself stays


def test_minimize_steps_run_their_program_on_the_actors(ray_cur, monkeypatch):
    """A MINIMIZE's later steps run the first step's physical plans again (pipeline/step_program.py) on Ray's
    actors, its forward pass kept by them between plans: the values are numpy's."""
    from trdb.statements import minimize
    ran = []
    original = minimize.run_program
    monkeypatch.setattr(minimize, "run_program", lambda *args: ran.append(original(*args)) or ran[-1])
    rng = np.random.default_rng(9)
    X, Y = rng.standard_normal((64, 8)).astype(np.float32), rng.standard_normal((64, 2)).astype(np.float32)
    W = (rng.standard_normal((8, 2)) * 0.3).astype(np.float32)
    ray_cur.execute("CREATE TENSOR X FROM ? TILE (16, 4)", [X])
    ray_cur.execute("CREATE TENSOR Y FROM ? TILE (16, 2)", [Y])
    ray_cur.execute("CREATE TENSOR W FROM ? TILE (4, 2)", [W])
    ray_cur.execute("CREATE VIEW loss AS SELECT SUM(SUMSQ(z.v - Y.v)) AS v FROM (SELECT X.i, W.j, "
                    "SUM(MATMUL(X.v, W.v)) AS v FROM X JOIN W ON X.j = W.i GROUP BY X.i, W.j) AS z "
                    "JOIN Y ON z.i = Y.i AND z.j = Y.j")
    rows = ray_cur.execute("MINIMIZE loss WRT (W) WITH (learning_rate = 0.002, steps = 4)").fetchall()
    w, losses = W.astype(np.float64), []
    for _ in range(4):
        error = X @ w - Y
        losses.append(float((error ** 2).sum()))
        w = w - 0.002 * (X.T @ (2 * error))
    np.testing.assert_allclose([loss for _, loss in rows], losses, rtol=1e-4)
    np.testing.assert_allclose(ray_cur.execute("SELECT * FROM W").fetch_tensor(), w, rtol=1e-4, atol=1e-5)
    assert len(ran) == 3 and all(result is not None for result in ran)  # steps 2-4 ran step 1's program
