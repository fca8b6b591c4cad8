"""Fold before trim, under load and under crashes, and a check that has teeth.

The check: every event the producer caused (its own log, not the stream) is in the floor or
the live stream exactly once. It passes for the real cycle with a producer appending at full
speed, and after a crash at every step of the cycle; it fails, deterministically, for the two
classic wrong cycles (a ``MAXLEN`` trim after the read, a trim before the fold), because the
appends happen at a named pause point between the read and the trim.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from emq import Queue
from emq.archive import PAUSE_POINTS, Archive
from emq.model.events import Event, id_after, last_id

from .test_archive import Producer, loss


class Crash(Exception):
    """Stands for the archiver process dying at a pause point."""


def crash_at(point: str, on_cycle: int = 1) -> Callable[[str], None]:
    seen = Counter[str]()

    def hook(p: str) -> None:
        seen[p] += 1
        if p == point and seen[p] == on_cycle:
            raise Crash(p)

    return hook


@pytest.mark.slow
def test_producer_at_full_speed_while_cycles_run_loses_and_duplicates_nothing(
    url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    producer = Producer(url, qname)
    done = threading.Event()

    def produce() -> None:
        try:
            producer.run(150)
        finally:
            done.set()

    a = Archive(Queue.from_url(url, qname), tmp_path / "f.sqlite3", batch=150, chunk=50)
    thread = threading.Thread(target=produce)
    thread.start()
    cycles = folded = trimmed = 0
    while not done.is_set():
        r = a.cycle()
        cycles, folded, trimmed = cycles + 1, folded + r.folded, trimmed + r.trimmed
    thread.join()
    total = sum(producer.expected.values())
    assert total > 150 * 20 * 2
    assert cycles > 10 and trimmed > 0  # it really trimmed while the producer appended
    assert loss(client, qname, a.floor, producer.expected) == (Counter(), Counter())
    folded += a.catch_up().folded
    assert folded == a.floor.count() == total  # every entry folded exactly once
    assert client.xlen(a.keys.events) == 1
    assert loss(client, qname, a.floor, producer.expected) == (Counter(), Counter())
    producer.close()
    a.close()


class MaxlenAfterRead(Archive):
    """WRONG: after folding what it read, caps the stream at what was unread at read time."""

    def _read(self, w: str | None) -> list[Event]:
        self.length_at_read = int(self.client.xlen(self.keys.events))
        return super()._read(w)

    def _trim(self, w: str) -> int:
        keep = self.length_at_read - self.floor.count()
        return int(self.client.xtrim(self.keys.events, maxlen=max(keep, 0), approximate=False))


class TrimBeforeFold(Archive):
    """WRONG: trims what it read before folding it (the fold comes after the pause)."""

    def cycle(self) -> object:  # type: ignore[override]
        w = self.floor.watermark()
        self._claim(w)
        entries = self._read(w)
        if entries:
            self.client.xtrim(self.keys.events, minid=id_after(entries[-1].id), approximate=False)
        self._pause("read")
        self.floor.fold(entries)
        return None


@pytest.mark.parametrize("cycle_kind", ["correct", "maxlen_after_read"])
def test_appends_between_read_and_trim(
    cycle_kind: str, url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    """The producer appends 100 events at the pause point 'read'. MINID at W keeps them; a
    MAXLEN trim computed from the read cuts them, and the same check reports each one."""
    producer = Producer(url, qname, batch=10)
    producer.run(5)  # 150 events, all read by the first cycle
    appended_during_pause = Counter[tuple[str, str]]()

    def hook(point: str) -> None:
        if point == "read" and not appended_during_pause:
            before = producer.expected.copy()
            producer.run(4)  # 120 events land after the read, before the trim
            appended_during_pause.update(producer.expected - before)

    cls = Archive if cycle_kind == "correct" else MaxlenAfterRead
    a = cls(Queue.from_url(url, qname), tmp_path / "f.sqlite3", hook=hook)
    a.cycle()
    missing, extra = loss(client, qname, a.floor, producer.expected)
    assert not extra
    if cycle_kind == "correct":
        assert not missing
        a.catch_up()
        assert not loss(client, qname, a.floor, producer.expected)[0]
    else:
        assert missing == appended_during_pause  # exactly what was appended during the pause
        assert sum(missing.values()) == 120
    producer.close()
    a.close()


@pytest.mark.parametrize("cycle_kind", ["correct", "trim_before_fold"])
def test_crash_between_read_and_fold(
    cycle_kind: str, url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    producer = Producer(url, qname, batch=10)
    producer.run(3)
    cls = Archive if cycle_kind == "correct" else TrimBeforeFold
    a = cls(Queue.from_url(url, qname), tmp_path / "f.sqlite3", hook=crash_at("read"))
    with pytest.raises(Crash):
        a.cycle()
    a.close()
    restarted = Archive(Queue.from_url(url, qname), tmp_path / "f.sqlite3")
    restarted.catch_up()
    missing, extra = loss(client, qname, restarted.floor, producer.expected)
    assert not extra
    if cycle_kind == "correct":
        assert not missing and restarted.floor.count() == 90
    else:
        assert sum(missing.values()) == 90  # the whole slice is gone from both
    producer.close()
    restarted.close()


@pytest.mark.parametrize("layout", [1, 2])
@pytest.mark.parametrize("point", PAUSE_POINTS)
def test_crash_at_every_step_then_the_next_cycle_repairs(
    point: str, layout: int, url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    """In layout 2 a cycle's 40 events end inside a call's entry: it is kept whole."""
    producer = Producer(url, qname, batch=10, layout=layout)
    producer.run(3)
    path = tmp_path / "f.sqlite3"
    a = Archive(Queue.from_url(url, qname), path, batch=40, hook=crash_at(point, on_cycle=2))
    first = a.cycle()
    producer.run(2)
    with pytest.raises(Crash):
        a.cycle()
    before = a.floor.count()
    assert before == first.folded + (0 if point in ("claimed", "read") else 40)
    a.close()
    producer.run(2)
    restarted = Archive(Queue.from_url(url, qname), path, batch=40)
    again = restarted.catch_up()
    total = sum(producer.expected.values())
    assert again.read == again.folded == total - before  # nothing read or folded twice
    assert restarted.floor.count() == total
    assert loss(client, qname, restarted.floor, producer.expected) == (Counter(), Counter())
    w = restarted.floor.watermark()
    assert client.get(restarted.keys.events_archived) == w
    kept = client.xrange(restarted.keys.events)
    assert len(kept) == 1 and last_id(kept) == w  # the entry that holds W, nothing else
    producer.close()
    restarted.close()


CRASHER = """
import os, sys
from emq import Queue
from emq.archive import Archive
url, queue, path, point = sys.argv[1:5]
def hook(p):
    if p == point:
        os._exit(17)
