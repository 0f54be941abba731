"""External tensors on S3: a local S3-compatible server (moto) on 127.0.0.1, credentials from the environment."""
from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import scipy.sparse

import trdb
from trdb.storage import external_reads

moto_server = pytest.importorskip("moto.server", reason="the S3 tests need moto[server]")
boto3 = pytest.importorskip("boto3")

BUCKET = "trdb-test"
MATMUL = ("SELECT X.i AS i, A.i AS j, SUM(MATMUL(X.v, TRANSPOSE(A.v))) AS v FROM X JOIN A ON X.j = A.j "
          "GROUP BY X.i, A.i")
CREATE = "CREATE TENSOR X SHAPE (64, 96) TILE (16, 16) LOCATION '{}'"


@pytest.fixture(scope="module")
def endpoint():
    """A moto S3 server on the loopback address, and credentials only in the environment."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in (("AWS_ACCESS_KEY_ID", "trdb-key"), ("AWS_SECRET_ACCESS_KEY", "trdb-secret"),
                            ("AWS_DEFAULT_REGION", "us-east-1"), ("AWS_EC2_METADATA_DISABLED", "true")):
            env.setenv(name, value)
        env.delenv("AWS_PROFILE", raising=False)
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


def _array() -> np.ndarray:
    array = np.random.default_rng(5).standard_normal((64, 96)).astype(np.float32)
    array[16:32, :] = 0  # a row of absent tiles
    return array


@pytest.fixture(scope="module")
def uploaded(endpoint, tmp_path_factory):
    """A 3-partition dataset COPY wrote, put on the server under s3://BUCKET/ds/ (with boto3, as a user would)."""
    folder = tmp_path_factory.mktemp("s3data")
    with trdb.connect() as con:
        con.execute("CREATE TENSOR A FROM ? TILE (16, 16)", [scipy.sparse.csr_matrix(_array())])  # zero tiles absent
        con.execute(f"COPY A TO '{folder / 'ds'}' (PARTITIONS 3)")
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    for part in sorted(os.listdir(folder / "ds")):
        client.upload_file(str(folder / "ds" / part / "data.parquet"), BUCKET, f"ds/{part}/data.parquet")
    return f"s3://{BUCKET}/ds"


@pytest.fixture
def con(endpoint):
    with trdb.connect() as con:
        con.execute("CREATE TENSOR A FROM ? TILE (16, 16)", [_array()])
        con.execute(f"SET s3_endpoint = '{endpoint}'")
        con.execute(f"SET external_roots = 's3://{BUCKET}'")
        yield con


def test_an_external_tensor_on_s3_gives_the_results_of_numpy(con, uploaded, monkeypatch):
    reads, original = [], external_reads.read_partition
    monkeypatch.setattr(external_reads, "read_partition", lambda *a: reads.append(a[2:4]) or original(*a))
    con.execute(CREATE.format(uploaded))
    expected = _array()
    shown = con.execute("SHOW TENSORS").fetchall()
    assert shown[1][5] == 18 and shown[1][7] == uploaded  # 24 tiles, 6 of them absent; where X lives
    assert shown[0][7] is None  # A is stored in the database
    np.testing.assert_array_equal(con.execute("SELECT * FROM X").fetch_tensor(), expected)
    con.execute("SET workers = 2")
    con.execute("SET memory_limit = '64KB'")  # X (18 KB) is past what the pool keeps: each worker streams its part
    reads.clear()
    np.testing.assert_allclose(con.execute(MATMUL).fetch_tensor(), expected @ expected.T, rtol=1e-4, atol=1e-4)
    assert sorted(reads) == [(0, 2), (1, 2)]
    row = con.execute("SELECT * FROM _trdb.tensors WHERE name = 'X'").fetchall()
    assert "trdb-secret" not in repr(row) and "trdb-key" not in repr(row)  # the catalog keeps only the URI


@pytest.mark.parametrize("location,error,message", [
    (f"s3://{BUCKET}/missing", trdb.OperationalError, "no Parquet dataset at"),
    ("s3://another-bucket/ds", trdb.OperationalError, "outside the allowed roots"),
    (f"s3://{BUCKET}/ds?endpoint_override=127.0.0.2", trdb.NotSupportedError, "has a query"),
])
def test_bad_s3_locations_are_clear_errors(con, uploaded, location, error, message):
    with pytest.raises(error, match=message) as raised:
        con.execute(CREATE.format(location))
    assert raised.value.hint
    assert [r[0] for r in con.execute("SHOW TENSORS").fetchall()] == ["A"]


def test_an_unreachable_s3_server_is_an_operational_error(con, uploaded):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    con.execute(f"SET s3_endpoint = 'http://127.0.0.1:{closed}'")
    with pytest.raises(trdb.OperationalError, match=f"cannot read '{uploaded}'") as raised:
        con.execute(CREATE.format(uploaded))
    assert "s3_endpoint" in raised.value.hint
    assert [r[0] for r in con.execute("SHOW TENSORS").fetchall()] == ["A"]
