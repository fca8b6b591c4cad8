"""The seams that keep the code small (issue 10): the core imports none of the extras."""

from __future__ import annotations

import subprocess
import sys


def test_the_core_imports_without_the_archive() -> None:
    probe = (
        "import sys, emq; from emq import Queue, AsyncQueue, Worker; "
        "print(sorted(m for m in sys.modules if m.startswith('emq.archive') or m == 'sqlite3'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    lazy = "import emq; print(emq.Floor.__name__, emq.Archive.__name__)"
    out = subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["Floor", "Archive"]
