"""A 10,000-child fan-in next to the plain processing rate, in one run.

    .venv/bin/python benchmarks/flows_fanin.py [--children 10000] [--rounds 9] [--conc 50]

One private server (``emq.embedded.standalone.EmbeddedServer`` in a temp dir, ``appendonly no``). Two sides
alternate within every round (the order swaps from round to round), each on a fresh queue:

- ``plain``: ``Queue.enqueue_many`` of ``--children`` ``JobSpec("part", {"n": i})`` in one
  call, then one ``Worker`` process drains them;
- ``flow``: ``Queue.enqueue_flow(JobSpec("combine"), [JobSpec("part", {"n": i}) ...])``, then
  the same kind of Worker process drains the children and the parent. The parent's handler
  reads ``await ctx.achildren()`` and checks that it sees every child completed with its
  result (the sum of the ``n`` is right); the run stops with an error if not.

The Worker: burst mode, concurrency ``--conc``, every other option at its default; ``part``
is an async handler returning ``{"n": n}``. A side's rate is its jobs (``--children``, plus
the parent for ``flow``) divided by the time from the first handler start in the worker to
the moment its burst run returned (every ack landed and a claim found nothing: for ``flow``
the parent's completion is in). Afterwards the queue's counts must show nothing pending,
leased, waiting or dead and every job completed. The figure is ``flow / plain`` within a
round (median over rounds, every round printed), since absolute rates on a shared machine
drift; also printed: the ratio of each side's fastest round (on a shared machine other work
only ever slows a round down) and ``plain / flow`` of the CPU per job (server + worker), which
varies much less than the rates.

Also, per side: admission (the enqueue call alone: ``enqueue_many`` against
``enqueue_flow``, jobs/s), the server's CPU per job (``INFO cpu`` user + sys) around the
enqueue and around the drain, the worker process's CPU per job, and ``INFO commandstats``
around the drain (script calls and server time per job; the commands scripts run are counted
too). For ``flow`` the drain is split: the children (first start to the last child's handler
end) and the tail (from there to the end: the last acks, the parent's claim, its
``achildren()`` read, its handler and ack).

``--profile DIR``: each worker process runs under cProfile, written to
``DIR/<side>-<round>.prof`` (its rates are then not the figure).

``--split N`` (default 2,000; 0: skip): afterwards, per side, N jobs (N children and their
parent for ``flow``) drained by a bare loop in this process, with ``INFO commandstats`` read
around every call: ``claim(--conc)``, then ``complete_many`` (plain) or ``complete_results``
with each child's result JSON and ``result_ttl_ms`` 0 (what the Worker sends for a flow's
child); for ``flow`` also the parent's claim, ``Queue.children()`` and completion. So each
script's own server time per job is known, and which commands inside it cost what.

Writes ``benchmarks/results/fanin-<date>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.server import server_cpu_s

BENCH = Path(__file__).resolve().parent
SIDES = ("plain", "flow")
TRACKED = ("evalsha", "hset", "hget", "hincrby", "hmget", "hgetall", "xadd", "zadd", "del")


def commandstats(client: Any) -> dict[str, tuple[int, float]]:
    """cmdstat_<name> -> (calls, usec)."""
    stats = client.info("commandstats")
    return {
        k.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"])) for k, v in stats.items()
    }


# -- the worker process ---------------------------------------------------------------------


async def drain(url: str, queue: str, conc: int, children: int) -> dict[str, Any]:
    from emq import Worker, WorkerOptions

    marks: dict[str, Any] = {"first": None, "last_part_end": 0.0, "parent": None}
    now = time.perf_counter

    async def part(payload: Any) -> dict[str, int]:
        if marks["first"] is None:
            marks["first"] = now()
        n = int(payload["n"])
        marks["last_part_end"] = now()
        return {"n": n}

    async def combine(payload: Any, ctx: Any) -> int:
        t0 = now()
        kids = await ctx.achildren()
        t1 = now()
        done = [k for k in kids if k.status == "completed" and k.result is not None]
        total = sum(int(k.result["n"]) for k in done)
        marks["parent"] = {"start": t0, "read_ms": (t1 - t0) * 1e3, "end": now(),
                           "children": len(kids), "completed": len(done), "sum": total}  # fmt: skip
        return total

    opts = WorkerOptions(concurrency=conc, burst=True)
    w = Worker(queue, {"part": part, "combine": combine}, url=url, options=opts)
    await w.run()
    end = now()
    first = marks["first"]
    out: dict[str, Any] = {"completed": w.stats.completed, "span_s": end - first}
    out["claim_calls"] = w.stats.claim_calls
    out["children_s"] = marks["last_part_end"] - first
    if marks["parent"] is not None:
        p = marks.pop("parent")
        out["parent"] = {k: v for k, v in p.items() if k not in ("start", "end")}
        out["parent"]["handler_ms"] = (p["end"] - p["start"]) * 1e3
        out["parent_start_after_children_ms"] = (p["start"] - marks["last_part_end"]) * 1e3
        out["after_parent_ms"] = (end - p["end"]) * 1e3
    want = children * (children - 1) // 2
    if "parent" in out and (out["parent"]["completed"], out["parent"]["sum"]) != (children, want):
        raise SystemExit(f"the parent saw {out['parent']}, not {children} completed children")
    return out


def child(url: str, queue: str, conc: int, children: int, profile: str | None) -> None:
    """Drain ``queue`` with one Worker; print the figures as JSON (CPU: imports left out)."""
    import emq.worker  # noqa: F401 - imported before the CPU clock starts

    cpu0 = time.process_time()
    if profile:
        import cProfile

        prof = cProfile.Profile()
        out = prof.runcall(asyncio.run, drain(url, queue, conc, children))
        prof.dump_stats(profile)
    else:
        out = asyncio.run(drain(url, queue, conc, children))
    out["cpu_s"] = time.process_time() - cpu0
    print(json.dumps(out))


# -- the orchestrator -----------------------------------------------------------------------


def admit(q: Any, side: str, children: int) -> tuple[int, float]:
    """Enqueue the side's jobs in one call: (jobs written, seconds for the call)."""
    from emq import JobSpec

    parts = [JobSpec("part", {"n": i}) for i in range(children)]
    t0 = time.perf_counter()
    if side == "plain":
        q.enqueue_many(parts)
        return children, time.perf_counter() - t0
    q.enqueue_flow(JobSpec("combine"), parts)
    return children + 1, time.perf_counter() - t0


