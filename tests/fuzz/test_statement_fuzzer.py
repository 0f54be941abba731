"""The statement fuzzer in CI: a fixed seed range of random and hostile statements (tests/fuzz/).

Every exception that execute() and the fetches raise must be a trdb error other than InternalError,
no statement may hang or kill the process, and the guard tensors must come out bit-identical.
A longer run by hand: python -m tests.fuzz.statement_fuzzer --seconds 600 --seed N
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_generator import Generator, Schema, TensorInfo  # noqa: E402
from statement_fuzzer import format_report, run_fuzzer  # noqa: E402

pytestmark = pytest.mark.on_cpu  # its children run under RLIMIT_AS, where CUDA cannot start (conftest.py)

FIRST_SEED, SEEDS, PER_SEED = 1000, 5, 200   # 1000 statements, ~11 s on two cores (longer runs: statement_fuzzer.py)


@pytest.mark.slow
def test_hostile_statements_raise_only_trdb_errors_and_leave_the_guards_alone():
    report = run_fuzzer(FIRST_SEED, SEEDS, PER_SEED, budget=20.0, extreme=False)
    summary = format_report(report)
    assert report["statements"] >= SEEDS * PER_SEED * 0.9, summary   # the children ran their seeds
    assert report["errors"], summary                                   # hostile input was refused
    assert report["ok"] > report["statements"] * 0.15, summary        # and much of it ran
    assert report["findings"] == [], summary
    assert report["guards_ok"], summary


def test_the_generator_is_deterministic_and_never_names_a_guard_as_a_target():
    def draw(seed):
        schema = Schema(guards=("guard_dense",), views={"fv0"})
        schema.tensors = {"guard_dense": TensorInfo("guard_dense", ("i", "j"), (64, 48), (16, 16)),
                          "f0": TensorInfo("f0", ("i", "j"), (8, 8), (4, 4))}
        generator = Generator(seed, schema, {"good": "good.npy", "csv": "coo.csv"})
        return [generator.next() for _ in range(400)]

    first = draw(5)
    assert [c.text for c in first] == [c.text for c in draw(5)]
    targets = ("INSERT INTO guard", "UPDATE guard", "DELETE FROM guard", "DROP TENSOR guard", "TENSOR guard",
               "WRT (guard", "VIEW guard")
    assert not [c.text for c in first if any(t in c.text for t in targets)]


def test_the_checks_can_fail(tmp_path):
    """A guard written behind the fuzzer's back, a raw exception and an InternalError are all findings."""
    from fuzz_generator import Case
    from statement_fuzzer import Report, SeedRun

    import trdb

    report = Report(tmp_path / "report.json")
    with open(tmp_path / "log.jsonl", "w") as log:
        run = SeedRun(7, report, watchdog=_NoWatchdog(), files={}, extreme=False, log=log)
        assert run.check_guards("before")
        run.book.execute("UPDATE guard_int SET v = guard_int.v + 1 WHERE guard_int.i = 0")
        assert not run.check_guards("after a write")

        class Raising:
            _closed = False

            def __init__(self, exc):
                self.exc = exc

            def execute(self, *args):
                raise self.exc

        for exc in (KeyError("k"), trdb.InternalError("broken"), trdb.ProgrammingError("fine")):
            run.cur = Raising(exc)
            run.run_case(0, Case("SELECT 1", kind="select"))
        run.con.close()
    kinds = [f["kind"] for f in report.data["findings"]]
    assert kinds == ["guard", "non-trdb", "internal"]
    assert report.data["errors"] == {"non-trdb:KeyError": 1, "InternalError": 1, "ProgrammingError": 1}


class _NoWatchdog:
    def begin(self, cursor, info):
        pass

    def end(self):
        return False


def test_a_child_whose_address_space_grew_starts_afresh_at_the_next_seed(monkeypatch):
    """Allocators keep address space reserved after a huge write; a child near its RLIMIT_AS failed anywhere
    (once with a segmentation fault): past RESTART_SHARE of the guard, the next seed runs in a new child,
    and that restart is no finding."""
    import statement_fuzzer

    assert statement_fuzzer.reserved_bytes() > 0  # this process's VmSize, read from /proc
    monkeypatch.setenv("TRDB_FUZZ_RESTART_SHARE", "0")  # the children restart after every seed
    report = run_fuzzer(FIRST_SEED, 2, 20, budget=20.0, extreme=False)
    assert report["seeds"] == [FIRST_SEED, FIRST_SEED + 1], format_report(report)
    assert report["children"] == 2 and report["findings"] == [], format_report(report)
