"""Random tensor-relational queries with a tile-wise numpy oracle, for test_random_queries.py.

A seed builds random float32 tensors (rank 1-3, ragged edge tiles, some all-zero tiles, some 2-d
ones element-sparse so that their tiles are CSR) and one
query of one to three composed steps: per-tile kernels, key filters, transposes by rekey, inner
and outer joins, matmuls by join + SUM + GROUP BY, batched per-tile EINSUM, reductions and scalar
totals, nested as subqueries or WITH. The oracle follows LANGUAGE.md §4 tile by tile: a tuple is
present or absent (zeros are values: a tensor made from a dense array keeps its zero tiles, and some
are made absent by DELETE), kernels run on present tiles only, an inner join pairs present tiles and an
outer join brings the missing side in as zeros. It runs in float64 (the reference) and in float32
beside it, whose distance from float64 sizes the rounding error an engine may make.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

DEFAULT_KEYS = ("i", "j", "k")
MAX_TILES = 48          # tiles per tensor: keeps a case well under a second
MAX_MAGNITUDE = 1e5     # a step whose values grow past this is drawn again
CONSTANTS = (2, 3, 0.5, 1.5, 0.25, 2.5, -1, -0.5)


def apply(fn, *pairs):
    """Run a tile function on the (float64, float32) pair of each operand."""
    with np.errstate(all="ignore"):
        return tuple(np.asarray(fn(*(p[n] for p in pairs))) for n in range(2))


def grid(shape, tile):
    return tuple(math.ceil(n / t) for n, t in zip(shape, tile))


def tile_shape(shape, tile, key):
    return tuple(min(t, n - k * t) for n, t, k in zip(shape, tile, key))


@dataclass
class Rel:
    """A tensor relation known to the oracle, and how a query names it."""
    shape: tuple
    tile: tuple
    tiles: dict                      # key tuple -> (float64 tile, float32 tile)
    keys: tuple = ()                 # key column names
    table: str | None = None         # a stored tensor's name, or None for a query
    sql: str = ""                    # the SELECT text of a derived relation
    counts: int | None = None        # for a COUNT(*) column beside a scalar result

    @property
    def rank(self):
        return len(self.shape)

    def maxabs(self):
        return max((float(np.max(np.abs(t[0]), initial=0)) for t in self.tiles.values()), default=0.0)

    def ambiguous(self):
        # A present tile that is (nearly) all zero may or may not be pruned by the engine, so a
        # kernel that does not map zero to zero must not see this relation.
        return any(float(np.max(np.abs(t[0]), initial=0)) < 1e-6 for t in self.tiles.values())

    def filtered(self, keep):
        return Rel(self.shape, self.tile, {k: t for k, t in self.tiles.items() if keep(k)},
                   self.keys, self.table, self.sql)

    def dense(self):
        out = np.zeros(self.shape)
        for key, (t64, _) in self.tiles.items():
            out[tuple(slice(k * t, k * t + s) for k, t, s in zip(key, self.tile, t64.shape))] = t64
        return out


@dataclass
class Kernel:
    """A per-tile expression: SQL text from operand texts, and the same math in numpy."""
    fmt: Callable[..., str]
    fn: Callable[..., np.ndarray]

    def maps_zero(self, arity=1, side=None):
        """f(0)=0; for two operands, f(0,b)=0 (side 0), f(a,0)=0 (side 1) or f(0,0)=0 (None)."""
        probe = np.linspace(-2, 2, 7)
        args = [np.zeros(7) if side in (None, n) else probe for n in range(arity)]
        with np.errstate(all="ignore"):
            return bool(np.all(self.fn(*args) == 0))


IDENTITY = Kernel(lambda x: x, lambda x: x)
UNARY_FUNCTIONS = {
    "RELU": lambda x: np.maximum(x, 0), "SIGMOID": lambda x: 1 / (1 + np.exp(-x)),
    "TANH": np.tanh, "EXP": np.exp, "ABS": np.abs, "SQUARE": np.square,
}


@dataclass
class Case:
    """One generated query: setup statements, the query, and the oracle's expected result."""
    seed: int
    setup: list = field(default_factory=list)     # (sql, array, description)
    sql: str = ""
    expected: Rel | None = None
    order_by: list = field(default_factory=list)  # (axis, descending)
    steps: list = field(default_factory=list)

    def describe(self):
        lines = [f"seed {self.seed}: steps {' -> '.join(self.steps)}"]
        lines += [f"  {sql}   -- {desc}" for sql, _, desc in self.setup]
        return "\n".join(lines + [f"  {self.sql}"])