def run_side(side: str, url: str, r: int, args: argparse.Namespace) -> dict[str, Any]:
    from emq import Queue

    queue = f"fanin-{side}-{r}-{os.getpid()}"
    with Queue.from_url(url, queue) as q:
        q.obliterate(force=True)
        q.client.config_resetstat()
        cpu0 = server_cpu_s(q.client)
        jobs, took = admit(q, side, args.children)
        enq_server = server_cpu_s(q.client) - cpu0
        enq_calls, enq_usec = commandstats(q.client).get("evalsha", (0, 0.0))
        q.client.delete(q.core.keys.wake)
        q.client.config_resetstat()
        cpu0 = server_cpu_s(q.client)
    cmd = [sys.executable, __file__, "--child", queue, "--url", url]
    cmd += ["--conc", str(args.conc), "--children", str(args.children)]
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
        cmd += ["--profile", str(Path(args.profile) / f"{side}-{r + 1}.prof")]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{side} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    with Queue.from_url(url, queue) as q:
        server = server_cpu_s(q.client) - cpu0
        stats = commandstats(q.client)
        counts = q.counts()
        q.obliterate(force=True)
    left = {
        k: v for k, v in counts.items() if k in ("pending", "active", "waiting", "dead", "schedule")
    }
    if any(left.values()) or got["completed"] != jobs:
        raise SystemExit(f"{side}: worker completed {got['completed']} of {jobs}; left {left}")
    evalsha = stats.get("evalsha", (0, 0.0))
    got.update(
        side=side,
        jobs=jobs,
        rate=jobs / got["span_s"],
        children_rate=args.children / got["children_s"],
        admit_rate=jobs / took,
        admit_ms=took * 1e3,
        admit_server_us=enq_server / jobs * 1e6,
        admit_calls=enq_calls,
        admit_script_ms=enq_usec / 1e3,
        cpu_us=server / jobs * 1e6 + got["cpu_s"] / jobs * 1e6,
        server_us=server / jobs * 1e6,
        worker_us=got["cpu_s"] / jobs * 1e6,
        script_us=evalsha[1] / jobs,
        jobs_per_call=jobs / max(1, evalsha[0]),
        commandstats={k: [c, round(u)] for k, (c, u) in stats.items()},
    )
    return got


