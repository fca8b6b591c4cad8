"""Module-level handlers for ``isolation="process"`` tests: the child process imports them
by reference, so they cannot be closures."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Any

from emq.worker import Permanent

HANG_S = 120  # bounds a hang, never a speed


def pid(payload: Any) -> int:
    return os.getpid()


async def apid(payload: Any) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"pid": os.getpid(), "got": payload}


def hang(payload: Any) -> None:
    time.sleep(HANG_S)


def hang_then_mark(payload: Any) -> None:
    """Hangs; if stopped by SIGTERM (a cancel), its ``finally`` writes the file it was given.
    Says it started by writing ``started``."""
    Path(payload["started"]).write_text(str(os.getpid()))
    try:
        time.sleep(HANG_S)
    finally:
        Path(payload["mark"]).write_text("cleaned up")


def eat_memory(payload: Any) -> int:
    block = bytearray(payload["mb"] * 1024 * 1024)
    return len(block)


def die(payload: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def segfault(payload: Any) -> None:
    ctypes.string_at(0)


def refuse(payload: Any) -> None:
    raise Permanent(f"cannot handle {payload!r}")


def fail(payload: Any) -> None:
    raise ValueError(f"bad value {payload!r}")


def slow(payload: Any) -> int:
    time.sleep(payload["s"])
    return os.getpid()


def typed_pid(n: int, times: int = 1) -> dict[str, int]:
    """A task's function: its arguments come from the payload by name."""
    return {"pid": os.getpid(), "product": n * times}


async def atyped(n: int) -> int:
    await asyncio.sleep(0)
    return n + 1
