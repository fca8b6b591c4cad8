"""The server's own CPU per job over emq's lifecycle, next to one trivial EVALSHA.

    .venv/bin/python benchmarks/server_cost.py [--jobs 30000] [--batch 50] [--rounds 3] [--aof]

Starts a private server (``emq.embedded.standalone.EmbeddedServer`` in a temp dir, ``appendonly no``
unless ``--aof``) and, in each round, on a flushed server, reads ``INFO cpu``
(``used_cpu_user + used_cpu_sys``: the server process's CPU, all of its threads) and
``INFO commandstats`` before and after each step:

- **enqueue**: one ``Queue.enqueue_many`` of ``--jobs`` no-op jobs (default options, so
  events on; 1,000 jobs per script call, pipelined as ``enqueue_many`` does);
- **claim**: ``Queue.claim(--batch)`` until the queue is empty, as a worker claims (naming
  itself, so each row keeps its holder);
- **complete**: ``Queue.complete_many`` of each claimed batch, as the worker's acks do
  (``emq.worker.acks``: the plain ``complete_many`` when nothing keeps results);
- **trivial**: ``--jobs`` calls of ``EVALSHA`` of ``return 1``, pipelined ``--batch`` deep
  (the worker's round trips), and again ``--deep`` deep (1,000: the enqueue's chunk), where
  the server's cost per round trip (reading, the event loop's turn, the write) is spread
  over more calls.

The lifecycle is enqueue + claim + complete, on a queue this emq makes (keyspace layout 2:
one stream entry per script call). Each round also runs it once more on a queue in layout 1
(one entry per event, as before ``emq upgrade``) and on one with events off
(``events_maxlen=0``), to show what the stream entries cost.
Printed: the server's microseconds per job for each step and the lifecycle, per call for the
trivial EVALSHA, their ratio (the target: a whole lifecycle costs the server at most 10x one
trivial EVALSHA), and the commands the scripts ran (calls and microseconds per job, from
commandstats). The two sides alternate their order each round; every figure is the median
over the rounds, and the raw rounds go to ``benchmarks/results/server-cost-<date>.json``.
CPU time, unlike a rate, moves little with the machine's other load, but the server's own
wake-ups count in it: compare within a run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

from emq import Queue, QueueOptions
from emq.embedded.standalone import EmbeddedServer

RESULTS = Path(__file__).resolve().parent / "results"
SCRIPT_CMDS = {"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}
STEPS = ("enqueue", "claim", "complete")
TARGET = 10.0
WORKER = "0123456789abcdef0123456789abcdef"  # a registry id's length: a worker names itself


Snapshot = tuple[float, float, dict[str, tuple[int, int]]]


def snapshot(client: redis.Redis) -> Snapshot:
    """(server CPU seconds, its main thread's, command -> (calls, usec)). The two INFO calls
    cost the server a few microseconds per step, counted in it (tiny against 30,000 jobs)."""
    cpu = client.info("cpu")
    stats = client.info("commandstats")
    cmds = {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for k, v in stats.items()}
    total = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    main = float(cpu.get("used_cpu_user_main_thread", 0.0)) + float(
        cpu.get("used_cpu_sys_main_thread", 0.0)
    )
    return total, main, cmds


def delta(before: Snapshot, after: Snapshot, n: int) -> dict[str, Any]:
    """Per job (or call): server CPU (all threads, and the main thread alone), and each
    command's calls and usec from commandstats (``usec`` is wall time inside the command)."""
    cmds: dict[str, dict[str, float]] = {}
    for name, (calls, usec) in after[2].items():
        c0, u0 = before[2].get(name, (0, 0))
        if calls > c0 and name != "info":
            cmds[name] = {"calls": (calls - c0) / n, "usec": (usec - u0) / n}
    return {
        "cpu_us": (after[0] - before[0]) * 1e6 / n,
        "main_us": (after[1] - before[1]) * 1e6 / n,
        "cmds": cmds,
    }


def lifecycle(q: Queue, jobs: int, batch: int) -> dict[str, dict[str, Any]]:
    c = q.client
    s0 = snapshot(c)
    q.enqueue_many([("noop", 0.0)] * jobs)
    s1 = snapshot(c)
    claimed: list[list[tuple[str, int]]] = []
    while True:
        got = q.claim(batch, worker=WORKER)
        if not got:
            break
        claimed.append([(job.id, job.token) for job in got])
    s2 = snapshot(c)
    for pairs in claimed:
        q.complete_many(pairs)
    s3 = snapshot(c)
    total = sum(len(p) for p in claimed)
    if total != jobs or q.counts().get("pending", 0):
        raise SystemExit(f"claimed {total} of {jobs} jobs: the queue was not drained")
    return {
        "enqueue": delta(s0, s1, jobs),
        "claim": delta(s1, s2, jobs),
        "complete": delta(s2, s3, jobs),
        "lifecycle": delta(s0, s3, jobs),
    }


def trivial(client: redis.Redis, calls: int, batch: int) -> dict[str, Any]:
    sha = client.script_load("return 1")
    s0 = snapshot(client)
    for start in range(0, calls, batch):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(batch, calls - start)):
            pipe.evalsha(sha, 0)
        pipe.execute()
    return delta(s0, snapshot(client), calls)