Archive(Queue.from_url(url, queue), path, batch=50, hook=hook).cycle()
"""


@pytest.mark.parametrize("point", ["folded", "cached", "trimmed"])
def test_a_killed_archiver_process_loses_nothing(
    point: str, url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    """A real process dies (``os._exit``) between fold and cache, between cache and trim, and
    right after the trim; the next archiver on the same floor repairs, no loss, no double."""
    producer = Producer(url, qname, batch=10)
    producer.run(3)
    path = tmp_path / "f.sqlite3"
    env = dict(os.environ, PYTHONWARNINGS="error")
    proc = subprocess.run(
        [sys.executable, "-c", CRASHER, url, qname, str(path), point], env=env, timeout=60
    )
    assert proc.returncode == 17
    producer.run(1)
    a = Archive(Queue.from_url(url, qname), path)
    assert a.floor.count() == 50
    assert a.catch_up().folded == sum(producer.expected.values()) - 50
    assert loss(client, qname, a.floor, producer.expected) == (Counter(), Counter())
    assert client.get(a.keys.events_archived) == a.floor.watermark()
    producer.close()
    a.close()


def test_a_stale_or_deleted_cache_is_repaired_and_a_foreign_trim_is_reported(
    url: str, qname: str, client: redis.Redis, tmp_path: Path
) -> None:
    """Between a trim and the next cache write the cache may be stale or gone: the next cycle
    rewrites it from the floor. While it is gone the scripts trim with MAXLEN again, and the
    entries they cut never reach the floor: the next cycle reports that gap, never hides it."""
    from emq import QueueOptions

    small = Queue.from_url(url, qname, options=QueueOptions(events_maxlen=10))
    a = Archive(small, tmp_path / "f.sqlite3")
    small.enqueue_many([("n", i) for i in range(50)])
    a.catch_up()
    w = a.floor.watermark()
    client.set(a.keys.events_archived, "1-0")  # stale
    r = a.cycle()
    assert client.get(a.keys.events_archived) == w and r.gap is None
    client.delete(a.keys.events_archived)  # gone: the scripts' MAXLEN ~ 10 is back
    small.enqueue_many([("n", i) for i in range(400)])
    assert client.xlen(a.keys.events) < 400
    r = a.cycle()
    assert r.gap is not None and r.gap[0] == w
    assert client.exists(a.keys.events_archived)
    small.close()
    a.close()
