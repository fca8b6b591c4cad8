#!/usr/bin/env python3
"""Generate ``src/emq/queue/_sync/`` from ``src/emq/queue/_async/``, the whole folder.

The sync shells must not drift from the asyncio ones, so only ``_async/`` is written by hand
and every ``_sync/*.py`` is this script's output. The rules are generic (a token rename, the
``async``/``await`` keywords, the asyncio primitives and their threading counterparts): no
rule names a file, so the docstrings in ``_async/`` are written to be true in both halves.
Each generated file starts with a banner naming its source; the output is formatted (imports
sorted) by ruff. A rule that matches nothing anywhere in the folder is an error: a rule that
no longer does anything is a rule that may hide a drift.

    python scripts/unasync.py          # rewrite src/emq/queue/_sync/
    python scripts/unasync.py --check  # exit 1 if any file there is out of date
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "emq" / "queue" / "_async"
TARGET = ROOT / "src" / "emq" / "queue" / "_sync"
BANNER = "# Generated from emq/queue/_async/{name} by scripts/unasync.py: edit that file instead.\n"

# (pattern, replacement), regular expressions applied in order to each file
RULES: list[tuple[str, str]] = [
    # a blocking call handed to a thread is made directly
    (r"\bawait asyncio\.to_thread\((\w[\w.]*)(?:, ?|(?=\)))", r"\1("),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\basync def\b", "def"),
    (r"\bawait ", ""),
    (r"for (\w+) in (\w+):\n\s+yield \1\n", r"yield from \2\n"),
    (r"\bimport asyncio\n", "import threading\n"),
    (r"\basyncio\.Lock\(\)", "threading.Lock()"),
    (r"\basyncio\.sleep\(", "time.sleep("),
    (r"\bimport redis\.asyncio\n", "import redis\n"),
    (r"\bredis\.asyncio\.Redis\b", "redis.Redis"),
    (r"\bAwaitable\[(\w+)\]", r"\1"),
    (r"\ban asyncio\b", "a sync"),  # prose: "on an asyncio client"
    (r"\basyncio\b", "sync"),  # prose; left in code it breaks the build, as it should
]

# whole-word renames: the asyncio name -> the sync name
NAMES = {
    "AsyncQueue": "Queue",
    "AsyncPartitionedQueue": "PartitionedQueue",
    "AsyncReads": "Reads",
    "AsyncControl": "Control",
    "AsyncSettings": "Settings",
    "AsyncSteps": "Steps",
    "AsyncIterator": "Iterator",
    "agather": "gather",
    "run_async": "run",
    "run_pipelined_async": "run_pipelined",
    "aread_range": "read_range",
    "aiter_events": "iter_events",
    "ahistory": "history",
    "afloor_logs": "floor_logs",
    "arun": "run",
    "acheck": "check",
    "acheck_all": "check_all",
    "aclose_client": "close_client",
    "async_client": "sync_client",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "_async": "_sync",
}


def unasync(text: str, hits: dict[str, int]) -> str:
    for pattern, replacement in RULES:
        text, n = re.subn(pattern, replacement, text)
        hits[pattern] += n
    for old, new in NAMES.items():
        text, n = re.subn(rf"\b{re.escape(old)}\b", new, text)
        hits[old] += n
    # an import list that named a type the rules removed (Awaitable) keeps no empty slot
    text = re.sub(r"\bimport Awaitable\n", "", text)
    text = re.sub(r", Awaitable\b|\bAwaitable, ", "", text)
    return text


def formatted(text: str, path: Path) -> str:
    """``text`` with its imports sorted and formatted as ruff would, for ``path``."""
    args = ["--stdin-filename", str(path)]
    ruff = [sys.executable, "-m", "ruff"]
    fixed = subprocess.run([*ruff, "check", "--fix-only", "--select", "I,F401", "--quiet",
                            *args, "-"], input=text, capture_output=True, text=True,
                           check=True, cwd=ROOT).stdout  # fmt: skip
    return subprocess.run([*ruff, "format", "--quiet", *args, "-"], input=fixed,
                          capture_output=True, text=True, check=True, cwd=ROOT).stdout  # fmt: skip


def generate() -> dict[Path, str]:
    """Every file ``_sync/`` must hold, by path."""
    hits = dict.fromkeys([p for p, _ in RULES] + list(NAMES), 0)
    wanted: dict[Path, str] = {}
    for source in sorted(SOURCE.glob("*.py")):
        target = TARGET / source.name
        text = unasync(source.read_text(), hits)
        wanted[target] = BANNER.format(name=source.name) + formatted(text, target)
    idle = [rule for rule, n in hits.items() if n == 0]
    if idle:
        raise SystemExit(f"unasync: these rules match nothing in {SOURCE}: {idle}")
    return wanted


def main(argv: list[str]) -> int:
    wanted = generate()
    extra = [p for p in TARGET.glob("*.py") if p not in wanted]
    if "--check" in argv:
        stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
        for p in stale + extra:
            print(f"{p.relative_to(ROOT)} is out of date: run python scripts/unasync.py",
                  file=sys.stderr)  # fmt: skip
        return 1 if stale or extra else 0
    TARGET.mkdir(exist_ok=True)
    for p in extra:
        p.unlink()
    for p, text in wanted.items():
        p.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
