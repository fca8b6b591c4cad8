"""Profile one emq worker process draining a backlog, the way the benchmark runs it.

    python3 benchmarks/profile_emq.py [--jobs 60000] [--seconds 6] [--mode worker|loop]
                                      [--conc 50] [--top 30]

It starts a private server (as run.py does), writes the backlog with enqueue_many, runs
``peers/runner.py emq work`` under ``py-spy record --gil`` (only samples that hold the GIL,
so idle threads do not count) and prints the hottest frames, self and inclusive, plus the
script calls the server saw per job (INFO commandstats). The raw py-spy output is kept under
benchmarks/results/profiles/.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.venvs import BENCH, ensure_harness


def summarise(raw: Path, top: int) -> str:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            incl[frame] += n
    out = [f"samples holding the GIL: {total}", f"--- self, top {top}"]
    out += [f"{n * 100 / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    out.append(f"--- inclusive, top {top * 2}")
    out += [f"{n * 100 / total:5.1f}%  {f}" for f, n in incl.most_common(top * 2)]
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=60_000)
    p.add_argument("--seconds", type=int, default=6)
    p.add_argument("--mode", choices=["worker", "loop"], default="worker")
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    ensure_harness()
    from harness.measure import Peer, run_json
    from harness.server import Server
    from probe import read_records

    server = Server().start()
    try:
        peer = Peer("emq", emq_mode=args.mode)
        run_json(peer, "prefill", server.url, timeout=240, n=args.jobs)
        c = server.client()
        c.config_resetstat()
        out_dir = BENCH / "results" / "profiles"
        out_dir.mkdir(parents=True, exist_ok=True)
        raw = out_dir / f"emq-{args.mode}-{time.strftime('%Y-%m-%d-%H%M%S')}.pyspy.txt"
        spy = Path(sys.executable).parent / "py-spy"
        probe_dir = tempfile.mkdtemp(prefix="bench-profile-")
        cmd = [str(spy), "record", "--gil", "-r", "250", "-d", str(int(args.seconds)), "-f", "raw"]
        cmd += ["-o", str(raw), "--", *peer.cmd("work", server.url), "--conc", str(args.conc)]
        done = subprocess.run(cmd, env=peer.env(probe_dir), capture_output=True, text=True)
        if not raw.exists():
            raise SystemExit(f"py-spy wrote nothing: {done.stderr.strip()[-800:]}")
        records = sorted(r[0] for r in read_records(probe_dir))
        stats = c.info("commandstats")
        evalsha = stats.get("cmdstat_evalsha", {})
        print(f"server {server.info['kind']} {server.info['version']}, mode {args.mode}")
        if len(records) > 10:
            span = records[-1] - records[0]
            print(f"jobs run: {len(records)} in {span:.2f} s = {len(records) / span:,.0f} jobs/s")
            calls = evalsha.get("calls", 0)
            print(
                f"EVALSHA calls: {calls} ({len(records) / max(calls, 1):.1f} jobs per call), "
                f"server time {evalsha.get('usec', 0) / 1e6:.2f} s "
                f"({evalsha.get('usec', 0) / len(records):.1f} us per job)"
            )
        print(summarise(raw, args.top))
        print(f"raw profile: {raw}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