def server_name(client: redis.Redis) -> str:
    """``valkey 9.1.2`` or ``redis 7.0.15``: the server's kind and version."""
    info = client.info("server")
    kind = "valkey" if "valkey_version" in info else "redis"
    return f"{kind} {info.get('valkey_version', info['redis_version'])}"


def med(rounds: list[dict[str, Any]], step: str, field: str = "cpu_us") -> float:
    return statistics.median(r[step][field] for r in rounds)


def med_cmd(rounds: list[dict[str, Any]], step: str, cmd: str, field: str) -> float:
    return statistics.median(r[step]["cmds"].get(cmd, {}).get(field, 0.0) for r in rounds)


def script_us(d: dict[str, Any]) -> float:
    return float(sum(v["usec"] for k, v in d["cmds"].items() if k in SCRIPT_CMDS))


def report(rounds: list[dict[str, Any]], args: argparse.Namespace, server: str) -> list[str]:
    trivials = {"trivial": args.batch, "trivial_deep": args.deep}
    for r in rounds:
        for step in (*STEPS, "lifecycle", "layout_1", "no_events", *trivials):
            r[step]["script_us"] = script_us(r[step])
    out = [
        f"server: {server}, {args.jobs:,} jobs, batch {args.batch}, {len(rounds)} rounds, "
        f"appendonly {'yes' if args.aof else 'no'} (medians)",
        "",
        "| step | server CPU (us per job) | main thread (us per job) "
        "| inside the scripts, commandstats (us per job) |",
        "|---|---:|---:|---:|",
    ]
    for step in (*STEPS, "lifecycle", "layout_1", "no_events", *trivials):
        label = {
            "no_events": "lifecycle with events off",
            "layout_1": "lifecycle in keyspace layout 1 (an entry per event)",
        }.get(step, step)
        if step in trivials:
            label = f"trivial EVALSHA `return 1`, pipelined {trivials[step]:,} deep (per call)"
        out.append(
            f"| {label} | {med(rounds, step):.2f} | {med(rounds, step, 'main_us'):.2f} "
            f"| {med(rounds, step, 'script_us'):.2f} |"
        )
    out.append("")
    for step, depth in trivials.items():
        ratios = [r["lifecycle"]["cpu_us"] / r[step]["cpu_us"] for r in rounds]
        s_ratios = [r["lifecycle"]["script_us"] / r[step]["script_us"] for r in rounds]
        ratio = statistics.median(ratios)
        met = "met" if ratio <= TARGET else "missed"
        out += [
            f"lifecycle / trivial EVALSHA pipelined {depth:,} deep: server CPU **{ratio:.1f}x** "
            f"(rounds: {', '.join(f'{x:.1f}' for x in ratios)}; target <= {TARGET:.0f}x: "
            f"{met}); time inside the scripts (commandstats) {statistics.median(s_ratios):.1f}x",
        ]
    quiet = statistics.median(r["no_events"]["cpu_us"] / r["trivial"]["cpu_us"] for r in rounds)
    out.append(f"lifecycle with events off / trivial EVALSHA, {args.batch} deep: {quiet:.1f}x")
    out += [
        "",
        "| command run by the scripts | "
        + " | ".join(f"{s} calls, us" for s in STEPS)
        + " | lifecycle calls per job | lifecycle us per job |",
        "|---|" + "---:|" * (len(STEPS) + 2),
    ]
    names = {k for r in rounds for k in r["lifecycle"]["cmds"]} - SCRIPT_CMDS
    ranked = sorted(names, key=lambda k: -med_cmd(rounds, "lifecycle", k, "usec"))
    for name in ranked[: args.top]:
        cells = [
            f"{med_cmd(rounds, s, name, 'calls'):.2f}, {med_cmd(rounds, s, name, 'usec'):.2f}"
            for s in STEPS
        ]
        life_calls = med_cmd(rounds, "lifecycle", name, "calls")
        life_us = med_cmd(rounds, "lifecycle", name, "usec")
        out.append(f"| `{name}` | " + " | ".join(cells) + f" | {life_calls:.2f} | {life_us:.2f} |")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=30_000)
    p.add_argument("--batch", type=int, default=50, help="claim / complete / pipeline size")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--deep", type=int, default=1000, help="the deeper trivial pipeline")
    p.add_argument("--top", type=int, default=12, help="commands listed")
    p.add_argument("--aof", action="store_true", help="keep the embedded server's AOF on")
    args = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="emq-server-cost-"))
    server = EmbeddedServer(workdir)
    url = server.start()
    rounds: list[dict[str, Any]] = []
    try:
        client = redis.Redis.from_url(url, decode_responses=True)
        if not args.aof:
            client.config_set("appendonly", "no")
        name = server_name(client)
        for i in range(args.rounds):
            client.flushall()
            q = Queue.from_url(url, f"cost{i}")
            q.check_server()
            q.new_ids(1)  # the id node lease and clock sync, outside the measured steps
            r: dict[str, Any] = {}
            quiet = Queue.from_url(url, f"quiet{i}", options=QueueOptions(events_maxlen=0))
            for side in ("life", "trivial") if i % 2 == 0 else ("trivial", "life"):
                if side == "life":
                    r |= lifecycle(q, args.jobs, args.batch)
                    r["no_events"] = lifecycle(quiet, args.jobs, args.batch)["lifecycle"]
                    old = Queue.from_url(url, f"layout1-{i}")
                    client.hset(old.core.keys.meta, "layout", "1")  # as an older emq made it
                    r["layout_1"] = lifecycle(old, args.jobs, args.batch)["lifecycle"]
                    old.close()
                else:
                    r["trivial"] = trivial(client, args.jobs, args.batch)
                    r["trivial_deep"] = trivial(client, args.jobs, args.deep)
            q.close()
            quiet.close()
            rounds.append(r)
            print(
                f"round {i + 1}: lifecycle {r['lifecycle']['cpu_us']:.2f} us/job, trivial "
                f"{r['trivial']['cpu_us']:.2f} us/call ({args.batch} deep), "
                f"{r['trivial_deep']['cpu_us']:.2f} ({args.deep} deep)",
                flush=True,
            )
        client.close()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    lines = report(rounds, args, name)
    print("\n".join(lines))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"server-cost-{datetime.now().strftime('%Y-%m-%d-%H%M%S')}.json"
    settings = {"jobs": args.jobs, "batch": args.batch, "deep": args.deep, "aof": args.aof}
    settings["server"] = name
    path.write_text(json.dumps({"settings": settings, "rounds": rounds}, indent=1) + "\n")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
