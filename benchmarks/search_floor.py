"""How long a search takes over a floor of 1,000,000 archived events (target: under 200 ms).

Builds a floor through the Floor API (``Floor.fold``: the FTS trigger and indexes kept in the
same transaction, as the archiver does) with realistic jobs: each is ``enqueued``, then
``claimed`` and ``completed`` (most), or retried (``retrying`` with an error) and finally
``completed`` or ``dead`` (with its name, payload and error), plus a share of ``progress``
events; names from 12 handlers, payloads of customer, order and note words, errors of a
dozen kinds. Then times typical searches through :func:`emq.archive.search.search` on a queue of a
private Valkey (its live rows empty, so the figure is the floor's):

    .venv/bin/python benchmarks/search_floor.py --events 1000000

``--live N`` (default 100,000) also enqueues N jobs on the queue first, so each search
also pays for its bounded scan of the live rows (the newest 1,000 per location).

Each search runs ``--repeat`` times (default 5); the median and the worst are printed, with
the floor's build time and size. ``--floor PATH`` reuses a floor built before.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from emq import Queue
from emq.archive import Floor
from emq.archive.search import SearchQuery, search
from emq.embedded.standalone import EmbeddedServer
from emq.model.events import Event
from emq.model.ids import ID_PATTERN

NAMES = ["charge", "refund", "invoice", "email.send", "sms.send", "report.daily", "resize",
         "webhook", "export.csv", "sync.crm", "reindex", "notify"]  # fmt: skip
WORDS = ["overdue", "invoice", "customer", "order", "premium", "trial", "renewal", "shipping",
         "priority", "berlin", "lisbon", "osaka", "toronto", "quarterly", "annual", "coupon",
         "gift", "express", "warehouse", "return", "damaged", "pending", "vip", "bulk"]  # fmt: skip
ERRORS = ["smtp 451 try again later", "smtp 550 mailbox unavailable", "card declined",
          "timeout after 30s", "connection reset by peer", "http 502 bad gateway",
          "http 429 too many requests", "KeyError: 'customer_id'", "disk quota exceeded",
          "TLS handshake failed", "deadlock detected", "stalled"]  # fmt: skip
B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
START_MS = 1_795_000_000_000  # 2026-11-18


def job_id(n: int) -> str:
    digits = []
    value = (n << 12) | 5
    for _ in range(11):
        value, r = divmod(value, 62)
        digits.append(B62[r])
    out = "JOB" + "".join(reversed(digits))
    assert ID_PATTERN.fullmatch(out)
    return out


def job_events(rng: random.Random, n: int, ms: int) -> list[tuple[int, str, str, dict[str, str]]]:
    """One job's events as (ms, event, job, fields)."""
    job, name = job_id(n), rng.choice(NAMES)
    payload = json.dumps({
        "customer": f"cus_{rng.randrange(10**6)}", "order": rng.randrange(10**7),
        "cents": rng.randrange(100, 100_000), "note": " ".join(rng.sample(WORDS, 4)),
        "ref": f"r{n}x{rng.randrange(10**6)}",
    }, separators=(",", ":"))  # fmt: skip
    out = [(ms, "enqueued", job, {"attempts": "0", "name": name, "state": "pending"})]
    attempts = 1
    roll = rng.random()
    while roll < 0.25 and attempts < 3:
        out.append((ms + attempts * 10, "claimed", job, {"attempts": str(attempts), "token": "1"}))
        err = rng.choice(ERRORS)
        out.append((ms + attempts * 10 + 5, "retrying", job,
                    {"attempts": str(attempts), "error": err, "delay_ms": "1000"}))  # fmt: skip
        attempts += 1
        roll = rng.random() * 0.5
    out.append((ms + attempts * 10, "claimed", job, {"attempts": str(attempts), "token": "2"}))
    if rng.random() < 0.3:
        out.append((ms + attempts * 10 + 2, "progress", job, {"progress": "50"}))
    end = ms + attempts * 10 + 7
    if rng.random() < 0.08:
        fields = {"attempts": str(attempts), "error": rng.choice(ERRORS), "name": name,
                  "payload": payload, "stalled": "0"}  # fmt: skip
        out.append((end, "dead", job, fields))
    else:
        out.append((end, "completed", job, {"attempts": str(attempts)}))
    return out


