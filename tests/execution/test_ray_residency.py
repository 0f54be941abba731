"""The driver's record of the partitions Ray actors keep: least recently used moved to disk or dropped, pinned ones
never; the actor's store and its cache directory."""
from __future__ import annotations

import pytest

from trdb.errors import InternalError
from trdb.execution.ray.actor.resident import PartitionKey, ResidentStore
from trdb.execution.ray.driver.residency import Eviction, Residency, Shipped


class FakeActor:
    """What Residency reads of an actor handle: its id."""

    def __init__(self, name: str):
        self._actor_id = bytes.fromhex(name.encode().hex())  # .hex() gives a stable name back


def _key(table: str, version: int = 1, partition: int = 0) -> PartitionKey:
    return PartitionKey("db", table, version, partition, 2, (0,))


def _acquire(residency, actor, key, size, budget, shipped: list):
    return residency.acquire(actor, key, size, budget,
                             lambda eviction, base: (shipped.append((key, eviction.drop)) or f"ready-{key.table}", None))


def test_a_kept_partition_is_shipped_once_and_reused():
    residency, actor, shipped = Residency(), FakeActor("a"), []
    assert _acquire(residency, actor, _key("A"), 10, 100, shipped) == ("ready-A", True)
    residency.release(actor, _key("A"))
    assert _acquire(residency, actor, _key("A"), 10, 100, shipped) == ("ready-A", False)
    assert shipped == [(_key("A"), ())]
    assert _acquire(residency, actor, _key("A", version=2), 10, 100, shipped)[1]  # a write: a new key, shipped


def test_the_least_recently_used_unpinned_partition_makes_room():
    residency, actor, shipped = Residency(), FakeActor("a"), []
    for table in "ABC":
        _acquire(residency, actor, _key(table), 40, 100, shipped)
    # A and B and C are all pinned (a statement is using them): C went over budget, nothing dropped
    assert [drop for _, drop in shipped] == [(), (), ()]
    for table in "ABC":
        residency.release(actor, _key(table))
    _acquire(residency, actor, _key("B"), 40, 100, shipped)  # B is now the most recently used
    _acquire(residency, actor, _key("D"), 40, 100, shipped)
    assert shipped[-1] == (_key("D"), (_key("A"), _key("C")))  # A, then C: B (in use) stays
    assert set(residency.held(actor)) == {_key("B"), _key("D")}


def test_actors_that_are_gone_keep_nothing():
    residency, shipped = Residency(), []
    old, new = FakeActor("a"), FakeActor("b")
    _acquire(residency, old, _key("A"), 10, 100, shipped)
    residency.forget_actors_except({new._actor_id.hex()})
    assert residency.held(old) == {}
    assert _acquire(residency, new, _key("A"), 10, 100, shipped)[1]


def test_the_store_keeps_copies_and_drops_as_told():
    import numpy as np
    store = ResidentStore()
    tile = np.ones((2, 2), np.float32)
    store.keep(_key("A"), [(0, 0, tile)])
    kept = store.rows(_key("A"))[0][2]
    assert kept is not tile and not kept.flags.writeable and (kept == 1).all()
    store.keep(_key("B"), [(1, 0, tile)], drop=(_key("A"),))
    assert set(store.held()) == {_key("B")}
    own = np.ones((2, 2), np.float32)  # read by the actor itself (RayWorker.load): kept, not copied
    store.keep(_key("C"), [(2, 0, own)], copy=False)
    assert store.rows(_key("C"))[0][2] is own and not own.flags.writeable
    with pytest.raises(InternalError, match="does not hold partition"):
        store.rows(_key("A"))


def test_shipped_bytes_add_up_to_the_process_total():
    total = Shipped()
    one, two = Shipped(total), Shipped(total)
    one.add(100, kept=1)
    two.add(50, fed=1, stored=False)
    two.add(reused=3)
    assert total.as_dict() == {"bytes_sent": 150, "tensor_bytes_sent": 100, "partitions_shipped": 1,
                               "partitions_reused": 3, "scans_fed": 1}


