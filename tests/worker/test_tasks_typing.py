"""A task's ``enqueue`` is typed from its function (docs/tasks.md, Typing): ``mypy --strict``
rejects a producer's wrong argument at its line, drops the context from what ``enqueue``
takes, and passes a producer whose calls fit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

TASKS = """\
from dataclasses import dataclass

from emq import BatchContext, JobContext, Tasks

tasks = Tasks("emails")


@dataclass
class Doc:
    id: int


@tasks.task(batch_size=10, batch_wait_ms=5)
def index(docs: list[Doc]) -> list[int]:
    return [d.id for d in docs]


@tasks.task(batch_size=10)
async def aindex(ctx: BatchContext, docs: list[Doc]) -> None:
    pass


@tasks.task()
def send(to: str, n: int = 1) -> None:
    pass


@tasks.task()
async def asend(to: str) -> None:
    pass


@tasks.task()
def with_ctx(ctx: JobContext, to: str) -> int:
    return 1
"""

GOOD = """\
from emq import EnqueuedId, JobContext

from mytasks import Doc, aindex, asend, index, send, with_ctx


def produce(ctx: JobContext) -> list[str]:
    ids: list[str] = [send.enqueue("a@b"), send.enqueue(to="a", n=2)]
    ids += [index.enqueue(Doc(1)), index.using(priority=1).enqueue(Doc(2))]
    ids.append(send.using(delay_ms=5, key="k").enqueue("x"))
    ids.append(with_ctx.enqueue(to="x"))
    ids.extend(spec.name for spec in [send.spec("a"), with_ctx.using(lane="l").spec(to="b")])
    with_ctx(ctx, "direct")
    send("direct", 3)
    return ids


async def aproduce() -> EnqueuedId:
    await asend("direct")
    await aindex.aenqueue(Doc(3))
    return await asend.aenqueue(to="a@b")
"""

BAD = """\
from mytasks import Doc, asend, index, send, with_ctx


def produce() -> None:
    send.enqueue(to=1)
    send.enqueue(too="x")
    send.using(priority=1).enqueue("a", n="many")
    with_ctx.enqueue(ctx=None, to="x")
    send.enqueue()


async def aproduce() -> None:
    await asend.aenqueue("a", "b")


def specs() -> None:
    send.spec(to=2)


def batches() -> None:
    index.enqueue([Doc(1)])
    index.enqueue("x")
"""

EXPECTED = {  # line -> what mypy says there
    5: 'Argument "to" to "enqueue" of "BoundTask" has incompatible type "int"',
    6: 'Unexpected keyword argument "too"',
    7: 'Argument "n" to "enqueue" of "BoundTask" has incompatible type "str"',
    8: 'Unexpected keyword argument "ctx"',
    9: 'Missing positional argument "to"',
    13: 'Too many arguments for "aenqueue"',
    17: 'Argument "to" to "spec" of "BoundTask" has incompatible type "int"',
    21: 'Argument 1 to "enqueue" of "BoundTask" has incompatible type "list[Doc]"',
    22: 'Argument 1 to "enqueue" of "BoundTask" has incompatible type "str"',
}


@pytest.mark.slow
def test_mypy_rejects_a_wrong_argument_at_its_line_and_passes_a_good_producer(
    tmp_path: Path,
) -> None:
    (tmp_path / "mytasks.py").write_text(TASKS)
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--no-pretty",
         "--cache-dir", str(tmp_path / "cache"), "mytasks.py", "good.py", "bad.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    errors: dict[str, dict[int, list[str]]] = {}
    for m in re.finditer(r"^(\w+)\.py:(\d+): error: (.*)$", run.stdout, re.M):
        errors.setdefault(m[1], {}).setdefault(int(m[2]), []).append(m[3])
    assert "good" not in errors and "mytasks" not in errors, run.stdout
    bad = errors.get("bad", {})
    assert sorted(bad) == sorted(EXPECTED), run.stdout
    for line, said in EXPECTED.items():
        assert any(said in e for e in bad[line]), (line, bad[line])
