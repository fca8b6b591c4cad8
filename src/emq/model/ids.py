"""Branded job ids: ``JOB`` + 11 base62 characters of a 63-bit snowflake.

The snowflake is ``ms since 2024-01-01 << 22 | node << 12 | seq``. The alphabet is in byte
order, so ids sort by mint time as bytes, and equal-priority jobs in ``pending`` pop FIFO.

The node number (0-1022) is a lease taken on the server (``SET {emq}:node:<n> owner NX PX``)
and renewed while minting; :class:`Minter` refuses to mint once its lease may have lapsed,
so two live processes never mint with the same node number. This module does no I/O: the
queue shells send the lease calls that :class:`Minter` asks for.

The milliseconds are the **server's** clock, not the producer's: each lease reply carries the
server's ``TIME``, and the minter keeps ``offset = server ms - local monotonic ms`` (taken at
the midpoint of that call's send and receive), then mints from ``monotonic + offset``. A
producer whose wall clock is hours off, or before 2024, therefore mints ids that interleave
with everyone else's by server time (within half a round trip plus the monotonic clock's
drift over one renewal period, 20 s), so it can neither jump the queue nor fall to its back.
Ids from one minter never go backwards, even when a new reading moves the offset back.

Node 1023 (:data:`REPEAT_NODE`) is never leased: it is reserved for the jobs of repeating
schedules, whose id is a pure function of (schedule slot, tick): see :func:`repeat_id`.
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid

from ..errors import InvalidId
from .checks import shown

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(ALPHABET)}
WIDTH = 11
NODES = 1024
REPEAT_NODE = NODES - 1  # never leased: the node of every repeat tick's job id
MINT_NODES = REPEAT_NODE  # minters lease node numbers 0..1022
REPEAT_SLOTS = 4096  # a tick id's sequence bits: one slot per schedule of a queue
NODE_TTL_MS = 60_000
ID_PATTERN = re.compile(r"JOB[0-9A-Za-z]{11}")
MAX_SNOWFLAKE = (1 << 63) - 1
# A first digit of 0-9 keeps the value below 10 * 62**10 (8.4e18), inside 63 bits: such an
# id (every id minted before 2087) needs no digit-by-digit range check.
_IN_RANGE = re.compile(r"JOB[0-9][0-9A-Za-z]{10}")
assert MAX_SNOWFLAKE >= 10 * 62**10


_PAIRS = [a + b for a in ALPHABET for b in ALPHABET]  # 62**2 = 3844 two-character digits


def encode(value: int) -> str:
    """Fixed-width base62 of a non-negative 63-bit integer (one digit, then five pairs)."""
    value, p5 = divmod(value, 3844)
    value, p4 = divmod(value, 3844)
    value, p3 = divmod(value, 3844)
    value, p2 = divmod(value, 3844)
    value, p1 = divmod(value, 3844)
    return "JOB" + ALPHABET[value] + _PAIRS[p1] + _PAIRS[p2] + _PAIRS[p3] + _PAIRS[p4] + _PAIRS[p5]


def decode(job_id: str) -> int:
    """The snowflake inside a branded id (validated)."""
    value = 0
    for c in check_id(job_id)[3:]:
        value = value * 62 + _INDEX[c]
    return value


def check_id(job_id: object) -> str:
    """Return ``job_id`` if it is a branded emq id, else raise :class:`InvalidId`."""
    if isinstance(job_id, str) and _IN_RANGE.fullmatch(job_id):
        return job_id
    if not isinstance(job_id, str) or not ID_PATTERN.fullmatch(job_id):
        raise InvalidId(
            f"job id {shown(job_id)} is invalid: expected 'JOB' followed by 11 characters "
            "from 0-9 A-Z a-z (ids are minted by emq; use Queue.new_id())"
        )
    value = 0
    for c in job_id[3:]:
        value = value * 62 + _INDEX[c]
    if value > MAX_SNOWFLAKE:
        raise InvalidId(f"job id {job_id!r} is out of range: its value exceeds 63 bits")
    return job_id


def repeat_id(tick_ms: int, slot: int) -> str:
    """The job id of a repeating schedule's tick: ``snowflake(tick_ms, REPEAT_NODE, slot)``.

    fire_repeats.lua builds the same id in Lua (tests check they agree). Any number of firers
    of one tick therefore name one job. ``slot`` (0..4095) is the schedule's, taken at
    registration; a slot freed by ``unrepeat`` is only handed on with a floor (the removal's
    server time) below which the new schedule fires no tick, so two schedules that share a
    slot never share a tick id."""
    if not EPOCH_MS <= tick_ms < EPOCH_MS + (1 << 41) or not 0 <= slot < REPEAT_SLOTS:
        raise ValueError(f"tick {tick_ms} or slot {slot} out of range")
    return encode(((tick_ms - EPOCH_MS) << 22) | (REPEAT_NODE << 12) | slot)


def minted_at_ms(job_id: str) -> int:
    """Server-clock ms (Unix epoch) at which the id was minted, as its minter estimated it."""
    return (decode(job_id) >> 22) + EPOCH_MS


class Minter:
    """Mints ids under a leased node number; safe to share between threads (every queue on
    one connection pool shares one minter)."""

    def __init__(self, ttl_ms: int = NODE_TTL_MS) -> None:
        self._pid = os.getpid()
        self.owner = uuid.uuid4().hex
        self.ttl_ms = ttl_ms
        self.node: int | None = None
        self._renew_after = 0.0  # monotonic seconds
        self._valid_until = 0.0
        self._last_ms = 0
        self._seq = 0
        self._offset_ms: float | None = None  # server ms - local monotonic ms
        self._lock = threading.Lock()

    def needs_lease(self, now: float | None = None) -> bool:
        """True when the lease must be taken or renewed before the next mint. In a process
        forked after minting, the inherited lease is dropped: the child takes its own node,
        so parent and child never mint under one node number."""
        if os.getpid() != self._pid:
            self._pid, self.owner, self.node = os.getpid(), uuid.uuid4().hex, None
            self._lock = threading.Lock()
        return (
            self.node is None or (now if now is not None else time.monotonic()) >= self._renew_after
        )

    def leased(
        self, node: int, sent_at: float, server_ms: int | None = None, read_at: float | None = None
    ) -> None:
        """Record a lease granted by a call sent at monotonic time ``sent_at`` (the first
        send of the attempt: the lease is counted from there). ``server_ms`` is the server
        clock the reply carried and ``read_at`` the monotonic time it stands for (the midpoint
        of that call's send and receive; ``sent_at`` if not given). Without ``server_ms`` (unit
        tests only) the local wall clock stands in for the server's."""
        self.node = node
        self._valid_until = sent_at + self.ttl_ms / 1000.0
        self._renew_after = sent_at + self.ttl_ms / 3000.0
        if server_ms is not None:
            self._offset_ms = server_ms - (read_at if read_at is not None else sent_at) * 1000.0

    def synced(self, server_ms: int, read_at: float) -> None:
        """Take the offset from a reading of the server clock (``TIME``) that stands for
        monotonic time ``read_at`` (the midpoint of its round trip): a better estimate than
        the lease call's, whose round trip also carries connecting and checking the server."""
        self._offset_ms = server_ms - read_at * 1000.0

    def now_ms(self) -> int:
        """The server clock as this minter estimates it: local monotonic ms + offset."""
        if self._offset_ms is None:
            return time.time_ns() // 1_000_000
        return int(time.monotonic() * 1000.0 + self._offset_ms)

    def lost(self) -> None:
        """The lease could not be renewed: stop minting under this node."""
        self.node = None

    def mint(self, now_ms: int | None = None) -> str:
        """A new id. Raises RuntimeError if the lease is missing or may have lapsed."""
        return self.mint_many(1, now_ms)[0]

    def mint_many(self, n: int, now_ms: int | None = None) -> list[str]:
        """``n`` new ids in mint order, under one reading of the (server) clock; ``now_ms``
        overrides the reading (tests)."""
        if self.node is None or time.monotonic() >= self._valid_until or os.getpid() != self._pid:
            raise RuntimeError("no valid node lease; the queue shell must renew it first")
        node_bits = self.node << 12
        with self._lock:
            ms = (now_ms if now_ms is not None else self.now_ms()) - EPOCH_MS
            if ms <= self._last_ms:
                ms, seq = self._last_ms, self._seq + 1
            else:
                seq = 0
            out = []
            for _ in range(n):
                if seq >= 4096:  # borrow the next millisecond rather than repeat an id
                    ms, seq = ms + 1, 0
                out.append(encode((ms << 22) | node_bits | seq))
                seq += 1
            self._last_ms, self._seq = ms, seq - 1
        return out
