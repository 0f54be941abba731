"""The 'ray' executor at an address where no Ray cluster listens: a clear OperationalError, soon."""
from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.ray

HANG_GUARD = 120  # seconds: not a timing assertion, only so that a hang fails instead of blocking the run


def _free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (bound and let go at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("address", ["127.0.0.1:1", "127.0.0.1:{free}", "localhost:{free}"])
def test_no_cluster_at_the_address_is_a_clear_error(address):
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install 'trdb[ray]')")
    address = address.format(free=_free_port())
    script = textwrap.dedent(f"""
        import trdb
        cur = trdb.connect().cursor()
        cur.execute("CREATE TENSOR A SHAPE (4, 4) TILE (2, 2) FILL ONES")
        cur.execute("SET ray_address = '{address}'")
        cur.execute("SET executor = 'ray'")
        try:
            cur.execute("SELECT SUM(A.v) AS v FROM A").fetchall()
            print("ran")
        except trdb.OperationalError as exc:
            print("OperationalError", str(exc).splitlines()[0])
        cur.execute("SET executor = 'local'")  # the connection stays usable
        print(cur.execute("SELECT COUNT(*) FROM A").fetchall())
    """)
    # in a child: this process may be connected to a cluster already (connect() then keeps that one)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.splitlines()[-2:]
    assert first.startswith("OperationalError") and address in first and "Ray" in first, done.stdout
    assert second == "[(4,)]"
