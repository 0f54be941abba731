"""The statement fuzzer's runner: random statements against trdb in a bounded child process.

Run by hand:  python -m tests.fuzz.statement_fuzzer --seconds 600 --seed N   (or the file itself)
It prints the statements run, the errors by PEP 249 class, the findings (exceptions that are not
trdb errors, InternalErrors, statements that hang, a dying process, guard tensors that changed)
with reproducers, and whether the guards are unchanged. tests/fuzz/test_statement_fuzzer.py runs
a fixed seed range of it in CI.

Each seed is one fresh in-memory database: guard tensors first (snapshotted with fetch_tensor),
then statements from fuzz_generator.Generator, each followed by a random fetch, then the guards
compared bit for bit. The child runs under RLIMIT_AS (4 GiB) with a watchdog that cancels a
statement running past its budget (a finding) and ends the child if it will not stop; the parent
then goes on with the next seed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

# a guard, not a measure: 4 GiB and more per core (BLAS and DuckDB start a thread per core, each with its
# stack and buffers: on 16 cores 4 GiB alone left no room to start a thread)
ADDRESS_SPACE = (4 << 30) + (os.cpu_count() or 2) * (256 << 20)
CLASSES = ("InternalError", "ProgrammingError", "DataError", "OperationalError", "IntegrityError",
           "NotSupportedError", "InterfaceError", "DatabaseError", "Error")
FETCHES = ("fetchall", "fetch_tensor", "fetch_arrow", "fetchnumpy", "fetchall", "fetch_tensor", "fetchmany",
           "fetch_sparse", None)
ROWS = {"select", "explain", "inspect", "plain", "plain_hostile", "settings", "minimize", "misuse", "soup",
        "truncated", "mutated"}        # statement kinds that may return rows: fetched after they run
HUNG_EXIT = 3
# A child whose address space grew past this share of the guard starts afresh at its next seed: after a huge
# write (cancelled or not) the allocators keep their address space reserved though little stays resident
# (5 GB reserved, 240 MB resident after a 40 GB load was cancelled), and a child at its limit failed
# allocations anywhere, once with a segmentation fault in native code (a crash that was only the guard's);
# the environment variable TRDB_FUZZ_RESTART_SHARE sets the share
RESTART_SHARE = float(os.environ.get("TRDB_FUZZ_RESTART_SHARE", "0.6"))
RESTART_EXIT = 4


def reserved_bytes() -> int:
    """The process's address space (what RLIMIT_AS limits), from /proc; 0 where it cannot be read."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) << 10 for line in status if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return 0


# ---------------------------------------------------------------------------------------- child side