def split(url: str, side: str, n: int, conc: int) -> dict[str, Any]:
    """Server time per job of each script (and the commands inside) in a bare loop."""
    from emq import Queue
    from emq.calls.results import encode_result

    queue = f"fanin-split-{side}-{os.getpid()}"
    usec: dict[str, float] = {}
    inner: dict[str, dict[str, float]] = {}

    def timed(what: str, call: Any) -> Any:
        before = commandstats(q.client)
        got = call()
        after = commandstats(q.client)
        diff = {k: after[k][1] - before.get(k, (0, 0.0))[1] for k in after}
        usec[what] = usec.get(what, 0.0) + diff.get("evalsha", 0.0) + diff.get("hgetall", 0.0)
        mine = inner.setdefault(what, {})
        for k, v in diff.items():
            if k not in ("evalsha", "info") and v:
                mine[k] = mine.get(k, 0.0) + v
        return got

    with Queue.from_url(url, queue) as q:
        q.obliterate(force=True)
        admit(q, side, n)
        done, parent = 0, None
        while done < n:
            jobs = [j for j in timed("claim", lambda: q.claim(conc, 60_000))]
            if not jobs:
                raise SystemExit(f"split {side}: claim found nothing with {n - done} left")
            kids = [j for j in jobs if j.name == "part"]
            parent = next((j for j in jobs if j.name == "combine"), parent)
            if side == "plain":
                pairs = [(j.id, j.token) for j in kids]
                timed("complete", lambda pairs=pairs: q.complete_many(pairs))
            else:
                res = [(j.id, j.token, encode_result({"n": j.payload["n"]}, 1 << 20), 0)
                       for j in kids]  # fmt: skip
                timed("complete", lambda res=res: q.complete_results(res))
            done += len(kids)
        if side == "flow":
            while parent is None:
                parent = next(iter(timed("parent claim", lambda: q.claim(1, 60_000))), None)
            kids = timed("children()", lambda: q.children(parent.id))
            if len(kids) != n:
                raise SystemExit(f"split: the parent sees {len(kids)} children of {n}")
            timed("parent complete", lambda: q.complete_many([(parent.id, parent.token)]))
        left = q.counts()
        q.obliterate(force=True)
    if any(left[k] for k in ("pending", "active", "waiting", "dead")):
        raise SystemExit(f"split {side}: left {left}")
    out: dict[str, Any] = {"side": side, "jobs": n}
    for what, us in usec.items():
        out[what] = {
            "us_per_job": us / n,
            "inner_us_per_job": {
                k: round(v / n, 2) for k, v in sorted(inner[what].items(), key=lambda kv: -kv[1])
            },
        }
    return out


def show(r: int, got: dict[str, Any]) -> None:
    line = (
        f"round {r + 1} {got['side']:5} {got['rate']:8,.0f} jobs/s ({got['jobs']:,} in "
        f"{got['span_s'] * 1e3:5.0f} ms)  admit {got['admit_rate']:8,.0f}/s "
        f"({got['admit_ms']:4.0f} ms, {got['admit_calls']} script calls, "
        f"{got['admit_script_ms']:.0f} ms in scripts)\n        server CPU/job: admit "
        f"{got['admit_server_us']:4.1f} us, "
        f"drain {got['server_us']:4.1f} us (scripts {got['script_us']:4.1f})  "
        f"worker {got['worker_us']:4.1f} us"
    )
    if "parent" in got:
        p = got["parent"]
        line += (
            f"\n        children {got['children_rate']:8,.0f}/s ({got['children_s'] * 1e3:.0f} ms);"
            f" parent started {got['parent_start_after_children_ms']:.1f} ms after the last "
            f"child's handler, achildren() {p['read_ms']:.1f} ms, handler {p['handler_ms']:.1f} ms,"
            f" run ended {got['after_parent_ms']:.1f} ms after it"
        )
    print(line, flush=True)


def git_state() -> str:
    """HEAD's hash, with ``+dirty`` when src/ has uncommitted changes (what was measured)."""

    def git(*cmd: str) -> str:
        run = subprocess.run(["git", "-C", str(BENCH.parent), *cmd], capture_output=True, text=True)
        return run.stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        "+dirty" if git("status", "--porcelain", "src") else ""
    )


