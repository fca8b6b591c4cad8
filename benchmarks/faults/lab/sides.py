"""Parts of one run side by side: ``run.py --parallel N`` splits the run's episodes (one run of
one cell: a system under one scenario and server setting) into N parts, runs each as a
``run.py --pairs ... --no-docs`` child of its
own (own ledger, own servers, own free ports), and joins their results files into one, as
``--merge`` does. An episode mostly waits out a system's recovery period, so parts side by side
cut the wall time about N-fold on two cores; the counts do not depend on it.

The episodes are dealt longest first to the part with the least expected time (:func:`cost`),
so a system with a 90 s recovery period is spread over every part instead of setting the
length of one."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .names import Cell

WROTE = re.compile(r"wrote (\S+\.json)")
Pair = Cell  # (system, scenario, appendfsync or "-", run): one episode


def cost(sizes: Any, info: dict[str, Any], scenario: str) -> float:
    """An episode's expected seconds: what :mod:`lab.episodes` waits for, at most."""
    if (info.get("scenarios") or {}).get(scenario, "") is not None:
        return 1.0  # not run: the row only says why
    recovery = float(info.get("recovery_s") or 0)
    if scenario == "cron":
        every = float(info.get("cron_every_s") or sizes.every_s)
        return max(sizes.cron_s, 2 * every + 5) + 5
    return sizes.warmup_s + sizes.jobs / sizes.rate + recovery + sizes.margin_s + 5


def split(pairs: list[Pair], parts: int, costs: dict[Pair, float]) -> list[list[Pair]]:
    """Longest first, each to the part that is shortest so far; each part keeps the run's
    order (system by system), so its log reads like a run of its own."""
    order = {p: i for i, p in enumerate(pairs)}
    out: list[list[Pair]] = [[] for _ in range(max(1, min(parts, len(pairs))))]
    total = [0.0] * len(out)
    for pair in sorted(pairs, key=lambda p: (-costs.get(p, 1.0), order[p])):
        i = total.index(min(total))
        out[i].append(pair)
        total[i] += costs.get(pair, 1.0)
    return [sorted(part, key=order.__getitem__) for part in out if part]


def flag(part: list[Pair]) -> str:
    return ",".join(f"{system}:{scenario}:{fsync}:{run}" for system, scenario, fsync, run in part)


def parse_pairs(text: str) -> list[Pair]:
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        parts = item.split(":")
        if len(parts) != 4 or not all(parts) or not parts[3].isdigit():
            raise ValueError(f"{item!r}: give SYSTEM:SCENARIO:APPENDFSYNC:RUN")
        out.append((parts[0], parts[1], parts[2], int(parts[3])))
    return out


def run_parts(script: Path, groups: list[list[Pair]], flags: list[str], logs: Path) -> list[Path]:
    """Run each group as a child run, a few seconds apart (their results files are named by
    the second); the results files they wrote, or SystemExit naming a part that failed."""
    logs.mkdir(parents=True, exist_ok=True)
    children = []
    for i, group in enumerate(groups):
        log = logs / f"part-{i}.log"
        cmd = [sys.executable, str(script), "--pairs", flag(group), "--no-docs",
               "--parallel", "1", *flags]  # fmt: skip
        children.append((group, log, subprocess.Popen(cmd, stdout=log.open("w"),
                                                      stderr=subprocess.STDOUT)))  # fmt: skip
        time.sleep(1.1)
    files = []
    for group, log, child in children:
        code = child.wait()
        found = WROTE.findall(log.read_text())
        if code != 0 or not found:
            raise SystemExit(f"the part {flag(group)} failed (exit {code}): see {log}")
        files.append(Path(found[-1]))
    return files
