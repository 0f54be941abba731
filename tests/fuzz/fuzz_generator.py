"""Grammar-aware random trql statements (parser/trql.lark, LANGUAGE.md §3-4) for the statement fuzzer.

A `Generator` draws from `random.Random(seed)` and knows the tensors, views and the ordinary table
that exist (the runner refreshes it from SHOW TENSORS / SHOW VIEWS), so most statements name real
relations and get past the binder; the rest are hostile: absurd shapes, wrong arities, invalid
EINSUM specs, overflowing key arithmetic, bad settings, token soup, truncated text, unicode.
It only ever writes relations named `f*` (tensors), `fv*` (views) and `ft` (the ordinary table):
the guards, whose names it never produces, are read-only to it.
"""
from __future__ import annotations

import random
import string
from dataclasses import dataclass, field

import numpy as np

FUZZ_TENSORS = ("f0", "f1", "f2", "f3", "f4", "f5")
FUZZ_VIEWS = ("fv0", "fv1", "fv2")
TABLE = "ft"
# DuckDB's own quoting, which a splitter that does not know it cuts into several statements
QUOTING_PROBES = ("BEGIN; UPDATE f0 SET v = f0.v + 1", "SELECT E'a\\'; COMMIT; SELECT 1' AS x",
                  "SELECT $tag$x; COMMIT; $tag$ AS x", "SELECT $$a;b$$ AS x", "/* /* nested */ ; COMMIT */ SELECT 1",
                  "SELECT 'it''s; COMMIT' AS x", "SELECT \"a;b\" FROM (SELECT 1 AS \"a;b\")", "ROLLBACK",
                  "SELECT e'\\x41;' AS x", "SELECT $x$ $$ ; $x$ AS x")
HOSTILE_NAMES = ('"a b"', '"é"', '"x\x00y"', "__trdb_adam_m__f0", "f0__adam_m", '"__TRDB_x"', "f0", "f1", "fv0",
                 '""', '"' + "n" * 300 + '"', '"a""b"', '"1x"', '"tab\tname"')
DTYPES = ("float32", "float64", "int32", "int64", "bool")
HOSTILE_DTYPES = ("float16", "bfloat16", "complex64", "int8", "uint64", "object", "varchar", "str", "f4", "")
FILLS = ("ZEROS", "ONES", "IDENTITY", "CONSTANT", "RANDOM_NORMAL", "RANDOM_UNIFORM")
UNARY_KERNELS = ("RELU", "SIGMOID", "TANH", "EXP", "LOG", "SQRT", "ABS", "SQUARE", "ZEROS_LIKE",
                 "ONES_LIKE", "SUMSQ")
AGGREGATES = ("SUM", "AVG", "MIN", "MAX")
BIG_INTS = (2 ** 31, 2 ** 32 + 1, 2 ** 62, 2 ** 63 - 1, 2 ** 63, 2 ** 64, 10 ** 30)
HOSTILE_SCALARS = ("0", "-1", "1e30", "-1e30", "1e-30", "1e308", "1e309", "0.0", "NULL", "TRUE", "'x'",
                   "''", "X'00'", str(2 ** 63), str(10 ** 40))
UNICODE = ("é", "ß", "Ω", "中文", "😀", "\u200b", "\u202e", "\x00", "\ud800", "\ufeff", "İ", "ﬁ", "\n", "\t")
KEYWORDS = ("SELECT", "FROM", "WHERE", "JOIN", "LEFT", "FULL", "ON", "GROUP", "BY", "ORDER", "LIMIT",
            "UNION", "ALL", "CREATE", "TENSOR", "VIEW", "AS", "SHAPE", "TILE", "DTYPE", "FILL", "INSERT",
            "INTO", "VALUES", "UPDATE", "SET", "DELETE", "DROP", "EXPLAIN", "ANALYZE", "EINSUM", "GRAD",
            "RETILE", "MINIMIZE", "WRT", "WITH", "BEGIN", "COMMIT", "ROLLBACK", "CAST", "NOT", "NULL",
            "IN", "BETWEEN", "AND", "OR", "IS", "DISTINCT", "SHOW", "DESCRIBE", "COO", "IF", "EXISTS")
PUNCT = ("(", ")", ",", ";", ".", "*", "+", "-", "/", "//", "%", "=", "<", "<=", "<>", "!=", "?", "'",
         '"', "--", "/*", "*/", "$1", "$x", "::", "[", "]", "{", "}", "\\", "@", "#")


CI_MAX_FILLED_TILES = 256