def guard_statements():
    """(name, statement, params): a dense float32, an int32, a CSR-tiled and a rank-1 guard."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(7)
    dense = np.zeros((64, 64), "float32")
    mask = rng.random((64, 64)) < 0.03
    dense[mask] = rng.standard_normal(mask.sum()).astype("float32")
    dense[32:, :32] = 0                       # one all-zero tile: absent
    return [
        ("guard_dense", "CREATE TENSOR guard_dense SHAPE (64, 48) TILE (16, 16) FILL RANDOM_NORMAL(0, 1, 1)", None),
        ("guard_int", "CREATE TENSOR guard_int SHAPE (48, 32) TILE (16, 16) DTYPE int32 "
                      "FILL RANDOM_UNIFORM(-100, 100, 2)", None),
        ("guard_csr", "CREATE TENSOR guard_csr FROM ? TILE (32, 32)", [sp.csr_matrix(dense)]),
        ("guard_vec", "CREATE TENSOR guard_vec SHAPE (40) TILE (16) DTYPE float64 FILL RANDOM_UNIFORM(-1, 1, 3)",
         None),
    ]


def hostile_files(folder: Path) -> dict:
    """Input files for CREATE TENSOR FROM 'file' and FROM COO 'file': good ones and broken ones."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {}
    np.save(folder / "good.npy", np.arange(48, dtype="float32").reshape(6, 8))
    np.save(folder / "pickled.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    raw = (folder / "good.npy").read_bytes()
    (folder / "truncated.npy").write_bytes(raw[:len(raw) - 20])
    header = raw.replace(b"(6, 8)", b"(10000000000000, 8)".ljust(6))  # a header claiming 320 TB
    (folder / "liar.npy").write_bytes(header)
    (folder / "text.npy").write_text("not an array\n")
    (folder / "coo.csv").write_text("i,j,x\n0,0,1.5\n3,2,-2\n9,9,4\n-1,0,1\n0,0,7\n")
    pq.write_table(pa.table({"i": [0, 1, 2], "j": [2, 1, 0], "x": [1.0, 2.0, 3.0]}), folder / "coo.parquet")
    for name in ("good", "pickled", "truncated", "liar", "text"):
        files[name] = str(folder / f"{name}.npy")
    files.update(csv=str(folder / "coo.csv"), parquet=str(folder / "coo.parquet"), missing=str(folder / "no.npy"),
                 folder=str(folder), etc="/etc/passwd", quote=str(folder / "it's.npy"))
    return files


def classify(exc) -> str | None:
    """The PEP 249 class name of a trdb error, or None for an exception that is not one."""
    import trdb

    for name in CLASSES:
        if isinstance(exc, getattr(trdb, name)):
            return name
    return None


def describe_params(params) -> str:
    def one(p):
        shape = getattr(p, "shape", None)
        if shape is not None:
            return f"{type(p).__name__}(shape={tuple(shape)}, dtype={getattr(p, 'dtype', '?')})"
        return repr(p)[:60]
    if params is None:
        return "None"
    if isinstance(params, (list, tuple)):
        return "[" + ", ".join(one(p) for p in params) + "]"
    return one(params)


def where_raised(exc) -> str:
    """file:line of the innermost trdb frame of exc (or of its cause, for an InternalError)."""
    target = exc.__cause__ or exc
    frames = traceback.extract_tb(target.__traceback__)
    for frame in reversed(frames):
        if "/engine/" in frame.filename or "/parser/" in frame.filename:
            return f"{frame.filename.split('/main/')[-1]}:{frame.lineno} {frame.name}"
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


class Report:
    """Counts and findings of one child, written to a JSON file after each seed and on a hang."""

    def __init__(self, path: Path):
        self.path = path
        self.data = {"statements": 0, "ok": 0, "errors": {}, "kinds": {}, "findings": [], "seeds": [],
                     "guards_ok": True, "elapsed": 0.0}

    def count(self, kind, outcome):
        self.data["statements"] += 1
        self.data["ok"] += outcome == "ok"
        per_kind = self.data["kinds"].setdefault(kind, {"run": 0, "ok": 0})
        per_kind["run"] += 1
        per_kind["ok"] += outcome == "ok"

    def error(self, name):
        self.data["errors"][name] = self.data["errors"].get(name, 0) + 1

    def finding(self, **fields):
        self.data["findings"].append(fields)

    def save(self):
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, default=str))
        os.replace(tmp, self.path)


class Watchdog(threading.Thread):
    """Cancels the statement that runs past `budget` seconds (closing its cursor), and ends the
    process if it is still running `grace` seconds later."""

    def __init__(self, budget: float, on_hang, grace: float = 15.0):
        super().__init__(daemon=True)
        self.budget, self.grace, self.on_hang = budget, grace, on_hang
        self.lock = threading.Lock()
        self.current = None           # (started, cursor, case info) while a statement runs
        self.fired = False

    def begin(self, cursor, info):
        with self.lock:
            self.current, self.fired = (time.monotonic(), cursor, info), False

    def end(self) -> bool:
        with self.lock:
            self.current = None
            return self.fired

    def run(self):
        while True:
            time.sleep(0.25)
            with self.lock:
                current, fired = self.current, self.fired
            if current is None:
                continue
            started, cursor, info = current
            age = time.monotonic() - started
            if age > self.budget and not fired:
                with self.lock:
                    self.fired = True
                self.on_hang(info, age, cancelled=None)
                try:
                    cursor.close()
                except Exception:  # noqa: BLE001  (cancelling is best effort)
                    pass
            elif age > self.budget + self.grace:
                self.on_hang(info, age, cancelled=False)
                os._exit(HUNG_EXIT)