def test_a_new_version_is_built_from_the_kept_one_with_the_changed_tiles_only():
    import numpy as np
    import scipy.sparse as sp

    from trdb.execution.ray.deltas import changes, digests_of, patched
    residency, actor, bases = Residency(), FakeActor("a"), []
    old = [(0, 0, np.ones((2, 2), np.float32)), (0, 1, sp.csr_matrix(np.eye(2, dtype=np.float32))), (1, 1, 3.0)]
    new = [(1, 1, 3.0), (0, 0, np.full((2, 2), 2, np.float32)), (0, 1, sp.csr_matrix(np.eye(2, dtype=np.float32))),
           (2, 0, np.zeros((2, 2), np.float32))]  # (0, 0) changed, (2, 0) new, the others as they were
    ship = lambda rows: lambda drop, base: bases.append(base) or ("ready", _done(digests_of(rows)))  # noqa: E731
    residency.acquire(actor, _key("A", version=1), 10, 100, ship(old))
    residency.acquire(actor, _key("A", version=2, partition=1), 10, 100, ship(new))  # another partition: no base
    residency.acquire(actor, _key("A", version=2), 10, 100, ship(new))
    assert bases[:2] == [None, None] and bases[2][0] == _key("A", version=1)
    assert residency.held(actor) and residency._held[actor._actor_id.hex()][_key("A", version=1)].pins == 2
    items, sent = changes(new, digests_of(new), bases[2][1].result())
    assert [row[:2] for row in sent] == [(0, 0), (2, 0)]
    rebuilt = patched(old, items)
    assert [row[:2] for row in rebuilt] == [row[:2] for row in new] and rebuilt[0] is old[2]
    np.testing.assert_array_equal(rebuilt[1][2], new[1][2])


def _done(value):
    from concurrent.futures import Future
    future = Future()
    future.set_result(value)
    return future


def test_past_the_memory_budget_partitions_go_to_disk_and_come_back_without_shipping():
    residency, actor, events = Residency(), FakeActor("a"), []

    def acquire(key, size=40):
        ready = residency.acquire(actor, key, size, 100, lambda eviction, base: events.append(("ship", key, eviction))
                                  or ("shipped", None), disk_budget=100,
                                  restore=lambda eviction: events.append(("restore", key, eviction)) or "restored")
        residency.release(actor, key)
        return ready
    acquire(_key("A")), acquire(_key("B"))
    assert acquire(_key("C")) == ("shipped", True)
    assert events[-1] == ("ship", _key("C"), Eviction((), (_key("A"),)))  # A to disk, not dropped
    assert set(residency.on_disk(actor)) == {_key("A")} and set(residency.held(actor)) == {_key("B"), _key("C")}
    assert acquire(_key("A")) == ("restored", False)  # read back by the actor: nothing shipped
    assert events[-1] == ("restore", _key("A"), Eviction((), (_key("B"),)))
    acquire(_key("D")), acquire(_key("E", version=1))  # the disk holds 100 bytes: the oldest there goes
    assert set(residency.on_disk(actor)) == {_key("A"), _key("C")} and events[-1][2].drop == (_key("B"),)
    acquire(_key("A", version=2))  # A changed: its old version's disk copy goes
    assert _key("A") in events[-1][2].drop and _key("A") not in residency.on_disk(actor)
    acquire(_key("G"), size=150)
    acquire(_key("H"), size=10)  # G no longer fits in memory, and is larger than the disk budget: dropped
    assert _key("G") in events[-1][2].drop and _key("G") not in residency.on_disk(actor)


def test_the_store_moves_partitions_to_its_cache_directory_and_back(tmp_path, monkeypatch):
    import os

    import numpy as np
    import scipy.sparse as sp

    from trdb.execution.ray.actor import disk_cache
    monkeypatch.setattr(disk_cache.tempfile, "gettempdir", lambda: str(tmp_path))
    orphan = tmp_path / f"{disk_cache.PREFIX}999999999-x"  # left by an actor that was killed
    orphan.mkdir()
    store = ResidentStore()
    rows = [(0, 1, np.arange(6, dtype=np.float32).reshape(2, 3)),
            (1, 1, sp.csr_matrix(np.eye(2, 3, dtype=np.float32))), (2, 0, np.zeros((2, 3), np.float32))]
    store.keep(_key("A"), rows)
    store.keep(_key("B"), rows[:1], spill=(_key("A"),))
    directory = store.disk.directory
    assert not orphan.exists() and directory.name.startswith(f"{disk_cache.PREFIX}{os.getpid()}-")
    assert set(store.held()) == {_key("B")} and len(list(directory.iterdir())) == 1
    store.restore(_key("A"), spill=(_key("B"),))
    back = store.find(_key("A"))
    assert [row[:2] for row in back] == [row[:2] for row in rows] and sp.issparse(back[1][2])
    for got, want in zip(back, rows):
        np.testing.assert_array_equal(got[2].toarray() if sp.issparse(got[2]) else got[2],
                                      want[2].toarray() if sp.issparse(want[2]) else want[2])
    assert set(store.held()) == {_key("A")} and len(list(directory.iterdir())) == 1  # B's file now
    store.drop((_key("B"),))
    assert list(directory.iterdir()) == []
    store.disk.remove()
    assert not directory.exists()
