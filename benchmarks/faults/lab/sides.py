"""Parts of one run side by side: ``run.py --parallel N`` splits the systems into N parts,
runs each as a ``run.py --only PART --no-docs`` child of its own (own ledger, own servers,
own free ports), and joins their results files into one, as ``--merge`` does. An episode
mostly waits out a system's recovery period, so parts side by side cut the wall time about
N-fold on two cores; the counts do not depend on it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

WROTE = re.compile(r"wrote (\S+\.json)")


def split(systems: list[str], parts: int) -> list[list[str]]:
    """Round robin, so each part gets a share of the slow and the quick systems."""
    out: list[list[str]] = [[] for _ in range(min(parts, len(systems)))]
    for i, name in enumerate(systems):
        out[i % len(out)].append(name)
    return out


def run_parts(script: Path, groups: list[list[str]], flags: list[str], logs: Path) -> list[Path]:
    """Run each group as a child run, a few seconds apart (their results files are named by
    the second); the results files they wrote, or SystemExit naming a part that failed."""
    logs.mkdir(parents=True, exist_ok=True)
    children = []
    for i, group in enumerate(groups):
        log = logs / f"part-{i}.log"
        cmd = [sys.executable, str(script), "--only", ",".join(group), "--no-docs",
               "--parallel", "1", *flags]
        children.append((group, log, subprocess.Popen(cmd, stdout=log.open("w"),
                                                      stderr=subprocess.STDOUT)))  # fmt: skip
        time.sleep(2)
    files = []
    for group, log, child in children:
        code = child.wait()
        found = WROTE.findall(log.read_text())
        if code != 0 or not found:
            raise SystemExit(f"the part {','.join(group)} failed (exit {code}): see {log}")
        files.append(Path(found[-1]))
    return files