class SeedRun:
    """One seed: a fresh database, the guards, `count` statements, the guards checked."""

    def __init__(self, seed, report: Report, watchdog: Watchdog, files: dict, extreme: bool, log):
        from fuzz_generator import Generator, Schema

        import trdb

        self.trdb, self.seed, self.report, self.watchdog, self.log = trdb, seed, report, watchdog, log
        self.con = trdb.connect(memory_limit="1GB", workers=2)
        self.cur, self.book = self.con.cursor(), self.con.cursor()
        self.schema = Schema()
        self.setup = []               # statements that changed the database, for reproducers
        self.snapshots = self.create_guards()
        self.schema.guards = tuple(self.snapshots)
        self.refresh()
        self.generator = Generator(seed, self.schema, files, extreme=extreme)

    def create_guards(self):
        snapshots = {}
        for name, text, params in guard_statements():
            self.book.execute(text, params)
            snapshots[name] = self.book.execute(f"SELECT * FROM {name}").fetch_tensor().copy()
        self.guard_rows = self.show_guards()
        return snapshots

    def show_guards(self):
        rows = self.book.execute("SHOW TENSORS").fetchall()
        return {r[0]: tuple(r[:5]) for r in rows if str(r[0]).startswith("guard_")}

    def refresh(self):
        """The schema from SHOW TENSORS / SHOW VIEWS and the transaction state from the session."""
        from fuzz_generator import TensorInfo

        live = self.con._live
        db = getattr(live, "db", None)
        self.schema.in_transaction = bool(getattr(db, "explicit_transaction", False))
        self.schema.aborted = bool(getattr(live, "aborted", False))
        if self.schema.aborted:
            return
        try:
            rows = self.book.execute("SHOW TENSORS").fetchall()
            views = self.book.execute("SHOW VIEWS").fetchall()
        except self.trdb.Error:
            return
        except Exception as exc:  # noqa: BLE001  (a finding like any other)
            self.finding("non-trdb", "SHOW TENSORS (bookkeeping)", None, "execute", exc)
            return
        tensors = {}
        for name, keys, shape, tile, dtype, *_ in rows:
            try:
                key_names = tuple(k.strip() for k in str(keys).split(",") if k.strip())
                tensors[name] = TensorInfo(name, key_names, tuple(json.loads(shape)), tuple(json.loads(tile)), dtype)
            except (ValueError, TypeError):
                continue
        self.schema.tensors = tensors
        self.schema.views = {str(r[0]) for r in views}

    def finding(self, kind, text, params, phase, exc=None, **extra):
        fields = dict(kind=kind, seed=self.seed, phase=phase, statement=text[:3000],
                      params=describe_params(params), setup=self.setup[-25:], **extra)
        if exc is not None:
            cause = exc.__cause__
            fields.update(exception=type(exc).__name__, message=str(exc).splitlines()[0][:400] if str(exc) else "",
                          cause=type(cause).__name__ if cause else None, where=where_raised(exc),
                          trace="".join(traceback.format_exception(exc)[-6:])[-3000:])
        self.report.finding(**fields)

    def outcome(self, exc, text, params, phase, kind):
        """Count an exception; a non-trdb one or an InternalError is a finding."""
        if isinstance(exc, self.trdb.InternalError):
            self.report.error("InternalError")
            self.finding("internal", text, params, phase, exc, statement_kind=kind)
            return
        name = classify(exc)
        samples = self.report.data.setdefault("samples", {}).setdefault(kind, [])
        if len(samples) < 12:
            samples.append(f"{text[:300]!r} -> {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
        if name is None:
            self.report.error("non-trdb:" + type(exc).__name__)
            self.finding("non-trdb", text, params, phase, exc, statement_kind=kind)
        else:
            self.report.error(name)

    def run_case(self, index, case):
        self.log.write(json.dumps({"seed": self.seed, "index": index, "text": case.text[:4000],
                                   "params": describe_params(case.params)}) + "\n")
        self.log.flush()
        info = {"seed": self.seed, "index": index, "text": case.text[:3000], "params": describe_params(case.params),
                "setup": self.setup[-25:]}
        outcome, cur = "ok", self.cur
        self.watchdog.begin(cur, info)
        try:
            if case.many:
                cur.executemany(case.text, case.params)
            else:
                cur.execute(case.text, case.params)
        except Exception as exc:  # noqa: BLE001  (every exception is counted; the fuzzer goes on)
            outcome = "error"
            if not self.watchdog.end():
                self.outcome(exc, case.text, case.params, "execute", case.kind)
        if outcome == "ok":
            fetch = self.generator.pick(FETCHES) if case.kind in ROWS or self.generator.chance(0.1) else None
            try:
                if fetch == "fetchmany":
                    cur.fetchone(), cur.fetchmany(2)
                elif fetch is not None:
                    getattr(cur, fetch)()
            except Exception as exc:  # noqa: BLE001
                if not self.watchdog.end():
                    self.outcome(exc, case.text, case.params, fetch, case.kind)
            if case.writes:
                self.setup.append(case.text[:500] + ("  -- params " + describe_params(case.params)
                                                     if case.params is not None else ""))
        if self.watchdog.end() or cur._closed:
            self.cur = self.con.cursor()
        self.report.count(case.kind, outcome)
        if case.writes or index % 20 == 0:
            self.refresh()

    def check_guards(self, where):
        """The guards bit-identical to their snapshots and listed as before; else a finding."""
        import numpy as np

        if getattr(self.con._live, "aborted", False):
            return True                 # only ROLLBACK runs now; the final check comes after it
        problems = []
        try:
            for name, before in self.snapshots.items():
                after = self.book.execute(f"SELECT * FROM {name}").fetch_tensor()
                if after.dtype != before.dtype or after.shape != before.shape or \
                        not np.array_equal(after.view(np.uint8), before.view(np.uint8)):
                    problems.append(f"{name} changed")
            rows = self.show_guards()
            if rows != self.guard_rows:
                problems.append(f"SHOW TENSORS lists {rows} instead of {self.guard_rows}")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"reading the guards failed: {type(exc).__name__}: {exc}")
        if problems:
            self.report.data["guards_ok"] = False
            self.report.finding(kind="guard", seed=self.seed, phase=where, statement="; ".join(problems)[:2000],
                                params="None", setup=self.setup[-40:])
        return not problems

    def run(self, count, deadline):
        for index in range(count):
            if time.monotonic() > deadline:
                break
            self.run_case(index, self.generator.next())
            if index % 100 == 99 and not self.check_guards(f"after statement {index}"):
                break
        try:
            self.con.rollback()
        except Exception:  # noqa: BLE001  (an open transaction that will not end: the check says so)
            pass
        self.refresh()
        self.check_guards("at the end")
        self.con.close()