class Generator:
    """Draws one Case from a seed; every choice comes from the seeded generators."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.sparsity = np.random.default_rng(seed + 1_000_003)  # its own stream: the other draws stay as they were
        self.np = np.random.default_rng(seed)
        self.case = Case(seed)
        self.ctes: list[tuple[str, str]] = []
        self.cte_of: dict[int, str] = {}
        self.aliases = 0
        self.alive: list[Rel] = []   # keeps id() of every referenced relation unique

    # ---- tensors and names ---------------------------------------------------------------------

    def pick_tile(self, n):
        if n < 16 and self.r.random() < 0.07:
            return self.r.randint(n + 1, 16)   # one tile, larger than the tensor
        sizes = list(range(2, min(16, n) + 1)) or [1]
        ragged = [t for t in sizes if n % t]
        return self.r.choice(ragged if ragged and self.r.random() < 0.85 else sizes)

    def base(self, shape=None, tile=None, rank=None, zero_frac=None):
        """A fresh stored tensor; None entries of shape and tile are drawn."""
        rank = rank or len(shape)
        shape, tile = shape or (None,) * rank, tile or (None,) * rank
        high = {1: 60, 2: 40, 3: 14}[rank]
        for _ in range(100):
            s = tuple(d or self.r.randint(2 if rank == 3 else 3, high) for d in shape)
            t = tuple(b or self.pick_tile(n) for n, b in zip(s, tile))
            if math.prod(grid(s, t)) <= MAX_TILES:
                break
        data = (self.np.standard_normal(s) if self.r.random() < 0.6
                else self.np.uniform(-2, 2, s)).astype(np.float32)
        keys_all = list(itertools.product(*map(range, grid(s, t))))
        if zero_frac is None:
            zero_frac = self.r.uniform(0.15, 0.5) if self.r.random() < 0.45 else 0.0
        zeroed = [key for key in keys_all if self.r.random() < zero_frac][: len(keys_all) - 1]
        for key in zeroed:
            data[tuple(slice(k * b, (k + 1) * b) for k, b in zip(key, t))] = 0
        if rank == 2 and self.sparsity.random() < 0.3:
            # element-sparse: about 5% non-zeros, so most present tiles are stored and computed as CSR
            data[self.sparsity.random(s) >= 0.05] = 0
        name = f"T{sum(a is not None for _, a, _ in self.case.setup)}"
        keys = DEFAULT_KEYS[:rank]
        spec = ""
        if self.r.random() < 0.2:
            keys = self.r.choice({1: [("p",)], 2: [("r", "c"), ("j", "i")],
                                  3: [("b", "r", "c"), ("k", "j", "i")]}[rank])
            spec = f" ({', '.join(keys)})"
        sql = f"CREATE TENSOR {name}{spec} FROM ? TILE ({', '.join(map(str, t))})"
        self.case.setup.append((sql, data, f"shape {s}, {len(zeroed)} zero tiles {zeroed[:6]}"))
        # zeros are values: a dense array's zero tiles are present; about half the time they are made
        # structural zeros instead (absent tiles, as a sparse tensor has), by deleting them
        absent = set(zeroed) if zeroed and self.r.random() < 0.5 else set()
        if absent:
            where = " OR ".join("(" + " AND ".join(f"{name}.{k} = {v}" for k, v in zip(keys, key)) + ")"
                                for key in sorted(absent))
            self.case.setup.append((f"DELETE FROM {name} WHERE {where}", None, "the zero tiles made absent"))
        tiles = {}
        for key in keys_all:
            block = data[tuple(slice(k * b, (k + 1) * b) for k, b in zip(key, t))]
            if key not in absent:
                tiles[key] = (block.astype(np.float64), block.copy())
        return Rel(s, t, tiles, keys, table=name)

    def alias(self):
        self.aliases += 1
        return f"q{self.aliases}"

    def ref(self, rel, reuse_name=True):
        """FROM text and alias for a relation: a table, a WITH name or a subquery."""
        self.alive.append(rel)
        if rel.table is None and id(rel) not in self.cte_of and self.r.random() < 0.5:
            self.cte_of[id(rel)] = f"s{len(self.ctes) + 1}"
            self.ctes.append((self.cte_of[id(rel)], rel.sql))
        name = rel.table or self.cte_of.get(id(rel))
        if name is None:
            alias = self.alias()
            return f"({rel.sql}) AS {alias}", alias
        if reuse_name and self.r.random() < 0.25:
            return name, name
        alias = self.alias()
        return f"{name} AS {alias}", alias

    def key_items(self, sources):
        """SELECT items for output keys i, j, k from (alias, rel, axis) sources."""
        items = []
        for n, (alias, rel, axis) in enumerate(sources):
            expr, name = f"{alias}.{rel.keys[axis]}", DEFAULT_KEYS[n]
            items.append(expr if rel.keys[axis] == name and self.r.random() < 0.5 else f"{expr} AS {name}")
        return items

    def derived(self, items, value, from_text, tiles, shape, tile, where=None, group=None):
        sql = f"SELECT {', '.join(items + [f'{value} AS v'])} FROM {from_text}"
        if where:
            sql += f" WHERE {where}"
        if group:
            sql += f" GROUP BY {', '.join(group)}"
        for key, (t64, _) in tiles.items():   # the oracle's own invariant
            assert t64.shape == tile_shape(shape, tile, key), (key, t64.shape, shape, tile)
        return Rel(tuple(shape), tuple(tile), tiles, DEFAULT_KEYS[: len(shape)], sql=sql)

    # ---- kernels and conditions ----------------------------------------------------------------

    def constant(self):
        return self.r.choice(CONSTANTS)

    def unary(self, depth=2):
        """A random kernel of one tile (never the identity)."""
        inner = self.unary(depth - 1) if depth > 1 and self.r.random() < 0.4 else IDENTITY
        f, c = inner.fn, self.constant()
        kind = self.r.choice(list(UNARY_FUNCTIONS) + ["neg", "scale", "scale", "shift", "div",
                                                      "power", "greatest", "least"])
        if kind in UNARY_FUNCTIONS:
            g = UNARY_FUNCTIONS[kind]
            return Kernel(lambda x: f"{kind}({inner.fmt(x)})", lambda x: g(f(x)))
        if kind == "neg":
            return Kernel(lambda x: f"-({inner.fmt(x)})", lambda x: -f(x))
        if kind == "scale":
            if self.r.random() < 0.5:
                return Kernel(lambda x: f"({c} * {inner.fmt(x)})", lambda x: c * f(x))
            return Kernel(lambda x: f"({inner.fmt(x)} * {c})", lambda x: f(x) * c)
        if kind == "shift":
            c = abs(c)
            if self.r.random() < 0.5:
                return Kernel(lambda x: f"({inner.fmt(x)} + {c})", lambda x: f(x) + c)
            return Kernel(lambda x: f"({inner.fmt(x)} - {c})", lambda x: f(x) - c)
        if kind == "div":
            c = self.r.choice((2, 4, 0.5))
            return Kernel(lambda x: f"({inner.fmt(x)} / {c})", lambda x: f(x) / c)
        if kind == "power":
            p = self.r.choice((2, 3))
            return Kernel(lambda x: f"POWER({inner.fmt(x)}, {p})", lambda x: np.power(f(x), p))
        c = self.r.choice((0, 0, 0.5, -0.5))
        name, g = ("GREATEST", np.maximum) if kind == "greatest" else ("LEAST", np.minimum)
        return Kernel(lambda x: f"{name}({inner.fmt(x)}, {c})", lambda x: g(f(x), c))

    def maybe_unary(self, p):
        return self.unary(1) if self.r.random() < p else IDENTITY

    def binary(self, rank):
        """A random elementwise kernel of two same-shaped tiles."""
        ua, ub, outer = self.maybe_unary(0.3), self.maybe_unary(0.3), self.maybe_unary(0.2)
        op = self.r.choice(["+", "-", "*", "GREATEST", "LEAST", "EINSUM"])
        if op in "+-*":
            g = {"+": np.add, "-": np.subtract, "*": np.multiply}[op]
            fmt = lambda a, b: f"({ua.fmt(a)} {op} {ub.fmt(b)})"
        elif op == "EINSUM":
            spec = "".join(self.r.sample("abcdijkmn", rank))
            g = np.multiply
            fmt = lambda a, b: f"EINSUM('{spec},{spec}->{spec}', {ua.fmt(a)}, {ub.fmt(b)})"
        else:
            g = np.maximum if op == "GREATEST" else np.minimum
            fmt = lambda a, b: f"{op}({ua.fmt(a)}, {ub.fmt(b)})"
        return Kernel(lambda a, b: outer.fmt(fmt(a, b)), lambda a, b: outer.fn(g(ua.fn(a), ub.fn(b))))

    def condition(self, alias, rel):
        """A random key condition: SQL text and the same test on a key tuple."""
        def atom():
            g = grid(rel.shape, rel.tile)
            ax = self.r.randrange(rel.rank)
            k, n = f"{alias}.{rel.keys[ax]}", g[ax]
            kind = self.r.choice(["cmp", "between", "in", "diag", "diag", "mod"])
            if kind == "diag" and rel.rank >= 2:
                p, q = self.r.sample(range(rel.rank), 2)
                kp, kq = f"{alias}.{rel.keys[p]}", f"{alias}.{rel.keys[q]}"
                d = self.r.choice((0, 0, 1))
                return (f"{kp} = {kq} + {d}" if d else f"{kp} = {kq}"), lambda key: key[p] == key[q] + d
            if kind == "between":
                lo = self.r.randrange(n)
                hi = self.r.randrange(lo, n)
                return f"{k} BETWEEN {lo} AND {hi}", lambda key: lo <= key[ax] <= hi
            if kind == "in":
                vals = sorted(self.r.sample(range(n + 1), min(n + 1, self.r.randint(1, 3))))
                return f"{k} IN ({', '.join(map(str, vals))})", lambda key: key[ax] in vals
            if kind == "mod":
                m = self.r.choice((0, 1))
                return f"{k} % 2 = {m}", lambda key: key[ax] % 2 == m
            c = self.r.randint(1, max(1, n - 1))
            op = self.r.choice(["<", "<", "<=", ">=", ">"])
            test = {"<": int.__lt__, "<=": int.__le__, ">=": int.__ge__, ">": int.__gt__}[op]
            return f"{k} {op} {c}", lambda key: test(int(key[ax]), c)

        (s1, f1), roll = atom(), self.r.random()
        if roll < 0.6:
            return s1, f1
        s2, f2 = atom()
        if roll < 0.85:
            return f"{s1} AND {s2}", lambda key: f1(key) and f2(key)
        return f"({s1} OR {s2})", lambda key: f1(key) or f2(key)

    def useful_condition(self, alias, rel):
        """A condition that keeps some tiles and, when it can, drops some; rarely none at all."""
        if self.r.random() < 0.06:
            ax = self.r.randrange(rel.rank)
            k, n = f"{alias}.{rel.keys[ax]}", grid(rel.shape, rel.tile)[ax]
            return self.r.choice([f"{k} < 0", f"{k} IN ({n})", f"{k} BETWEEN {n} AND {n + 2}",
                                  f"{k} >= {n}"]), lambda key: False
        best = None
        for _ in range(10):
            cond, keep = self.condition(alias, rel)
            kept = sum(map(keep, rel.tiles))
            if 0 < kept < len(rel.tiles):
                return cond, keep
            if kept and best is None:
                best = cond, keep
        return best or (None, None)

    def maybe_where(self, alias, rel, p):
        if self.r.random() < p:
            return self.useful_condition(alias, rel)
        return None, None

    def fresh_like(self, rel, zero_frac=None):
        """A stored tensor of the same shape and tiling; sometimes passed through a kernel step."""
        other = self.base(rel.shape, rel.tile, zero_frac=zero_frac)
        if self.r.random() < 0.3:
            step = self.step_kernel(other) if self.r.random() < 0.6 else self.step_filter(other)
            if step is not None and not step.ambiguous() and step.tiles:
                return step
        return other

    # ---- steps: each turns the current relation into a new one, or returns None --------------

    def step_kernel(self, cur):
        """SELECT keys, f(x.v) [WHERE key condition]."""
        k = self.unary(2)
        if cur.ambiguous() and not k.maps_zero():
            return None
        from_text, a = self.ref(cur)
        where, keep = self.maybe_where(a, cur, 0.3)
        src = cur.filtered(keep) if keep else cur
        tiles = {key: apply(k.fn, t) for key, t in src.tiles.items()}
        items = self.key_items([(a, cur, ax) for ax in range(cur.rank)])
        return self.derived(items, k.fmt(f"{a}.v"), from_text, tiles, cur.shape, cur.tile, where)

    def step_filter(self, cur):
        """SELECT keys, x.v or a kernel WHERE key condition: the dropped tiles become zeros."""
        from_text, a = self.ref(cur)
        where, keep = self.useful_condition(a, cur)
        if where is None:
            return None
        k = self.maybe_unary(0.4)
        if cur.ambiguous() and not k.maps_zero():
            k = IDENTITY
        tiles = {key: apply(k.fn, t) for key, t in cur.filtered(keep).tiles.items()}
        items = self.key_items([(a, cur, ax) for ax in range(cur.rank)])
        return self.derived(items, k.fmt(f"{a}.v"), from_text, tiles, cur.shape, cur.tile, where)

    def step_transpose(self, cur):
        """Transpose by rekey: keys permuted, TRANSPOSE (or EINSUM) on each tile."""
        if cur.rank < 2:
            return None
        perm = (1, 0) if cur.rank == 2 else self.r.choice(
            [p for p in itertools.permutations(range(3)) if p != (0, 1, 2)])
        from_text, a = self.ref(cur)
        v = f"{a}.v"
        roll = self.r.random()
        if roll < 0.3:
            letters = "ijk"[: cur.rank]
            value = f"EINSUM('{letters}->{''.join(letters[p] for p in perm)}', {v})"
        elif cur.rank == 2 and roll < 0.75:
            value = f"TRANSPOSE({v})"
        else:
            value = f"TRANSPOSE({v}, {', '.join(map(str, perm))})"
        k = self.maybe_unary(0.3)
        if cur.ambiguous() and not k.maps_zero():
            k = IDENTITY
        tiles = {tuple(key[p] for p in perm): apply(lambda x: k.fn(np.transpose(x, perm)), t)
                 for key, t in cur.tiles.items()}
        items = self.key_items([(a, cur, p) for p in perm])
        shape = tuple(cur.shape[p] for p in perm)
        tile = tuple(cur.tile[p] for p in perm)
        return self.derived(items, k.fmt(value), from_text, tiles, shape, tile)

    def on_keys(self, a, ra, b, rb, pairs):
        parts = [f"{a}.{ra.keys[p]} = {b}.{rb.keys[q]}" if self.r.random() < 0.7
                 else f"{b}.{rb.keys[q]} = {a}.{ra.keys[p]}" for p, q in pairs]
        self.r.shuffle(parts)
        return " AND ".join(parts)

    def step_join(self, cur):
        """Elementwise kernel of two tensors of the same tiling, by an inner join on all keys."""
        roll = self.r.random()
        other = cur if roll < 0.15 else self.fresh_like(cur)
        k = self.binary(cur.rank)
        left, right = (cur, other) if self.r.random() < 0.5 else (other, cur)
        if (left.ambiguous() and not k.maps_zero(2, 0)) or (right.ambiguous() and not k.maps_zero(2, 1)):
            return None
        fa, a = self.ref(left, reuse_name=left is not right)
        fb, b = self.ref(right, reuse_name=False)
        join = self.r.choice(["JOIN", "INNER JOIN"])
        on = self.on_keys(a, left, b, right, [(n, n) for n in range(cur.rank)])
        where, keep = self.maybe_where(a, left, 0.25)
        lt = left.filtered(keep).tiles if keep else left.tiles
        tiles = {key: apply(k.fn, lt[key], right.tiles[key]) for key in lt if key in right.tiles}
        side = self.r.choice([(a, left), (b, right)])
        items = self.key_items([(side[0], side[1], n) for n in range(cur.rank)])
        return self.derived(items, k.fmt(f"{a}.v", f"{b}.v"), f"{fa} {join} {fb} ON {on}",
                            tiles, cur.shape, cur.tile, where)

    def step_outer_join(self, cur):
        """FULL JOIN (sparse addition, COALESCE keys) or LEFT JOIN; the missing side is zeros."""
        other = self.fresh_like(cur, zero_frac=self.r.uniform(0.3, 0.6))
        full = self.r.random() < 0.65
        k = self.binary(cur.rank) if self.r.random() < 0.4 else Kernel(
            lambda a, b: f"{a} + {b}", np.add)
        left, right = (cur, other) if self.r.random() < 0.5 else (other, cur)
        if full and (cur.ambiguous() or other.ambiguous()) and not k.maps_zero(2):
            return None
        if not full and left.ambiguous() and not k.maps_zero(2, 0):
            return None
        fa, a = self.ref(left)
        fb, b = self.ref(right, reuse_name=False)
        on = self.on_keys(a, left, b, right, [(n, n) for n in range(cur.rank)])
        keys = set(left.tiles) | set(right.tiles) if full else set(left.tiles)
        tiles = {}
        for key in keys:
            zeros = np.zeros(tile_shape(cur.shape, cur.tile, key))
            zero_pair = (zeros, zeros.astype(np.float32))
            tiles[key] = apply(k.fn, left.tiles.get(key, zero_pair), right.tiles.get(key, zero_pair))
        if full:
            items = []
            for n, name in enumerate(DEFAULT_KEYS[: cur.rank]):
                args = [f"{a}.{left.keys[n]}", f"{b}.{right.keys[n]}"]
                self.r.shuffle(args)
                items.append(f"COALESCE({', '.join(args)}) AS {name}")
        else:
            items = self.key_items([(a, left, n) for n in range(cur.rank)])
        join = "FULL JOIN" if full else "LEFT JOIN"
        return self.derived(items, k.fmt(f"{a}.v", f"{b}.v"), f"{fa} {join} {fb} ON {on}",
                            tiles, cur.shape, cur.tile)

    def contract(self, left, right, on, out, fn, pred=None):
        """Oracle of SUM(kernel) over an inner join on key pairs `on`, grouped by `out`."""
        groups = {}
        for ka, ta in left.tiles.items():
            for kb, tb in right.tiles.items():
                if all(ka[p] == kb[q] for p, q in on) and (pred is None or pred(ka, kb)):
                    gk = tuple((ka if s == 0 else kb)[ax] for s, ax in out)
                    val = apply(fn, ta, tb)
                    groups[gk] = apply(np.add, groups[gk], val) if gk in groups else val
        return groups

    def cross_condition(self, a, left, b, right, out):
        """Sometimes a residual condition between a key of each side (blocks of the product)."""
        sides = {s: ax for s, ax in reversed(out)}
        if len(sides) < 2 or self.r.random() > 0.3:
            return None, None
        xa, xb = sides[0], sides[1]
        op = self.r.choice(["=", "<", "<="])
        test = {"=": int.__eq__, "<": int.__lt__, "<=": int.__le__}[op]
        return (f"{a}.{left.keys[xa]} {op} {b}.{right.keys[xb]}",
                lambda ka, kb: test(int(ka[xa]), int(kb[xb])))

    def product(self, left, right, on, out, value_fmt, value_fn, group=True):
        """A join of two relations with SUM(product kernel) grouped by output keys."""
        fa, fb = self.maybe_unary(0.2), self.maybe_unary(0.2)
        if (left.ambiguous() and not fa.maps_zero()) or (right.ambiguous() and not fb.maps_zero()):
            return None
        post = self.maybe_unary(0.15) if group else IDENTITY
        if (left.ambiguous() or right.ambiguous()) and not post.maps_zero():
            post = IDENTITY   # a group of zero tiles may be absent: f(0) would differ
        from_a, a = self.ref(left, reuse_name=left is not right)
        from_b, b = self.ref(right, reuse_name=False)
        where, keep = self.maybe_where(a, left, 0.2)
        src = left.filtered(keep) if keep else left
        cross, pred = self.cross_condition(a, left, b, right, out)
        in_on = cross and on and self.r.random() < 0.5
        if cross and not in_on:
            where = f"{where} AND {cross}" if where else cross
        tiles = self.contract(src, right, on, out, lambda x, y: value_fn(fa.fn(x), fb.fn(y)), pred)
        tiles = {key: apply(post.fn, t) for key, t in tiles.items()}
        rels = {0: (a, left), 1: (b, right)}
        sources = [(*rels[s], ax) for s, ax in out]
        value = value_fmt(fa.fmt(f"{a}.v"), fb.fmt(f"{b}.v"))
        shape = [r.shape[ax] for _, r, ax in sources]
        tile = [r.tile[ax] for _, r, ax in sources]
        if not on:
            return self.derived(self.key_items(sources), value, f"{from_a}, {from_b}", tiles,
                                shape, tile, where)
        keys = [f"{al}.{r.keys[ax]}" for al, r, ax in sources]
        self.r.shuffle(keys)
        on_text = self.on_keys(a, left, b, right, on) + (f" AND {cross}" if in_on else "")
        return self.derived(self.key_items(sources), post.fmt(f"SUM({value})"),
                            f"{from_a} JOIN {from_b} ON {on_text}", tiles, shape, tile, where,
                            keys)

    def step_matmul(self, cur):
        """Matrix (or matrix-vector) products by join + SUM(MATMUL) + GROUP BY."""
        (m, n), (tm, tn) = (cur.shape + (None,))[:2], (cur.tile + (None,))[:2]
        mm = lambda spec: (lambda x, y: f"MATMUL({x}, {y})" if self.r.random() < 0.7
                           else f"EINSUM('{spec}', {x}, {y})")
        einsum = lambda spec: lambda x, y: np.einsum(spec, x, y)
        variant = self.r.choice(["right", "right_t", "left", "gram", "matvec"] if cur.rank == 2
                                else ["vecmat", "matvec", "outer"] if cur.rank == 1 else [None])
        if variant == "right":
            other = self.base((n, None), (tn, None))
            return self.product(cur, other, [(1, 0)], [(0, 0), (1, 1)], mm("ik,kj->ij"), np.matmul)
        if variant == "right_t":
            other = self.base((None, n), (None, tn))
            fmt = lambda x, y: (f"MATMUL({x}, TRANSPOSE({y}))" if self.r.random() < 0.6
                                else f"EINSUM('ik,jk->ij', {x}, {y})")
            return self.product(cur, other, [(1, 1)], [(0, 0), (1, 0)], fmt, einsum("ik,jk->ij"))
        if variant == "left":
            other = self.base((None, m), (None, tm))
            return self.product(other, cur, [(1, 0)], [(0, 0), (1, 1)], mm("ik,kj->ij"), np.matmul)
        if variant == "gram":
            fmt = lambda x, y: (f"MATMUL(TRANSPOSE({x}), {y})" if self.r.random() < 0.6
                                else f"EINSUM('ki,kj->ij', {x}, {y})")
            return self.product(cur, cur, [(0, 0)], [(0, 1), (1, 1)], fmt, einsum("ki,kj->ij"))
        if variant == "matvec" and cur.rank == 2:
            other = self.base((n,), (tn,))
            return self.product(cur, other, [(1, 0)], [(0, 0)], mm("ik,k->i"), np.matmul)
        if variant == "matvec":
            other = self.base((None, m), (None, tm))
            return self.product(other, cur, [(1, 0)], [(0, 0)], mm("ik,k->i"), np.matmul)
        if variant == "vecmat":
            other = self.base((m, None), (tm, None))
            return self.product(cur, other, [(0, 0)], [(1, 1)], mm("k,kj->j"), np.matmul)
        if variant == "outer":
            other = self.base(rank=1)
            return self.product(cur, other, [], [(0, 0), (1, 0)],
                                lambda x, y: f"EINSUM('i,j->ij', {x}, {y})", np.multiply.outer,
                                group=False)
        return None

    def step_batched(self, cur):
        """Batched 3-d products with a per-tile EINSUM (or batched MATMUL)."""
        if cur.rank != 3:
            return None
        (nb, m, k), (tb, tm, tk) = cur.shape, cur.tile
        b, i, j, l = self.r.sample("abcdefghijklmnopqrstuvwxyz", 4)
        variant = self.r.choice(["bmm", "bmm_t", "left", "batch_sum"])
        if variant in ("bmm", "batch_sum"):
            other = self.base((nb, k, None), (tb, tk, None))
            spec = f"{b}{i}{j},{b}{j}{l}->{b}{i}{l}" if variant == "bmm" else f"{b}{i}{j},{b}{j}{l}->{i}{l}"
            out = [(0, 0), (0, 1), (1, 2)] if variant == "bmm" else [(0, 1), (1, 2)]
            if variant == "bmm" and self.r.random() < 0.3:
                return self.product(cur, other, [(0, 0), (2, 1)], out,
                                    lambda x, y: f"MATMUL({x}, {y})", np.matmul)
            fmt = lambda x, y: f"EINSUM('{spec}', {x}, {y})"
            return self.product(cur, other, [(0, 0), (2, 1)], out, fmt,
                                lambda x, y: np.einsum(spec, x, y))
        if variant == "bmm_t":
            other = self.base((nb, None, k), (tb, None, tk))
            spec = f"{b}{i}{j},{b}{l}{j}->{b}{i}{l}"
            fmt = lambda x, y: f"EINSUM('{spec}', {x}, {y})"
            return self.product(cur, other, [(0, 0), (2, 2)], [(0, 0), (0, 1), (1, 1)], fmt,
                                lambda x, y: np.einsum(spec, x, y))
        other = self.base((nb, None, m), (tb, None, tm))
        spec = f"{b}{i}{j},{b}{j}{l}->{b}{i}{l}"
        return self.product(other, cur, [(0, 0), (2, 1)], [(0, 0), (0, 1), (1, 2)],
                            lambda x, y: f"EINSUM('{spec}', {x}, {y})",
                            lambda x, y: np.einsum(spec, x, y))

    def step_reduce(self, cur):
        """Row/column (axis) sums: GROUP BY the other keys with SUM(REDUCE_SUM(x.v, axis))."""
        if cur.rank < 2:
            return None
        ax = self.r.randrange(cur.rank)
        rest = [n for n in range(cur.rank) if n != ax]
        variant = self.r.choice(["sum", "sum", "einsum", "max", "mean", "min"])
        f = self.maybe_unary(0.25)
        if cur.ambiguous() and (variant in ("max", "mean", "min") or not f.maps_zero()):
            return None
        from_text, a = self.ref(cur)
        x = f.fmt(f"{a}.v")
        letters = "ijk"[: cur.rank]
        value = {"sum": f"SUM(REDUCE_SUM({x}, {ax}))", "max": f"MAX(REDUCE_MAX({x}, {ax}))",
                 "mean": f"AVG(REDUCE_MEAN({x}, {ax}))", "min": f"MIN(REDUCE_SUM({x}, {ax}))",
                 "einsum": f"SUM(EINSUM('{letters}->{letters.replace(letters[ax], '')}', {x}))"}[variant]
        reduce = {"max": np.max, "mean": np.mean}.get(variant, np.sum)
        groups = {}
        for key, t in cur.tiles.items():
            groups.setdefault(tuple(key[n] for n in rest), []).append(
                apply(lambda v: reduce(f.fn(v), axis=ax), t))
        combine = {"max": lambda vs: np.max(vs, axis=0), "mean": lambda vs: np.mean(vs, axis=0),
                   "min": lambda vs: np.min(vs, axis=0)}
        combine = combine.get(variant, lambda vs: np.sum(vs, axis=0))
        tiles = {gk: apply(lambda *vs: combine(np.stack(vs)), *vals) for gk, vals in groups.items()}
        group = [f"{a}.{cur.keys[n]}" for n in rest]
        self.r.shuffle(group)
        return self.derived(self.key_items([(a, cur, n) for n in rest]), value, from_text, tiles,
                            [cur.shape[n] for n in rest], [cur.tile[n] for n in rest], group=group)

    def step_scalar(self, cur):
        """Scalar totals: SUM(SUMSQ(..)), SUM / AVG(REDUCE_SUM(..)), MAX(REDUCE_MAX(..)), COUNT(*)."""
        variant = self.r.choice(["sumsq", "sum", "avg", "max", "count", "sumsq_count"])
        f = self.maybe_unary(0.3) if variant in ("sumsq", "sum", "avg") else IDENTITY
        if cur.ambiguous() and (variant in ("avg", "max", "count", "sumsq_count") or not f.maps_zero()):
            return None
        from_text, a = self.ref(cur)
        where, keep = self.maybe_where(a, cur, 0.3)
        src = cur.filtered(keep) if keep else cur
        x = f.fmt(f"{a}.v")
        sumsq = (f"SUM(SUMSQ({x}))", lambda v: np.sum(np.square(f.fn(v))), np.sum)
        aggregate, per_tile, combine = {
            "sum": (f"SUM(REDUCE_SUM({x}))", lambda v: np.sum(f.fn(v)), np.sum),
            "avg": (f"AVG(REDUCE_SUM({x}))", lambda v: np.sum(f.fn(v)), np.mean),
            "max": (f"MAX(REDUCE_MAX({x}))", np.max, np.max)}.get(variant, sumsq)
        vals = [apply(per_tile, t) for t in src.tiles.values()]
        # Over no tuples the result is one zero tile (docs/language.md, "Choices made").
        total = apply(lambda *vs: combine(np.stack(vs)), *vals) if vals else \
            (np.zeros(()), np.zeros((), np.float32))
        items = ([] if variant == "count" else [f"{aggregate} AS v"]) + \
            (["COUNT(*) AS n"] if "count" in variant else [])
        sql = f"SELECT {', '.join(items)} FROM {from_text}" + (f" WHERE {where}" if where else "")
        rel = Rel((), (), {} if variant == "count" else {(): total}, sql=sql)
        rel.counts = len(src.tiles) if "count" in variant else None
        return rel

    # ---- the pipeline ---------------------------------------------------------------------------

    STEPS = ("kernel", "filter", "transpose", "join", "outer_join", "matmul", "batched", "reduce",
             "scalar")
    PRIMARY_RANKS = {"transpose": (2, 3), "matmul": (1, 2), "batched": (3,), "reduce": (2, 3)}

    def attempt(self, kind, cur, tries=8):
        """Run one step, drawing again when it does not apply or its values are unusable."""
        for _ in range(tries):
            saved = (len(self.case.setup), len(self.ctes), dict(self.cte_of))
            out = getattr(self, f"step_{kind}")(cur)
            if out is not None and out.maxabs() <= MAX_MAGNITUDE and \
                    all(np.all(np.isfinite(t[0])) for t in out.tiles.values()):
                self.case.steps.append(kind)
                return out
            del self.case.setup[saved[0]:], self.ctes[saved[1]:]
            self.cte_of = saved[2]
        return None

    def build(self):
        seed = self.case.seed
        primary = self.STEPS[seed % len(self.STEPS)]
        workers = self.r.choice((1, 2, 3, 4))
        self.case.setup.append((f"SET workers = {workers}", None, "parallel workers"))
        cur = self.base(rank=self.r.choice(self.PRIMARY_RANKS.get(primary, (1, 2, 3))))
        extra = self.r.choices((0, 1, 2), (0.3, 0.45, 0.25))[0]
        before = extra if primary == "scalar" else int(extra > 0 and self.r.random() < 0.3)
        plan = ["keep"] * before + [primary] + ["any"] * (extra - before)
        for n, kind in enumerate(plan):
            last = n == len(plan) - 1
            if kind in ("keep", "any"):
                pool = ["kernel", "filter", "join", "outer_join"] + (["transpose"] if cur.rank > 1 else [])
                if kind == "any":
                    pool += ["matmul"] * (cur.rank <= 2) + ["batched"] * (cur.rank == 3) + \
                            ["reduce"] * (cur.rank > 1) + ["scalar"] * last
                for _ in range(20):
                    out = self.attempt(self.r.choice(pool), cur)
                    if out is not None:
                        break
            else:
                out = self.attempt(kind, cur, tries=40)
            if out is None:
                raise RuntimeError(f"seed {seed}: no usable {kind} step after {self.case.steps}")
            cur = out
        order = ""
        if cur.rank and self.r.random() < 0.2:
            axes = list(range(cur.rank))
            self.r.shuffle(axes)
            self.case.order_by = [(ax, self.r.random() < 0.3) for ax in axes]
            order = " ORDER BY " + ", ".join(DEFAULT_KEYS[ax] + (" DESC" if d else "")
                                             for ax, d in self.case.order_by)
        with_text = "WITH " + ", ".join(f"{n} AS ({q})" for n, q in self.ctes) + " " if self.ctes else ""
        self.case.sql = with_text + cur.sql + order
        self.case.expected = cur
        return self.case


def build_case(seed):
    return Generator(seed).build()


def executor_results(case: Case, prepare: Callable | None = None, **settings) -> dict:
    """The case's setup and query on a new 2-worker connection with `settings`: its rows by their keys and
    other exact values (an error as one row), tensors and floats as float64 (a float sum's last bits depend
    on the order its partial sums arrive in, which differs from run to run). `prepare(cursor)` runs after
    the setup (e.g. to make the tensors external)."""
    import trdb

    con = trdb.connect(workers=2, **settings)
    try:
        cur = con.cursor()
        for sql, array, _ in case.setup:
            cur.execute(sql, None if array is None else [array])
        if prepare is not None:
            prepare(cur)
        try:
            rows = cur.execute(case.sql).fetchall()
        except trdb.Error as exc:
            rows = [("error", type(exc).__name__, str(exc))]
    finally:
        con.close()
    return {tuple(v for v in r if not _inexact(v)): [np.asarray(v, np.float64) for v in r if _inexact(v)]
            for r in rows}


def _inexact(value) -> bool:
    """A tile or a float: compared with a tolerance, not as part of a row's key."""
    return isinstance(value, (np.ndarray, float, np.floating))


def assert_same_results(case: Case, expected: dict, got: dict) -> None:
    assert got.keys() == expected.keys(), case.describe()
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-5, err_msg=case.describe())