def tile_count(shape: str, tile: str) -> float:
    """Tiles of a SHAPE (...) TILE (...) pair as written (0 when either does not parse)."""
    try:
        dims = [int(x) for x in shape.strip("()").split(",") if x.strip()]
        tiles = [int(x) for x in tile.strip("()").split(",") if x.strip()]
    except ValueError:
        return 0
    if len(dims) != len(tiles) or any(t <= 0 for t in tiles):
        return 0
    return float(np.prod([-(-n // t) for n, t in zip(dims, tiles)], dtype=float))


@dataclass
class TensorInfo:
    """What the generator knows of one tensor relation (from SHOW TENSORS)."""
    name: str
    keys: tuple
    shape: tuple
    tile: tuple
    dtype: str = "float32"

    @property
    def rank(self):
        return len(self.keys)


@dataclass
class Case:
    """One statement to run: its text, parameters (None: none passed) and kind (for statistics)."""
    text: str
    params: object = None
    kind: str = "query"
    many: bool = False              # executemany over `params`
    writes: bool = False            # may change the database (the runner refreshes its schema)


@dataclass
class Schema:
    tensors: dict = field(default_factory=dict)   # name -> TensorInfo (fuzz tensors and guards)
    guards: tuple = ()
    views: set = field(default_factory=set)
    in_transaction: bool = False
    aborted: bool = False

    def fuzz(self):
        return [t for n, t in self.tensors.items() if n not in self.guards]


class Generator:
    """Random statements over a Schema; `extreme` adds the shapes that are too slow for CI."""

    def __init__(self, seed: int, schema: Schema, files: dict, extreme: bool = False):
        self.r = random.Random(seed)
        self.schema = schema
        self.files = files            # label -> path of hostile input files (.npy, .csv, ...)
        self.extreme = extreme
        self.np = np.random.default_rng(seed)
        self.losses = {}              # view name -> the tensor its loss query was made to depend on
        weights = {
            self.create_tensor: 8, self.create_from: 3, self.create_coo: 2, self.create_as: 4,
            self.create_view: 4, self.insert: 5, self.update: 5, self.delete: 3, self.drop: 2,
            self.select_statement: 28, self.explain: 4, self.settings: 4, self.transaction: 3,
            self.minimize: 2, self.plain_sql: 3, self.inspect: 2, self.soup: 4, self.truncated: 4,
            self.mutated: 4, self.api_misuse: 1, self.trust_probe: 4,
        }
        self.makers, self.weights = list(weights), list(weights.values())

    # ------------------------------------------------------------------ entry point

    def next(self) -> Case:
        s = self.schema
        if s.aborted and self.r.random() < 0.7:
            return Case(self.r.choice(("ROLLBACK", "ROLLBACK", "ABORT", "COMMIT")), kind="transaction",
                        writes=True)
        if s.in_transaction and self.r.random() < 0.12:
            return Case(self.r.choice(("COMMIT", "ROLLBACK", "END", "ROLLBACK WORK")), kind="transaction",
                        writes=True)
        return self.r.choices(self.makers, self.weights)[0]()

    # ------------------------------------------------------------------ small pieces

    def chance(self, p):
        return self.r.random() < p

    def pick(self, seq):
        return self.r.choice(seq)

    def any_tensor(self, rank=None):
        pool = [t for t in self.schema.tensors.values() if rank is None or t.rank == rank]
        return self.pick(pool) if pool else None

    def fuzz_tensor(self):
        pool = self.schema.fuzz()
        return self.pick(pool) if pool else None

    def fuzz_name(self, fresh=False):
        existing = [t.name for t in self.schema.fuzz()]
        unused = [n for n in FUZZ_TENSORS if n not in self.schema.tensors and n not in self.schema.views]
        if fresh and unused and self.chance(0.85):
            return self.pick(unused)
        if existing and self.chance(0.5):
            return self.pick(existing)
        return self.pick(FUZZ_TENSORS)

    def small_dim(self):
        return self.r.choice((1, 2, 3, 5, 8, 16, 17, 24, 32, 33, 48, 64))

    def hostile_int(self):
        return self.pick((0, 1, 10 ** 6, 10 ** 9, 10 ** 12) + BIG_INTS)

    def int_tuple(self, rank, hostile=False, tile_for=None):
        out = []
        for d in range(rank):
            if hostile and self.chance(0.35):
                out.append(str(self.hostile_int()) if self.chance(0.8) else self.pick(("-3", "2.5", "1e30", "x", "")))
            elif tile_for is not None:
                out.append(str(self.pick((1, 2, 4, 8, 16, 32, max(1, tile_for[d])))))
            else:
                out.append(str(self.small_dim()))
        return "(" + ", ".join(out) + ")"

    def scalar(self):
        if self.chance(0.15):
            return self.pick(HOSTILE_SCALARS)
        return self.pick(("0", "1", "2", "3", "0.5", "-1", "2.5", "0.1", "10", "-0.25"))

    def dtype(self):
        return self.pick(DTYPES) if self.chance(0.85) else self.pick(HOSTILE_DTYPES)

    def array(self, shape=None):
        """A random numpy array (or, sometimes, another Python object) to bind to a `?`."""
        r = self.r
        if shape is None:
            shape = tuple(r.choice((1, 2, 3, 4, 8, 16)) for _ in range(r.choice((0, 1, 2, 2, 2, 3))))
        roll = r.random()
        if roll < 0.6:
            a = self.np.standard_normal(shape).astype(self.pick(("float32", "float64", "float32")))
            if self.chance(0.3):
                a[a < 0.5] = 0
            return a
        if roll < 0.7:
            return self.np.integers(-5, 5, shape).astype(self.pick(("int32", "int64", "int8", "uint64")))
        if roll < 0.75:
            return self.np.standard_normal(shape) > 0
        if roll < 0.8:
            return np.full(shape, self.pick((np.nan, np.inf, -np.inf, 1e38, 0.0)), dtype="float32")
        hostile = [3, 2.5, None, "text", b"bytes", 2 ** 70, float("nan"), np.float64(1.5),
                   np.zeros((0, 3), "float32"), np.array(["a", "b"]), np.array([1, "x"], dtype=object),
                   np.ones((2, 2), "complex64"), np.zeros(shape + (4,), "float32")[..., ::2], {"a": 1}, [1, 2, 3],
                   np.array(5.0)]
        if self.extreme:
            hostile.append(np.broadcast_to(np.float32(1), (100_000, 100_000)))  # 40 GB, no memory
        try:
            import scipy.sparse as sp
            hostile.append(sp.random(16, 12, density=0.2, format=self.pick(("csr", "coo", "csc")),
                                     dtype="float32", rng=self.np))
        except Exception:  # noqa: BLE001  (scipy is a dependency; the fuzzer does without it)
            pass
        return self.pick(hostile)

    def params_for(self, text):
        n = text.count("?")
        if self.chance(0.1):
            n = max(0, n + self.pick((-1, 1, 2)))
        if n == 0 and self.chance(0.7):
            return None
        return [self.array() for _ in range(n)]

    # ------------------------------------------------------------------ expressions

    def value_expr(self, aliases, depth=0):
        """A tile-valued expression over `aliases` [(alias, TensorInfo)]."""
        r = self.r
        if depth >= 3 or not aliases or r.random() < (0.55 if depth == 0 else 0.45):
            if aliases and r.random() < 0.8:
                alias, _ = self.pick(aliases)
                return f"{alias}.v" if r.random() < 0.95 else f"{alias}.{self.pick(('w', 'i', 'nope'))}"
            return self.scalar() if r.random() < 0.9 else "?"
        a = lambda: self.value_expr(aliases, depth + 1)  # noqa: E731
        roll = r.randrange(16)
        if roll == 0:
            return f"{a()} {self.pick(('+', '-', '*', '/', '+', '*'))} {a()}"
        if roll == 1:
            return f"{a()} {self.pick(('+', '-', '*', '/', '//', '%'))} {self.scalar()}"
        if roll == 2:
            return f"-{a()}" if r.random() < 0.8 else f"({a()})"
        if roll in (3, 4):
            args = [a() for _ in range(1 if r.random() < 0.92 else self.pick((0, 2)))]
            return f"{self.pick(UNARY_KERNELS)}({', '.join(args)})"
        if roll == 5:
            return f"{self.pick(('MATMUL', 'MATMUL', 'MATRIX_MULTIPLY'))}({a()}, {a()})"
        if roll == 6:
            ops = [a() for _ in range(self.pick((1, 2, 2, 3)))]
            return f"EINSUM({self.einsum_spec(len(ops), [2] * len(ops))}, {', '.join(ops)})"
        if roll == 7:
            axes = [str(self.pick((0, 1, 2, -1, 5))) for _ in range(self.pick((0, 0, 2, 3, 1)))]
            return f"TRANSPOSE({', '.join([a()] + axes)})"
        if roll == 8:
            axis = self.pick(("0", "1", "-1", "2", "7", "0.5", "NULL"))
            return f"SOFTMAX({a()}, {axis})" if r.random() < 0.85 else f"SOFTMAX({a()})"
        if roll == 9:
            fn = self.pick(("REDUCE_SUM", "REDUCE_MAX", "REDUCE_MEAN"))
            return f"{fn}({a()})" if r.random() < 0.5 else f"{fn}({a()}, {self.pick(('0', '1', '-1', '3'))})"
        if roll == 10:
            return f"CAST({a()} AS {self.dtype() or 'float32'})"
        if roll == 11:
            return f"POWER({a()}, {self.pick(('2', '0.5', '-1', '0', '3', '1e30', '-0.5'))})"
        if roll == 12:
            return f"{self.pick(('GREATEST', 'LEAST', 'BCE_WITH_LOGITS'))}({a()}, {a()})"
        if roll == 13:
            return f"{self.pick(AGGREGATES)}({a()})" if depth > 0 else f"COALESCE({a()}, {a()})"
        if roll == 14 and r.random() < 0.3:
            return f"{self.pick(('NOPE', 'EXP2', 'COUNT', 'ABS'))}({a()}, {a()})"
        if roll == 14:
            return f"{a()} * {self.pick(('2', '0.5', '-1', '?'))}"
        return "?" if r.random() < 0.3 else f"{a()} + {a()}"

    def einsum_spec(self, operands, ranks):
        r = self.r
        if r.random() < 0.2:
            return "'" + self.pick(("", "->", "ij", "ij,jk", "ij,jk->", "iJ->j", "ij->k", "i,j->ij,", "...",
                                    "ij->ii", "ij,jk->ik,", "ab" * 30 + "->a", "i j->j", "é->é", "''")) + "'"
        letters = "ijklmn"
        ins = ["".join(r.choice(letters[:3]) for _ in range(rank)) for rank in ranks]
        used = sorted(set("".join(ins)))
        out = [c for c in used if r.random() < 0.5]
        r.shuffle(out)
        return f"'{','.join(ins)}->{''.join(out)}'"

    def key_expr(self, alias, info):
        key = f"{alias}.{self.pick(info.keys)}" if info.keys else "0"
        if self.chance(0.25):
            const = self.pick((1, 2, 3, 0, -1, 7) + BIG_INTS) if self.chance(0.5) else self.pick((1, 2, 3))
            return f"{key} {self.pick(('+', '-', '*', '//', '%'))} {const}"
        return key

    def condition(self, aliases):
        alias, info = self.pick(aliases)
        if not info.keys:
            return self.pick(("TRUE", "1 = 1", f"{alias}.v > 0"))
        key = self.key_expr(alias, info)
        roll = self.r.randrange(9)
        const = str(self.pick((0, 1, 2, 3, -1, 100) + BIG_INTS[:3]))
        if roll == 0 and len(aliases) > 1:
            b, binfo = self.pick(aliases)
            return f"{key} = {self.key_expr(b, binfo)}"
        if roll == 1:
            return f"{key} BETWEEN {self.pick(('0', '1', '-5'))} AND {const}"
        if roll == 2:
            return f"{key} {self.pick(('NOT IN', 'IN'))} ({', '.join(str(self.r.randrange(-2, 5)) for _ in range(3))})"
        if roll == 3:
            return f"{self.condition(aliases)} {self.pick(('AND', 'OR'))} {self.condition(aliases)}"
        if roll == 4:
            return f"NOT {self.condition(aliases)}" if self.chance(0.5) else f"{key} IS {self.pick(('', 'NOT '))}NULL"
        if roll == 5:
            return f"{alias}.v {self.pick(('>', '=', '<'))} {self.scalar()}"  # a value condition: refused or run
        return f"{key} {self.pick(('=', '<', '<=', '>', '>=', '<>', '!='))} {self.pick((const, '?'))}"

    # ------------------------------------------------------------------ queries

    def from_operand(self, depth):
        """(from text, TensorInfo-ish) for one FROM item: a relation, a subquery, EINSUM, GRAD, RETILE."""
        r, t = self.r, self.any_tensor()
        if t is None:
            return "nope", TensorInfo("nope", ("i",), (4,), (4,))
        roll = r.random()
        if roll < 0.75 or depth > 1:
            if self.schema.views and r.random() < 0.1:
                return self.pick(sorted(self.schema.views)), TensorInfo("view", ("i", "j"), (), ())
            return t.name, t
        if roll < 0.82:
            return f"({self.query(depth + 1)})", TensorInfo("sub", t.keys, t.shape, t.tile)
        if roll < 0.9:
            others = [self.any_tensor() for _ in range(self.pick((1, 2, 2, 3)))]
            spec = self.einsum_spec(len(others), [o.rank for o in others])
            keys = tuple(c for c in spec.split("->")[-1] if c.isalpha())
            return f"EINSUM({spec}, {', '.join(o.name for o in others)})", TensorInfo("e", keys, (), ())
        if roll < 0.95:
            view, param = self.loss_and_param()
            t = self.schema.tensors.get(param, t) if self.chance(0.8) else t
            return f"GRAD({view}, {t.name})", t
        return f"RETILE({t.name}, {self.int_tuple(t.rank, hostile=self.chance(0.2), tile_for=t.tile)})", t

    def select_core(self, depth):
        r = self.r
        n = self.pick((1, 1, 1, 2, 2, 2, 3))
        items = [self.from_operand(depth) for _ in range(n)]
        aliases = [(f"A{i}", info) for i, (_, info) in enumerate(items)]
        frm = f"{items[0][0]} AS A0"
        for i in range(1, n):
            kind = self.pick(("", "INNER ", "LEFT ", "FULL ", "FULL OUTER ", "RIGHT ", "CROSS ", ","))
            if kind in ("CROSS ", ",") and n > 2 and not self.extreme:
                kind = ""             # three-way cross products of filled tensors run for minutes
            if kind == ",":
                frm += f", {items[i][0]} AS A{i}"
                continue
            on = ""
            if kind != "CROSS " or self.chance(0.2):
                a_info, b_info = aliases[i - 1][1], aliases[i][1]
                if a_info.keys and b_info.keys and self.chance(0.85):
                    on = " ON " + " AND ".join(
                        f"A{i - 1}.{self.pick(a_info.keys)} = A{i}.{self.pick(b_info.keys)}"
                        for _ in range(self.pick((1, 1, 2))))
                else:
                    on = " ON " + self.condition(aliases)
            frm += f" {kind}JOIN {items[i][0]} AS A{i}{on}"
        shape = r.random()
        group = ""
        if shape < 0.15:
            sel = [self.pick(("*", "A0.*"))]
        elif shape < 0.35 and n >= 2:   # a matmul by join + SUM + GROUP BY
            a, b = aliases[0][1], aliases[1][1]
            ka = self.pick(a.keys) if a.keys else "i"
            kb = self.pick(b.keys) if b.keys else "j"
            sel = [f"A0.{ka} AS i", f"A1.{kb} AS j", f"{self.pick(AGGREGATES)}({self.value_expr(aliases[:2])}) AS v"]
            group = f" GROUP BY A0.{ka}, A1.{kb}"
        elif shape < 0.45:             # a whole-relation aggregate
            sel = [f"{self.pick(AGGREGATES)}({self.value_expr(aliases)}) AS v"]
            if self.chance(0.3):
                sel.append("COUNT(*) AS c")
        else:
            alias, info = self.pick(aliases)
            keys = list(info.keys) if info.keys else []
            if keys and self.chance(0.2):
                keys = keys[::-1]      # a transpose by rekey
            sel = [f"{self.key_expr(alias, info) if self.chance(0.2) else f'{alias}.{k}'} AS {k}"
                   for k in keys[:self.pick((len(keys), len(keys), max(0, len(keys) - 1)))]]
            if n > 1 and self.chance(0.3) and keys and sel:
                b = self.pick(aliases)[0]
                sel[0] = f"COALESCE({alias}.{keys[0]}, {b}.{keys[0]}) AS {keys[0]}"
            sel.append(f"{self.value_expr(aliases)} AS v")
            if self.chance(0.15):
                group = " GROUP BY " + ", ".join(s.split(" AS ")[0] for s in sel[:-1]) if len(sel) > 1 else ""
                sel[-1] = f"{self.pick(AGGREGATES)}({sel[-1][:-5]}) AS v"
        where = f" WHERE {self.condition(aliases)}" if self.chance(0.35) else ""
        distinct = "DISTINCT " if self.chance(0.03) else ""
        return f"SELECT {distinct}{', '.join(sel)} FROM {frm}{where}{group}"

    def query(self, depth=0):
        r = self.r
        text = self.select_core(depth)
        if r.random() < 0.08:
            text += f" UNION {self.pick(('ALL ', 'ALL ', '', 'DISTINCT '))}{self.select_core(depth + 1)}"
        if r.random() < 0.1 and depth < 2:
            t = self.any_tensor()
            name = self.pick(("c1", "w", "A0", t.name if t else "c1"))
            text = f"WITH {name} AS ({self.select_core(depth + 1)}) {text}"
        if r.random() < 0.12:
            text += f" ORDER BY {self.pick(('1', 'i', 'j', 'v', '2 DESC', 'i DESC, j'))}"
        if r.random() < 0.12:
            text += f" LIMIT {self.pick(('0', '1', '3', '-1', '?', '1.5', str(2 ** 63), str(10 ** 30), 'NULL'))}"
            if self.chance(0.3):
                text += f" OFFSET {self.pick(('1', '-2', str(2 ** 63)))}"
        return text

    def deep_query(self):
        """Deep nesting: parentheses, subqueries, CTE chains, long expressions (bounded in CI)."""
        depth = self.r.choice((50, 200, 1000, 5000)) if self.extreme else self.r.choice((5, 20, 60))
        t = self.any_tensor()
        name = t.name if t else "f0"
        roll = self.r.randrange(4)
        if roll == 0:
            return f"SELECT {'(' * depth}{name}.v{')' * depth} AS v FROM {name}"
        if roll == 1:
            inner = f"SELECT * FROM {name}"
            for _ in range(depth):
                inner = f"SELECT * FROM ({inner}) AS s"
            return inner
        if roll == 2:
            ctes = [f"c0 AS (SELECT * FROM {name})"] + [f"c{i} AS (SELECT * FROM c{i - 1})" for i in range(1, depth)]
            return f"WITH {', '.join(ctes)} SELECT * FROM c{depth - 1}"
        return f"SELECT {' + '.join([f'{name}.v'] * depth)} AS v FROM {name}"

    # ------------------------------------------------------------------ statements

    def select_statement(self):
        text = self.deep_query() if self.chance(0.03) else self.query()
        return Case(text, self.params_for(text), kind="select")

    def create_tensor(self):
        rank = self.pick((0, 1, 2, 2, 2, 3, 3, 4))
        hostile = self.chance(0.25)
        shape = self.int_tuple(rank, hostile=hostile)
        tile_rank = rank if not self.chance(0.08) else self.pick((0, 1, 2, 5))
        tile = self.int_tuple(tile_rank, hostile=hostile and self.chance(0.5),
                              tile_for=[self.pick((4, 8, 16))] * tile_rank)
        keys = ""
        if self.chance(0.2):
            names = self.r.sample(["a", "b", "c", "i", "v", "x", '"K é"', "select"], k=min(rank + self.pick((0, 0, 1)), 8))
            keys = "(" + ", ".join(names) + ")"
        opts = ""
        if self.chance(0.4):
            opts += f" DTYPE {self.dtype() or 'float32'}"
        if self.chance(0.8) and (self.extreme or tile_count(shape, tile) <= CI_MAX_FILLED_TILES):
            opts += " " + self.fill()  # a million filled tiles runs for minutes (a finding of the long run): no FILL
        head = "CREATE TENSOR" if self.chance(0.95) else self.pick(("CREATE OR REPLACE TENSOR",
                                                                    "CREATE TENSOR IF NOT EXISTS"))
        name = self.fuzz_name(fresh=True)
        text = f"{head} {name}{keys} SHAPE {shape} TILE {tile}{opts}"
        return Case(text, None, kind="create", writes=True)

    def fill(self):
        kind = self.pick(FILLS) if self.chance(0.95) else self.pick(("RANDOM", "NOPE", "ZEROS()"))
        args = {"ZEROS": [], "ONES": [], "IDENTITY": [], "CONSTANT": [self.scalar()],
                "RANDOM_NORMAL": [self.scalar(), self.pick(("1", "0", "-1", "0.5", "1e30")), str(self.r.randrange(5))],
                "RANDOM_UNIFORM": [self.scalar(), self.pick(("1", "2", "-1", "1e30")), str(self.r.randrange(5))]}.get(kind, [])
        if self.chance(0.1):
            args = args[:-1] if args and self.chance(0.5) else args + [self.scalar()]
        if self.chance(0.05):
            args = [self.pick(("-1", "1.5", str(2 ** 64), "'x'"))] * 3  # a hostile seed
        return f"FILL {kind}({', '.join(args)})" if args or self.chance(0.2) else f"FILL {kind}"

    def create_from(self):
        name, tile = self.fuzz_name(fresh=True), self.int_tuple(self.pick((1, 2, 2, 3)), hostile=self.chance(0.1))
        if self.chance(0.35) and self.files:
            label = self.pick(sorted(self.files))
            src, params = "'" + self.files[label].replace("'", "''") + "'", None
        else:
            src, params = "?", [self.array()] if self.chance(0.95) else []
        dtype = f" DTYPE {self.dtype()}" if self.chance(0.3) else ""
        tail = f" TILE {tile}" if self.chance(0.9) else ""
        return Case(f"CREATE TENSOR {name} FROM {src}{tail}{dtype}", params, kind="create_from", writes=True)

    def create_coo(self):
        name = self.fuzz_name(fresh=True)
        src, params = self.pick(((TABLE, None), ("?", "frame"), ("'" + self.files.get("csv", "x.csv") + "'", None),
                                 ("'" + self.files.get("parquet", "x.parquet") + "'", None), ("missing_table", None)))
        if params == "frame":
            import pandas as pd
            n = self.r.randrange(0, 20)
            frame = pd.DataFrame({"i": self.np.integers(-1, 10, n), "j": self.np.integers(0, 6, n),
                                  "x": self.np.standard_normal(n)})
            params = [frame if self.chance(0.9) else self.array()]
        cols = self.pick(("(i, j, x)", "(i, j, x)", "(i, x)", "(j, i, x)", "(i, j, nope)", "(x)"))
        shape = self.int_tuple(cols.count(",") or 1, hostile=self.chance(0.2))
        tile = self.int_tuple(cols.count(",") or 1, tile_for=[4, 4, 4])
        return Case(f"CREATE TENSOR {name} FROM COO {src} {cols} SHAPE {shape} TILE {tile}", params,
                    kind="create_coo", writes=True)

    def create_as(self):
        head = "CREATE TENSOR" if self.chance(0.95) else "CREATE OR REPLACE TENSOR"
        text = f"{head} {self.fuzz_name(fresh=True)} AS {self.query()}"
        return Case(text, self.params_for(text), kind="create_as", writes=True)

    def loss_query(self, view):
        w, x = self.fuzz_tensor() or self.any_tensor(), self.any_tensor()
        if w is None or x is None:
            return self.query()
        self.losses[view] = w.name
        if w.rank == 2 and x.rank == 2 and self.chance(0.6):
            return (f"SELECT SUM(SUMSQ(MATMUL(X.v, W.v))) AS v FROM {x.name} AS X JOIN {w.name} AS W "
                    f"ON X.{x.keys[1]} = W.{w.keys[0]}")
        fn = self.pick(("SUMSQ", "REDUCE_SUM", "REDUCE_MEAN"))
        return f"SELECT SUM({fn}({self.value_expr([('W', w)])})) AS v FROM {w.name} AS W"

    def create_view(self):
        view = self.pick(FUZZ_VIEWS)
        query = self.loss_query(view) if self.chance(0.6) else self.query()
        text = f"CREATE {self.pick(('', 'OR REPLACE ', 'OR REPLACE '))}VIEW {view} AS {query}"
        return Case(text, self.params_for(text), kind="create_view", writes=True)

    def insert(self):
        t = self.fuzz_tensor()
        if t is None or self.chance(0.3):
            text = f"INSERT INTO {self.fuzz_name()} {self.query()}"
            return Case(text, self.params_for(text), kind="insert", writes=True)
        rows = []
        tile = tuple(min(a, b) for a, b in zip(t.tile, t.shape))
        if np.prod(tile, dtype=float) > 1e5:
            tile = None
        for _ in range(self.pick((1, 1, 2, 3))):
            grid = [max(1, -(-n // max(1, b))) for n, b in zip(t.shape, t.tile)]
            keys = [str(self.r.randrange(0, g) if self.chance(0.9) else self.r.randrange(-1, g + 2))
                    if self.chance(0.95) else str(self.hostile_int()) for g in grid]
            rows.append("(" + ", ".join(keys + ["?"]) + ")")
        text = f"INSERT INTO {t.name} VALUES {', '.join(rows)}"
        params = [self.array(tile if self.chance(0.7) else None) for _ in rows]
        if self.chance(0.1):
            return Case(text, [params, params], kind="insert", many=True, writes=True)
        return Case(text, params, kind="insert", writes=True)

    def update(self):
        t = self.fuzz_tensor()
        if t is None:
            return self.create_tensor()
        aliases = [(t.name, t)]
        frm = ""
        if self.chance(0.4):
            other, info = self.from_operand(1)
            if self.chance(0.3):
                view, _ = self.loss_and_param()
                other, info = f"GRAD({view}, {t.name})", t
            frm = f" FROM {other} AS G"
            aliases.append(("G", info))
        value = self.value_expr(aliases)
        if frm and self.chance(0.5):
            value = f"{t.name}.v - {self.pick(('0.1', '0.01', '1e30', '?'))} * G.v"
        where = ""
        if frm and t.keys and aliases[1][1].keys and self.chance(0.8):
            where = " WHERE " + " AND ".join(f"{t.name}.{k} = G.{g}" for k, g in zip(t.keys, aliases[1][1].keys))
        elif self.chance(0.4):
            where = f" WHERE {self.condition(aliases)}"
        col = "v" if self.chance(0.95) else self.pick(("i", "w"))
        text = f"UPDATE {t.name} SET {col} = {value}{frm}{where}"
        return Case(text, self.params_for(text), kind="update", writes=True)

    def delete(self):
        t = self.fuzz_tensor()
        name = t.name if t else self.fuzz_name()
        where = f" WHERE {self.condition([(name, t)])}" if t and self.chance(0.7) else ""
        text = f"DELETE FROM {name}{where}"
        return Case(text, self.params_for(text), kind="delete", writes=True)

    def drop(self):
        if self.chance(0.3):
            return Case(f"DROP VIEW {self.pick(('', 'IF EXISTS '))}{self.pick(FUZZ_VIEWS)}", kind="drop", writes=True)
        return Case(f"DROP TENSOR {self.pick(('', 'IF EXISTS '))}{self.fuzz_name()}", kind="drop", writes=True)

    def explain(self):
        inner = self.query() if self.chance(0.75) else self.pick((self.create_as, self.update, self.insert,
                                                                    self.create_tensor))()
        text = inner if isinstance(inner, str) else inner.text
        head = self.pick(("EXPLAIN", "EXPLAIN ANALYZE")) if self.chance(0.9) else \
            self.pick(("EXPLAIN (FORMAT json)", "EXPLAIN (FORMAT dot)", "EXPLAIN EXPLAIN"))
        # EXPLAIN ANALYZE of a write runs it: the same names as the write itself, never a guard.
        return Case(f"{head} {text}", self.params_for(text), kind="explain", writes=True)

    def settings(self):
        name = self.pick(("workers", "memory_limit", "disabled_rules", "min_parallel_cost", "progress", "device",
                          "executor", "nope", "temp_directory", "ray_address", "max_tuples"))
        good = {"workers": ("1", "2", "3", "4"), "memory_limit": ("'64MB'", "'256MB'", "'1GB'", "'1.5GB'"),
                "disabled_rules": ("''", "'join_ordering'", "'kernel_fusion, predicate_pushdown'"),
                "min_parallel_cost": ("0", "1e9", "100"), "progress": ("on", "off", "false"),
                "device": ("'cpu'", "'auto'"), "executor": ("'local'",), "temp_directory": ("'/tmp'",),
                "ray_address": ("''",), "nope": ("1",), "max_tuples": ("100000", "16000000")}[name]
        bad = ("0", "-1", "'abc'", "1.5", "NULL", "''", "'-5GB'", "TRUE", "'1 GB GB'", "'nope_rule'", "X'00'",
               "'é'", "1e400", "'" + "9" * 40 + "'")
        if self.extreme:
            bad += ("999999", "'1000TB'")     # workers, memory_limit and max_tuples (0: no limit) unbounded
        roll = self.r.random()
        if roll < 0.15:
            return Case(f"RESET {name}", kind="settings")
        if roll < 0.3:
            return Case(f"SHOW {name}", kind="settings")
        value = self.pick(good) if self.chance(0.6) else self.pick(bad)
        if name in ("workers",) and value.isdigit() and int(value) > 4 and not self.extreme:
            value = "4"
        if name == "max_tuples" and value == "0" and not self.extreme:
            value = "16000000"
        return Case(f"SET {name} {self.pick(('=', 'TO'))} {value}", kind="settings")

    def transaction(self):
        return Case(self.pick(("BEGIN", "BEGIN", "BEGIN TRANSACTION", "START TRANSACTION", "COMMIT", "ROLLBACK",
                               "END", "ABORT WORK")), kind="transaction", writes=True)

    def loss_and_param(self):
        """A view made as a loss and the fuzz tensor it depends on, while both exist; else a guess."""
        known = [(v, w) for v, w in sorted(self.losses.items()) if v in self.schema.views and w in self.schema.tensors
                 and w not in self.schema.guards]
        if known and self.chance(0.8):
            return self.pick(known)
        params = [t.name for t in self.schema.fuzz()] or ["f0"]
        return self.pick(sorted(self.schema.views) or list(FUZZ_VIEWS)), self.pick(params)

    def minimize(self):
        view, wrt = self.loss_and_param()
        params = [t.name for t in self.schema.fuzz()]
        if params and self.chance(0.2):
            wrt = ", ".join(self.r.sample(params, k=min(len(params), 2)))
        good = self.chance(0.75)
        opts = ["steps = " + (self.pick(("1", "2", "3")) if good else self.pick(("0", "-1", "1.5", "'x'", "NULL")))]
        if self.chance(0.6):
            opts.append("optimizer = " + self.pick(("'sgd'", "'adam'") if good else ("'nope'", "1", "'SGD'")))
        if self.chance(0.6):
            opts.append("learning_rate = " + self.pick(("0.1", "0.01") if good else ("0", "-1", "1e30", "'x'", "?")))
        if self.chance(0.1):
            opts.append(f"{self.pick(('beta1', 'momentum', 'nope'))} = 0.9")
        with_ = f" WITH ({', '.join(opts)})" if self.chance(0.95) else ""
        return Case(f"MINIMIZE {view} WRT ({wrt}){with_}", kind="minimize", writes=True)

    def plain_sql(self):
        r = self.r
        roll = r.randrange(12)
        if roll == 0:
            return Case(f"CREATE TABLE IF NOT EXISTS {TABLE} (i BIGINT, j BIGINT, x DOUBLE)", kind="plain", writes=True)
        if roll in (1, 2):
            vals = ", ".join(f"({r.randrange(-1, 8)}, {r.randrange(0, 6)}, {r.random():.3f})" for _ in range(r.randrange(1, 5)))
            return Case(f"INSERT INTO {TABLE} VALUES {vals}", kind="plain", writes=True)
        if roll == 3:
            return Case(f"SELECT i, j, sum(x) FROM {TABLE} GROUP BY ALL ORDER BY ALL", kind="plain")
        if roll == 4:
            t = self.any_tensor(2)
            if t:   # an ordinary table joined with a tensor relation on integer columns
                return Case(f"SELECT T.i, A.{t.keys[1]} AS j, A.v * 2 AS v FROM {TABLE} AS T JOIN {t.name} AS A "
                            f"ON T.i = A.{t.keys[0]} AND T.j = A.{t.keys[1]}", kind="plain")
        if roll == 5:
            return Case(f"DELETE FROM {TABLE} WHERE i > {r.randrange(0, 5)}", kind="plain", writes=True)
        if roll == 6:   # hostile plain SQL at trdb's own schema: must be refused
            return Case(self.pick(("DROP SCHEMA _trdb CASCADE", "DELETE FROM _trdb.tensors",
                                   "UPDATE _trdb.tensors SET shape = '[1]'", "CREATE TABLE _trdb.x (a INT)",
                                   "ATTACH ':memory:' AS x", "SET memory_limit = '1KB'", "PRAGMA threads = 1000",
                                   "SELECT * FROM duckdb_tables()", "CALL pragma_version()",
                                   "INSTALL httpfs", "SELECT * FROM read_csv('/etc/passwd')")),
                        kind="plain_hostile", writes=True)
        if roll == 7:
            return Case(f"SELECT CAST(i AS VARCHAR) || 'é', x / 0 FROM {TABLE}", kind="plain")
        if roll == 8:
            return Case(f"UPDATE {TABLE} SET x = x * {self.scalar()}", kind="plain", writes=True)
        if roll == 9:
            return Case(f"SELECT {self.pick(('?', '1 + ?', '?::INTEGER'))}", [self.array()], kind="plain")
        return Case(f"SELECT count(*), max(i) FROM {TABLE}", kind="plain")

    def trust_probe(self):
        """The third trust round's probes: DuckDB's quoting, hostile and reserved names, settings with
        parameters, CTE towers, and tiles that are or become all zero (zeros are values)."""
        roll = self.r.randrange(6)
        if roll == 0:
            return Case(self.pick(QUOTING_PROBES), kind="plain_hostile", writes=True)
        if roll == 1:
            name = self.pick(HOSTILE_NAMES)
            verb = self.pick((f"CREATE TENSOR {name} SHAPE (2, 2) TILE (2, 2) FILL ONES",
                              f"CREATE TENSOR f0 ({name}, j) SHAPE (2, 2) TILE (2, 2)",
                              f"CREATE TABLE {name} (a INT)", f"CREATE TEMP TABLE {name} (a INT)",
                              f"CREATE VIEW {name} AS SELECT 1 AS a", f"ALTER TENSOR f1 RENAME TO {name}",
                              f"ALTER VIEW fv0 RENAME TO {name}", f"ALTER TABLE {TABLE} RENAME TO {name}",
                              f"CREATE TENSOR f2 AS SELECT f0.i, f0.j, f0.v AS {name} FROM f0"))
            return Case(verb, kind="plain_hostile", writes=True)
        if roll == 2:
            name = self.pick(("workers", "memory_limit", "s3_endpoint", "disabled_rules", "arrow_output_version",
                              "produce_arrow_string_view", "threads"))
            value = self.pick(("?", "'1.5'", "true", "2"))
            return Case(f"SET {name} = {value}", [self.pick((1, "2", "x", None))] if value == "?" else None,
                        kind="settings")
        if roll == 3:
            return Case(self.cte_tower(self.r.randrange(2, 14)), kind="select")
        t = self.fuzz_tensor()
        name = t.name if t else "f0"
        return Case(self.pick((f"UPDATE {name} SET v = {name}.v * 0",
                               f"CREATE OR REPLACE TENSOR {name} SHAPE (4, 3) TILE (2, 3) FILL ZEROS",
                               f"CREATE OR REPLACE VIEW fv0 AS SELECT SUM(SUMSQ(RELU({name}.v) + 1)) AS v FROM {name}",
                               f"SELECT COUNT(*) FROM {name}")), kind="select", writes=True)

    def cte_tower(self, levels: int) -> str:
        """WITH k1 AS (...), k2 AS (k1 joined with itself), ...: planning must not double per level."""
        t = self.any_tensor(2)
        base = f"SELECT {t.name}.{t.keys[0]} AS i, {t.name}.{t.keys[1]} AS j, {t.name}.v AS v FROM {t.name}" \
            if t else "SELECT f0.i AS i, f0.j AS j, f0.v AS v FROM f0"
        ctes = [f"k0 AS ({base})"]
        for level in range(1, levels):
            ctes.append(f"k{level} AS (SELECT a.i, a.j, a.v + b.v AS v FROM k{level - 1} AS a JOIN k{level - 1} AS b "
                        "ON a.i = b.i AND a.j = b.j)")
        return f"WITH {', '.join(ctes)} SELECT k{levels - 1}.i, COUNT(*) AS n FROM k{levels - 1} GROUP BY k{levels - 1}.i"

    def inspect(self):
        t = self.any_tensor()
        name = t.name if t else "f0"
        return Case(self.pick(("SHOW TENSORS", "SHOW VIEWS", f"DESCRIBE {name}", f"DESCRIBE {self.pick(FUZZ_VIEWS)}",
                               f"SUMMARIZE {name}", f"DESCRIBE ({self.query()})", "SHOW ALL", f"DESCRIBE {TABLE}")),
                    kind="inspect")

    # ------------------------------------------------------------------ hostile text

    def soup(self):
        r = self.r
        vocab = KEYWORDS + PUNCT + FUZZ_TENSORS + ("v", "i", "j", "A", "1", "0", "1e30", str(2 ** 64), "'x'")
        words = [self.pick(vocab) if r.random() < 0.9 else self.pick(UNICODE) for _ in range(r.randrange(1, 30))]
        text = "".join(w + self.pick((" ", " ", "", "\n")) for w in words)
        return Case(text, self.params_for(text) if self.chance(0.3) else None, kind="soup", writes=True)

    def valid_text(self):
        return self.pick((self.select_statement, self.create_tensor, self.update, self.create_as,
                          self.insert, self.explain, self.create_view, self.minimize))()

    def truncated(self):
        case = self.valid_text()
        cut = self.r.randrange(0, max(1, len(case.text)))
        return Case(case.text[:cut], case.params, kind="truncated", writes=True)

    def mutated(self):
        case = self.valid_text()
        chars = list(case.text)
        for _ in range(self.r.randrange(1, 4)):
            pos = self.r.randrange(0, len(chars) + 1)
            roll = self.r.randrange(5)
            if roll == 0 and chars:
                del chars[min(pos, len(chars) - 1)]
            elif roll == 1:
                chars.insert(pos, self.pick(UNICODE))
            elif roll == 2:
                chars.insert(pos, self.pick(("X'é'", "'é'", '"é"', "'", '"', "/*", "--", "\\", "$1", "e", ";")))
            elif roll == 3:   # a digit or punctuation, never a letter: a mutation must not invent a guard's name
                chars.insert(pos, self.pick(string.digits + "(),.;*+-/%<>=?"))
            else:
                chars.insert(pos, " " + self.pick(KEYWORDS) + " ")
        return Case("".join(chars), case.params, kind="mutated", writes=True)

    def api_misuse(self):
        roll = self.r.randrange(6)
        if roll == 0:
            return Case("SELECT 1; SELECT 2", self.pick((None, [1])), kind="misuse")
        if roll == 1:
            return Case("", None, kind="misuse")
        if roll == 2:
            return Case(";;;", None, kind="misuse")
        if roll == 3:
            return Case("SELECT ?", self.pick(("notalist", {"a": 1}, (1, 2), b"xy", 5)), kind="misuse")
        if roll == 4:
            return Case("  -- only a comment", None, kind="misuse")
        return Case("/* unclosed comment SELECT 1", None, kind="misuse")

