"""Run the whole benchmark: emq against the Python queues, the raw limits, emq-only figures.

    python3 benchmarks/run.py                 # full run (~15 min), updates docs/benchmarks.md
    python3 benchmarks/run.py --quick         # smaller sizes, a couple of minutes
    python3 benchmarks/run.py --only emq,rq   # just these systems (raw limits always run)
    python3 benchmarks/run.py --only emq,bullmq,bullmq-node   # bullmq for Node needs node, npm

It builds benchmarks/.venv (emq editable, matplotlib) and one venv per peer under
benchmarks/.venv/peers/ (`npm ci` for the Node peers, which are skipped without node), starts
one private server on loopback, and writes benchmarks/results/<date>.json and .png. See
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.node import NODE_PEERS
from harness.venvs import PEERS, ensure_harness


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes; does not touch the docs")
    p.add_argument("--only", default="", help="comma-separated systems, e.g. emq,arq")
    p.add_argument("--runs", type=int, default=3, help="runs per figure (median taken)")
    p.add_argument(
        "--memory-runs",
        type=int,
        default=1,
        help="runs of the 100,000-job memory figure (deterministic to a few bytes per job)",
    )
    p.add_argument(
        "--emq-mode",
        choices=["worker", "loop", "both"],
        default="both",
        help="emq processing through the Worker (row emq), a bare claim/complete loop (row "
        "emq-loop, a reference), or both (default)",
    )
    p.add_argument("--docs", action="store_true", help="update docs/benchmarks.md even if quick")
    p.add_argument("--no-docs", action="store_true", help="never update docs/benchmarks.md")
    p.add_argument(
        "--render",
        metavar="RESULTS_JSON",
        help="measure nothing: redraw the chart and docs/benchmarks.md from a results file",
    )
    args = p.parse_args()
    systems = ["emq"]
    for peer in PEERS:  # each Node peer right after the Python port of the same queue
        systems += [peer, *(n for n in NODE_PEERS if n.removesuffix("-node") == peer)]
    systems += [n for n in NODE_PEERS if n not in systems]
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in systems]
        if unknown:
            p.error(f"unknown systems {unknown}; choose from {systems}")
        systems = [s for s in systems if s in wanted]
    args.systems = systems
    if args.runs < 1:
        p.error("--runs must be >= 1")
    return args


def main() -> None:
    args = parse()
    ensure_harness()  # re-execs inside benchmarks/.venv when needed
    if args.render:
        from harness.report import render

        render(Path(args.render).resolve())
        return
    from harness.orchestrate import run_all

    run_all(args, " ".join(["python3", "benchmarks/run.py", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
