"""Two versions of emq side by side, counted in instructions instead of seconds.

    .venv/bin/python benchmarks/ab_instructions.py --base REV [--jobs 5000] [--extra results]

On a shared machine a rate moves 30% from one run to the next, too much to see a change of a
few percent (``ab_trees.py``). ``valgrind --tool=callgrind`` counts the instructions a process
executes, which does not depend on what else the machine does. For each side (``base``: the
revision ``--base`` in a worktree, ``new``: this tree, and the ``--extra`` sides of
``ab_trees.py``) this counts, under callgrind, a child that enqueues ``--jobs`` no-op jobs
(``Queue.enqueue_many``) and one that drains them with one ``Worker`` (as ``ab_trees.py``
does), each at ``--jobs`` and at three times as many. The difference of the two counts over
the difference of the jobs is the client's instructions per job, with the start-up (imports,
connecting) cancelled out. The server (one private ``EmbeddedServer``) is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import ab_trees

ROOT = ab_trees.ROOT
PHASES = ("enqueue", "drain")


def child(side: str, phase: str, url: str, jobs: int, conc: int) -> None:
    import importlib

    for name in filter(None, os.environ.get("ABI_IMPORTS", "").split(",")):
        importlib.import_module(name)
    from emq import Queue

    queue = f"abi-{side}"
    if phase == "enqueue":
        with Queue.from_url(url, queue) as q:
            for start in range(0, jobs, 10_000):
                q.enqueue_many([("noop", None)] * min(10_000, jobs - start))
            q.client.delete(q.core.keys.wake)
    else:
        asyncio.run(ab_trees.drain(url, queue, conc, ab_trees.OPTIONS[side]))


def count(side: str, phase: str, src: Path, url: str, jobs: int, conc: int, tmp: Path) -> int:
    """The instructions one child executes, read from callgrind's summary line."""
    out = tmp / f"cg-{side}-{phase}-{jobs}.out"
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
           __file__, "--child", side, "--phase", phase, "--url", url, "--jobs", str(jobs),
           "--conc", str(conc)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=src.parent)
    if done.returncode:
        raise SystemExit(f"{side} {phase} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    found = re.search(r"^summary: (\d+)", out.read_text(), re.M)
    if found is None:
        raise SystemExit(f"no summary in {out}")
    return int(found[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", help="git revision to compare against")
    p.add_argument("--jobs", type=int, default=5_000)
    p.add_argument("--conc", type=int, default=50)
    p.add_argument("--extra", default="", help="comma-separated: results, keep")
    p.add_argument("--child", choices=sorted(ab_trees.OPTIONS), help=argparse.SUPPRESS)
    p.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.child, args.phase, args.url, args.jobs, args.conc)
        return
    if not args.base:
        p.error("--base REV is required")
    sides = ["base", "new", *[x for x in args.extra.split(",") if x]]

    import redis

    from emq.embedded.standalone import EmbeddedServer

    per_job: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="emq-abi-") as name:
        tmp = Path(name)
        base = tmp / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(base),
                        args.base], check=True)  # fmt: skip
        server = EmbeddedServer(tmp / "server")
        url = server.start()
        try:
            redis.Redis.from_url(url).config_set("appendonly", "no")
            for side in sides:
                src = base / "src" if side == "base" else ROOT / "src"
                counts = {}
                for jobs in (args.jobs, 3 * args.jobs):
                    for phase in PHASES:
                        counts[phase, jobs] = count(side, phase, src, url, jobs, args.conc, tmp)
                for phase in PHASES:
                    extra = counts[phase, 3 * args.jobs] - counts[phase, args.jobs]
                    per_job[side, phase] = extra / (2 * args.jobs)
                    print(f"{side:8} {phase:8} {per_job[side, phase]:10,.0f} instructions/job",
                          flush=True)  # fmt: skip
        finally:
            server.stop()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)])
    print("\nratio to base:")
    for side in sides[1:]:
        for phase in PHASES:
            print(f"  {side:8} {phase:8} {per_job[side, phase] / per_job['base', phase]:.3f}")


if __name__ == "__main__":
    main()