def child_main(args):
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    os.environ.setdefault("TRDB_MIN_PARALLEL_COST", "0")   # exercise the parallel paths on small data
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    report = Report(Path(args.out))
    started = time.monotonic()
    deadline = started + args.seconds if args.seconds else float("inf")

    def on_hang(info, age, cancelled):
        report.finding(kind="hang" if cancelled is None else "hang-uncancellable", seed=info["seed"],
                       phase=f"running {age:.0f} s", statement=info["text"], params=info["params"],
                       setup=info["setup"], index=info["index"])
        report.data["elapsed"] = time.monotonic() - started
        report.save()

    watchdog = Watchdog(args.budget, on_hang)
    watchdog.start()
    with tempfile.TemporaryDirectory(prefix="trdb-fuzz-") as folder, open(args.log, "a") as log:
        os.chdir(folder)                         # whatever a statement writes lands here
        files = hostile_files(Path(folder))
        seed = args.seed
        while seed < args.seed + args.seeds and time.monotonic() < deadline:
            report.data["seeds"].append(seed)
            report.save()
            SeedRun(seed, report, watchdog, files, args.extreme, log).run(args.count, deadline)
            report.data["elapsed"] = time.monotonic() - started
            report.save()
            seed += 1
            if reserved_bytes() > RESTART_SHARE * ADDRESS_SPACE:
                return RESTART_EXIT  # the parent goes on at the next seed in a new child
    return 0


# ---------------------------------------------------------------------------------------- parent side

def run_fuzzer(first_seed: int, seeds: int, count: int, seconds: float | None = None, budget: float = 20.0,
               extreme: bool = False, progress=None) -> dict:
    """Run seeds [first_seed, first_seed + seeds) in child processes; a child that dies or hangs is a
    finding and the next one starts at the following seed. Returns the merged report."""
    total = {"statements": 0, "ok": 0, "errors": {}, "kinds": {}, "findings": [], "seeds": [], "guards_ok": True,
             "elapsed": 0.0, "children": 0}
    started = time.monotonic()
    seed, end = first_seed, first_seed + seeds
    with tempfile.TemporaryDirectory(prefix="trdb-fuzz-parent-") as folder:
        out, log = Path(folder) / "report.json", Path(folder) / "statements.jsonl"
        while seed < end:
            left = None if seconds is None else seconds - (time.monotonic() - started)
            if left is not None and left <= 1:
                break
            out.unlink(missing_ok=True)
            log.write_text("")
            command = [sys.executable, str(HERE / "statement_fuzzer.py"), "--child", "--seed", str(seed),
                       "--seeds", str(end - seed), "--count", str(count), "--budget", str(budget),
                       "--out", str(out), "--log", str(log)] + (["--extreme"] if extreme else []) + \
                      (["--seconds", str(left)] if left is not None else [])
            proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  errors="replace")
            total["children"] += 1
            part = json.loads(out.read_text()) if out.exists() else {"seeds": [seed], "findings": []}
            merge(total, part)
            if proc.returncode != 0:
                last = log.read_text(errors="replace").strip().splitlines()[-1:] or ["{}"]
                if proc.returncode not in (HUNG_EXIT, RESTART_EXIT):
                    total["findings"].append({"kind": "crash", "seed": (part["seeds"] or [seed])[-1],
                                              "phase": f"child exit status {proc.returncode}",
                                              "statement": json.loads(last[0]).get("text", "?"),
                                              "params": json.loads(last[0]).get("params", "?"),
                                              "message": proc.stdout[-2000:]})
                seed = (part["seeds"] or [seed])[-1] + 1
            else:
                seed = end
            if progress:
                progress(total)
    total["elapsed"] = time.monotonic() - started
    return total