def build(path: Path, queue: str, events: int, seed: int = 7) -> tuple[int, float]:
    """Fold ``events`` events (about) into a new floor; returns (jobs, seconds)."""
    rng = random.Random(seed)
    floor = Floor(path, queue=queue)
    t0 = time.perf_counter()
    made, jobs, ms, seq, last = 0, 0, START_MS, 0, -1
    batch: list[Event] = []
    pending: list[tuple[int, str, str, dict[str, str]]] = []
    while made < events:
        pending += job_events(rng, jobs, ms)
        jobs += 1
        ms += rng.randrange(4_800)  # a job every 2.4 s on average: 1,000,000 events in a week
        pending.sort(key=lambda e: e[0])
        ready = [e for e in pending if e[0] < ms]
        pending = [e for e in pending if e[0] >= ms]
        for at, name, job, fields in ready:
            seq, last = (seq + 1 if last == at else 0), at
            batch.append(Event(f"{at}-{seq}", name, job, fields))
            made += 1
        if len(batch) >= 100_000:
            floor.fold(batch)
            batch = []
    floor.fold(batch + [Event(f"{ms + 100 + i}-0", *e[1:3], e[3]) for i, e in enumerate(pending)])
    floor.close()
    return jobs, time.perf_counter() - t0


def timed(q: Queue, query: SearchQuery, floor: Path, repeat: int) -> dict[str, object]:
    times, hits = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        hits = len(search(q, query, floor=floor))
        times.append((time.perf_counter() - t0) * 1000)
    return {"median_ms": round(statistics.median(times), 1), "worst_ms": round(max(times), 1),
            "hits": hits}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--floor", type=Path, default=None, help="reuse (or build here)")
    ap.add_argument("--live", type=int, default=100_000, help="jobs enqueued live first")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.floor or Path(tmp) / "bench.sqlite3"
        queue = "search-bench"
        if not path.exists():
            jobs, secs = build(path, queue, args.events)
            print(f"built {path}: ~{args.events:,} events of {jobs:,} jobs in {secs:.1f} s "
                  f"({path.stat().st_size / 1e6:.0f} MB)")  # fmt: skip
        with Floor(path, queue=queue, readonly=True) as f:
            total = f.count()
            with f.reading() as db:
                (w_ms,) = db.execute("SELECT max(ms) FROM events").fetchone()
                dead_job, payload = db.execute(
                    "SELECT job, json_extract(fields, '$.payload') FROM events"
                    " WHERE event = 'dead' ORDER BY ms LIMIT 1 OFFSET 500"
                ).fetchone()
        ref = json.loads(payload)["ref"]
        srv = EmbeddedServer(Path(tmp) / "valkey")
        url = srv.start()
        q = Queue.from_url(url, queue)
        rng = random.Random(3)
        for start in range(0, args.live, 1_000):
            q.enqueue_many([
                (rng.choice(NAMES), {"note": " ".join(rng.sample(WORDS, 4)), "n": start + i})
                for i in range(min(1_000, args.live - start))
            ])  # fmt: skip
        hour = 3_600_000
        cases = {
            "a rare payload word (one job's)": SearchQuery(text=ref),
            "a prefix of it": SearchQuery(text=ref[: len(ref) - 3] + "*"),
            "a common payload word": SearchQuery(text="lisbon"),
            "two payload words, dead only": SearchQuery(text="osaka coupon", state="dead"),
            "an error text": SearchQuery(text="mailbox unavailable"),
            "an error text, last hour": SearchQuery(text="card declined", since_ms=w_ms - hour),
            "an id": SearchQuery(job_id=dead_job),
            "an id typed as text": SearchQuery(text=dead_job),
            "a name + time range (1 h)": SearchQuery(
                name="webhook", since_ms=w_ms - 2 * hour, until_ms=w_ms - hour
            ),
            "state dead + time range": SearchQuery(state="dead", since_ms=w_ms - hour),
            "name + error word": SearchQuery(name="email.send", text="smtp"),
            "nothing matches": SearchQuery(text="zyzzyva"),
            "a live state, with text": SearchQuery(state="pending", text="lisbon"),
        }
        print(f"floor: {total:,} events; live: {args.live:,} pending jobs; {args.repeat} runs"
              " each; limit 50")  # fmt: skip
        results = {}
        try:
            for label, query in cases.items():
                results[label] = r = timed(q, query, path, args.repeat)
                print(f"  {label:<40} median {r['median_ms']:>7} ms  worst "
                      f"{r['worst_ms']:>7} ms  hits {r['hits']}")  # fmt: skip
        finally:
            q.close()
            srv.stop()
        print(json.dumps({"events": total, "live": args.live, "results": results}))


if __name__ == "__main__":
    main()