def per_job(stats: dict[str, list[int]], jobs: int) -> dict[str, str]:
    return {k: f"{stats[k][0] / jobs:.2f} calls, {stats[k][1] / jobs:.2f} us" for k in TRACKED
            if k in stats}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--children", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--split", type=int, default=2_000)
    p.add_argument("--profile", help="cProfile each worker into DIR/<side>-<round>.prof")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.url, args.child, args.conc, args.children, args.profile)
        return

    import redis

    from emq.embedded.standalone import EmbeddedServer

    started = time.time()
    figures: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="emq-fanin-") as tmp:
        server = EmbeddedServer(Path(tmp))
        url = server.start()
        try:
            client = redis.Redis.from_url(url)
            client.config_set("appendonly", "no")
            version = client.info("server").get("valkey_version") or client.info()["redis_version"]
            for r in range(args.rounds):
                for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                    got = run_side(side, url, r, args)
                    figures[side].append(got)
                    show(r, got)
            splits = [split(url, side, args.split, args.conc) for side in SIDES if args.split]
        finally:
            server.stop()

    def med(side: str, what: str) -> float:
        return statistics.median(g[what] for g in figures[side])

    ratios = [
        f["rate"] / pl["rate"] for f, pl in zip(figures["flow"], figures["plain"], strict=True)
    ]
    admits = [
        f["admit_rate"] / pl["admit_rate"]
        for f, pl in zip(figures["flow"], figures["plain"], strict=True)
    ]
    print(f"\n{args.children:,} children, {args.rounds} rounds, valkey {version}, "
          f"load {os.getloadavg()[0]:.2f}; medians:")  # fmt: skip
    for side in SIDES:
        print(f"  {side:5} processing {med(side, 'rate'):8,.0f} jobs/s, admission "
              f"{med(side, 'admit_rate'):8,.0f} jobs/s; server CPU/job: drain "
              f"{med(side, 'server_us'):.1f} us, admission {med(side, 'admit_server_us'):.1f} us; "
              f"worker CPU/job {med(side, 'worker_us'):.1f} us")  # fmt: skip
        last = figures[side][-1]
        print(f"        per job, last round: {per_job(last['commandstats'], last['jobs'])}")
    print(f"flow / plain processing: median {statistics.median(ratios):.2f} "
          f"({', '.join(f'{x:.2f}' for x in ratios)}); target >= 0.60")  # fmt: skip
    best = max(g["rate"] for g in figures["flow"]) / max(g["rate"] for g in figures["plain"])
    print(f"flow / plain, fastest round of each: {best:.2f}")
    costs = [
        pl["cpu_us"] / f["cpu_us"] for f, pl in zip(figures["flow"], figures["plain"], strict=True)
    ]
    print(f"plain / flow CPU per job (server + worker): median {statistics.median(costs):.2f} "
          f"({', '.join(f'{x:.2f}' for x in costs)})")  # fmt: skip
    print(f"flow / plain admission:  median {statistics.median(admits):.2f} "
          f"({', '.join(f'{x:.2f}' for x in admits)})")  # fmt: skip
    for sp in splits:
        print(f"bare loop, {sp['side']}, server us per job ({sp['jobs']:,} jobs):")
        for what, v in sp.items():
            if isinstance(v, dict):
                top = ", ".join(f"{k} {u:.2f}" for k, u in list(v["inner_us_per_job"].items())[:8])
                print(f"  {what:15} {v['us_per_job']:6.2f}  (inside: {top})")
    stamp = time.strftime("%Y-%m-%d-%H%M%S")
    path = BENCH / "results" / f"fanin-{stamp}.json"
    path.write_text(json.dumps({
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "started": started, "seconds": round(time.time() - started, 1),
        "git": git_state(), "server": f"valkey {version}", "python": platform.python_version(),
        "cores": os.cpu_count(), "load_end": os.getloadavg(),
        "ratio": ratios, "best_ratio": best, "cpu_ratio": costs, "admit_ratio": admits,
        "rounds": figures, "split": splits,
    }, indent=1))  # fmt: skip
    print(f"wrote {path.relative_to(BENCH.parent)}")


if __name__ == "__main__":
    main()