def merge(total, part):
    for key in ("statements", "ok"):
        total[key] += part.get(key, 0)
    for name, n in part.get("errors", {}).items():
        total["errors"][name] = total["errors"].get(name, 0) + n
    for kind, counts in part.get("kinds", {}).items():
        mine = total["kinds"].setdefault(kind, {"run": 0, "ok": 0})
        mine["run"] += counts["run"]
        mine["ok"] += counts["ok"]
    total["findings"] += part.get("findings", [])
    total["seeds"] += part.get("seeds", [])
    total["guards_ok"] = total["guards_ok"] and part.get("guards_ok", True)
    for kind, texts in part.get("samples", {}).items():
        total.setdefault("samples", {}).setdefault(kind, []).extend(texts[:12])


def signature(finding) -> str:
    """Findings that are one bug share this: kind, exception, its cause and where it was raised."""
    message = re.sub(r"\d+", "N", finding.get("message", "") or "")[:80]
    return " | ".join(str(finding.get(k)) for k in ("kind", "exception", "cause", "where")) + " | " + message


def format_report(report, examples: int = 3) -> str:
    lines = [f"statements run: {report['statements']} (succeeded {report['ok']}) in {report['elapsed']:.0f} s, "
             f"seeds {min(report['seeds'], default='-')}..{max(report['seeds'], default='-')}"]
    trdb_errors = {k: v for k, v in report["errors"].items() if not k.startswith("non-trdb:")}
    raw = {k[9:]: v for k, v in report["errors"].items() if k.startswith("non-trdb:")}
    lines.append("errors by class: " + (", ".join(f"{k} {v}" for k, v in sorted(trdb_errors.items())) or "none"))
    lines.append(f"non-trdb exceptions: {sum(raw.values())}" +
                 (" (" + ", ".join(f"{k} {v}" for k, v in sorted(raw.items())) + ")" if raw else ""))
    lines.append("success rate by kind: " + ", ".join(
        f"{k} {v['ok']}/{v['run']}" for k, v in sorted(report["kinds"].items())))
    groups: dict = {}
    for f in report["findings"]:
        groups.setdefault(signature(f), []).append(f)
    lines.append(f"findings: {len(report['findings'])} in {len(groups)} groups")
    for sig, members in groups.items():
        lines.append(f"\n== {len(members)}x {sig}")
        for f in sorted(members, key=lambda f: len(f["statement"]))[:examples]:
            lines.append(f"   seed {f['seed']} {f.get('phase')}: {f['statement'][:600]!r}  params={f.get('params')}")
            if f.get("message"):
                lines.append(f"   -> {f.get('exception')}: {f['message'][:300]}")
    lines.append(f"\nguards unchanged: {'yes' if report['guards_ok'] else 'NO'}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long (default: no limit)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--seeds", type=int, default=None, help="how many seeds (default: 10 or, with --seconds, "
                                                                "as many as fit)")
    parser.add_argument("--count", type=int, default=400, help="statements per seed")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds a statement may run")
    parser.add_argument("--ci", action="store_true", help="leave out the shapes too slow for CI (--extreme is "
                                                          "the default by hand)")
    parser.add_argument("--extreme", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the full report (every finding) to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args)
    seeds = args.seeds if args.seeds is not None else (10 ** 9 if args.seconds else 10)
    report = run_fuzzer(args.seed, seeds, args.count, args.seconds, args.budget, extreme=not args.ci,
                        progress=lambda r: print(f"... {r['statements']} statements, {len(r['findings'])} findings",
                                                 file=sys.stderr, flush=True))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    print(format_report(report))
    return 1 if report["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
