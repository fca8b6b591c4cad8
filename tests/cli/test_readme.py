"""What the README's first two examples promise, beyond running (tests/docs runs every block):
the Ten lines run one job as a script and only define the worker when imported; the
primitives complete one job and schedule the retry of another. Each runs on its own queue,
with the placeholders (an SMTP call, the server URL, the queue name) filled in."""

from __future__ import annotations

from typing import Any

from tests.support.docs import ROOT, python_blocks

BLOCKS = python_blocks(ROOT / "README.md")


def _fill(code: str, url: str, qname: str) -> str:
    return code.replace("redis://127.0.0.1:6379/0", url).replace('"emails"', repr(qname))


def _ten_lines(url: str, qname: str, module: str) -> list[str]:
    """Run the Ten lines as ``module`` would (``__main__``: the script; else an import, as
    ``emq worker myapp:worker`` does); returns the addresses the stand-in SMTP call got."""
    code = _fill(BLOCKS[0], url, qname)
    assert "worker.run_sync()" in code
    code = code.replace("worker.run_sync()", "worker.configure(burst=True)\n    worker.run_sync()")
    sent: list[str] = []

    async def smtp_send(to: str) -> None:
        sent.append(to)

    scope: dict[str, Any] = {"smtp_send": smtp_send, "__name__": module}
    exec(compile(code, "README.md", "exec"), scope)
    scope["tasks"].close()
    return sent


def test_the_ten_lines_run_a_job(url: str, qname: str) -> None:
    from emq import Queue  # read apart: the example may enqueue through a Queue or a task

    assert _ten_lines(url, qname, "__main__") == ["a@b"]
    with Queue.from_url(url, qname) as q:
        assert q.counts()["completed"] == 1


def test_the_ten_lines_imported_by_emq_worker_only_define_the_worker(url: str, qname: str) -> None:
    from emq import Queue

    assert _ten_lines(url, qname, "myapp") == []  # no enqueue, no worker run at import
    with Queue.from_url(url, qname) as q:
        assert not any(q.counts().values())


def test_the_primitives_example_runs(url: str, qname: str) -> None:
    from emq import Queue

    q = Queue.from_url(url, qname)
    q.enqueue("send", {"to": "a@b"})
    q.enqueue("send", {"to": "fail"})
    sent: list[str] = []

    def send_email(to: str) -> None:
        if to == "fail":
            raise RuntimeError("mailbox full")
        sent.append(to)

    scope: dict[str, Any] = {"q": q, "send_email": send_email}
    exec(compile(BLOCKS[1], "README.md", "exec"), scope)
    counts = q.counts()
    assert sent == ["a@b"] and counts["completed"] == 1 and counts["schedule"] == 1
    q.close()
