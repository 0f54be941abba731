"""Ray tests' one synchronisation point: an action taken while a statement is surely still running."""
from __future__ import annotations

import threading


def at_first_feed(monkeypatch, action, worker: int = 1) -> threading.Event:
    """Run `action(actor)` right after the driver has fed `worker`'s actor its first batch.

    The feeding thread waits there, so the statement is still running when the action lands,
    whatever the machine's speed (an action after a fixed sleep missed statements that had ended).
    The tests switch kept partitions off (ray_resident_bytes = 0): the driver then feeds every scan
    to its fragment (a plan whose scans are all kept in the actors, SLOW's, may have no exchange the
    driver forwards, and so nothing to wait on).
    """
    from trdb.execution.ray.destinations import ActorDestination
    done = threading.Event()
    lock = threading.Lock()
    original = ActorDestination._feed

    def feed(self, to: int, partition: int, rows, sent: int):
        ref = original(self, to, partition, rows, sent)
        with lock:
            if to == worker and rows is not None and not done.is_set():
                action(self.actors[to])
                done.set()
        return ref
    monkeypatch.setattr(ActorDestination, "_feed", feed)
    return done
