"""Typed tasks (docs/tasks.md): a task enqueued through its own signature runs on a burst
worker with its arguments; a job enqueued by name with a plain payload runs the same task;
arguments that do not fit are refused with nothing written, and a payload that does not fit
fails its job with no retry; the context, ``using()``, async tasks and direct calls."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import redis

from emq import (
    AsyncQueue,
    InvalidArguments,
    InvalidInput,
    InvalidOption,
    JobContext,
    Queue,
    TaskNotBound,
    Tasks,
    Worker,
    WorkerOptions,
    chain,
)
from tests.support.docs import ROOT, python_blocks

BURST = WorkerOptions(burst=True, concurrency=2)


def _burst(tasks: Tasks, url: str) -> Worker:
    w = Worker(tasks.queue_name, url=url, tasks=tasks, options=BURST)
    w.run_sync(handle_signals=False)
    return w


def _keys(client: redis.Redis, qname: str) -> list[str]:
    return list(client.scan_iter(f"*{qname}*"))


def test_a_typed_enqueue_runs_with_its_arguments(url: str, qname: str, queue: Queue) -> None:
    tasks = Tasks(qname, url=url)
    seen: list[tuple[str, str]] = []

    @tasks.task(max_attempts=2)
    def send(to: str, subject: str = "hello") -> str:
        seen.append((to, subject))
        return to

    first = send.enqueue("a@b", subject="hi")
    second = send.enqueue(to="c@d")
    assert queue.job(first).payload == {"to": "a@b", "subject": "hi"}
    assert queue.job(second).payload == {"to": "c@d"}  # defaults are the worker's
    assert queue.job(first).name == "send" and queue.job(first).max_attempts == 2
    _burst(tasks, url)
    assert sorted(seen) == [("a@b", "hi"), ("c@d", "hello")]
    assert queue.counts()["completed"] == 2
    tasks.close()


def test_a_tasks_specs_enqueue_many_and_make_flows(url: str, qname: str, queue: Queue) -> None:
    tasks = Tasks(qname, url=url)
    seen: list[str] = []

    @tasks.task(priority=2)
    def send(to: str) -> str:
        seen.append(to)
        return to

    ids = queue.enqueue_many([send.spec(to) for to in ("a", "b")])
    assert [queue.job(i).payload for i in ids] == [{"to": "a"}, {"to": "b"}]
    assert queue.job(ids[0]).priority == 2
    queue.enqueue_flow(chain(send.spec("c"), send.using(lane="last").spec(to="d")))
    with pytest.raises(InvalidArguments, match="'too'"):
        send.spec(too="e")  # type: ignore[call-arg]
    _burst(tasks, url)
    assert sorted(seen) == ["a", "b", "c", "d"]
    tasks.close()


def test_a_job_enqueued_by_name_runs_the_task(url: str, qname: str, queue: Queue) -> None:
    tasks = Tasks(qname)  # a worker-only registry needs no queue of its own
    seen: list[str] = []

    @tasks.task()
    def send(to: str) -> None:
        seen.append(to)

    queue.enqueue("send", {"to": "a@b"})
    _burst(tasks, url)
    assert seen == ["a@b"] and queue.counts()["completed"] == 1


def test_arguments_that_do_not_fit_are_refused_before_anything_is_written(
    url: str, qname: str, client: redis.Redis
) -> None:
    tasks = Tasks(qname, url=url)

    @tasks.task()
    def send(to: str, n: int = 1) -> None:
        pass

    wrong: list[tuple[tuple[Any, ...], dict[str, Any], str]] = [
        ((), {"too": "x"}, "'too'"),
        ((), {}, "'to'"),
        (("a", 1, 2), {}, "too many positional"),
        ((), {"to": "a", "n": object()}, "argument 'n'"),
        ((), {"to": float("nan")}, "argument 'to'"),
    ]
    for args, kwargs, said in wrong:
        with pytest.raises(InvalidArguments) as refused:
            send.enqueue(*args, **kwargs)
        message = str(refused.value)
        assert "'send'" in message and said in message and "\n" not in message
        assert isinstance(refused.value, TypeError)
    assert _keys(client, qname) == []
    tasks.close()


def test_a_payload_that_does_not_fit_fails_with_no_retry(
    url: str, qname: str, queue: Queue
) -> None:
    tasks = Tasks(qname)
    ran: list[str] = []

    @tasks.task(max_attempts=5)
    def send(to: str) -> None:
        ran.append(to)

    unknown = queue.enqueue("send", {"to": "a", "cc": "b"})
    missing = queue.enqueue("send", {})
    not_an_object = queue.enqueue("send", ["a"])
    _burst(tasks, url)
    assert ran == []
    for job_id, said in [(unknown, "'cc'"), (missing, "'to'"), (not_an_object, "list")]:
        job = queue.job(job_id)
        assert job.state == "dead" and job.attempts == 1  # no retry: the payload cannot heal
        assert "task 'send'" in (job.last_error or "") and said in (job.last_error or "")


def test_the_context_is_the_workers_not_the_payloads(url: str, qname: str, queue: Queue) -> None:
    tasks = Tasks(qname, url=url)
    seen: list[tuple[str, int, int]] = []

    @tasks.task()
    def work(ctx: JobContext, n: int) -> None:
        seen.append((ctx.id, ctx.attempts, n))

    @tasks.task()
    def named(ctx, n: int) -> None:  # type: ignore[no-untyped-def]
        seen.append((ctx.id, ctx.attempts, n))

    job_id = work.enqueue(n=3)
    other = named.enqueue(4)
    assert queue.job(job_id).payload == {"n": 3} and queue.job(other).payload == {"n": 4}
    _burst(tasks, url)
    assert sorted(seen) == sorted([(job_id, 1, 3), (other, 1, 4)])
    ctx = JobContext(queue=qname, id="direct", name="work", token=0, attempts=1, stalled=0,
                     beat=lambda: None)  # fmt: skip
    work(ctx, 5)  # a direct call gives the context first
    assert seen[-1] == ("direct", 1, 5)
    with pytest.raises(InvalidArguments, match="'ctx'"):
        work.enqueue(ctx=ctx, n=1)  # type: ignore[call-arg]
    tasks.close()


def test_using_sets_one_enqueues_options_apart_from_the_arguments(
    url: str, qname: str, queue: Queue
) -> None:
    tasks = Tasks(qname, url=url)

    @tasks.task(priority=3, lane="mail")
    def send(key: str, delay_ms: int = 0) -> None:  # the names of enqueue options: no clash
        pass

    plain = queue.job(send.enqueue("k1", delay_ms=7))
    assert plain.payload == {"key": "k1", "delay_ms": 7}
    assert plain.priority == 3 and plain.lane == "mail" and plain.state == "pending"
    once = send.using(key="dedupe", delay_ms=60_000, priority=5)
    first, again = once.enqueue("k2"), once.using(lane="other").enqueue(key="k2")
    assert first == again and not again.created  # one dedup key: one job
    job = queue.job(first)
    assert job.state == "scheduled" and job.priority == 5 and job.payload == {"key": "k2"}
    with pytest.raises(InvalidOption):
        send.using(priority=-(10**12))  # checked at once, as Queue.enqueue would
    other = Queue.from_url(url, f"{qname}-other")
    moved = send.using(queue=other).enqueue("k3")
    assert other.job(moved).payload == {"key": "k3"} and other.counts()["pending"] == 1
    with pytest.raises(InvalidOption, match="aenqueue"):
        send.using(queue=AsyncQueue.from_url(url, qname)).enqueue("k4")
    other.close()
    tasks.close()


async def test_an_async_task_is_enqueued_and_run_from_asyncio(
    url: str, qname: str, aqueue: AsyncQueue
) -> None:
    tasks = Tasks(qname)
    tasks.bind(aqueue)
    seen: list[str] = []

    @tasks.task()
    async def send(to: str) -> str:
        seen.append(to)
        return to

    job_id = await send.aenqueue("a@b")
    assert (await aqueue.job(job_id)).payload == {"to": "a@b"}
    with pytest.raises(TaskNotBound, match=r"tasks\.bind"):
        send.enqueue("c@d")  # only an AsyncQueue was bound: nothing to send through
    await Worker(aqueue, tasks=tasks, options=BURST).run()
    assert seen == ["a@b"] and (await aqueue.counts())["completed"] == 1
    assert await send("direct") == "direct" and seen[-1] == "direct"
    await aqueue.close()


def test_a_direct_call_runs_the_function(qname: str) -> None:
    tasks = Tasks(qname)

    @tasks.task()
    def add(a: int, b: int = 1) -> int:
        """Adds."""
        return a + b

    assert add(2) == 3 and add(2, b=5) == 7
    assert add.__name__ == "add" and add.__doc__ == "Adds." and add.name == "add"
    assert tasks["add"] is add and list(tasks) == [add]
    with pytest.raises(TaskNotBound, match="url="):
        add.enqueue(1)  # nothing bound, no url: said before anything is sent


def test_a_worker_task_is_sent_through_the_workers_queue(url: str, queue: Queue) -> None:
    w = Worker(queue, options=BURST)
    seen: list[int] = []

    @w.task("double", max_attempts=1)
    def double(n: int) -> int:
        seen.append(n * 2)
        return n * 2

    job_id = double.enqueue(21)
    assert queue.job(job_id).name == "double" and queue.job(job_id).max_attempts == 1
    w.run_sync(handle_signals=False)
    assert seen == [42]


@dataclasses.dataclass
class Address:
    city: str
    zip: str = ""


@dataclasses.dataclass
class Person:
    name: str
    address: Address


def test_a_dataclass_argument_is_rebuilt_on_the_worker(
    url: str, qname: str, queue: Queue, client: redis.Redis
) -> None:
    tasks = Tasks(qname, url=url)
    seen: list[Person] = []

    @tasks.task()
    def greet(person: Person, *, loud: bool = False) -> None:
        seen.append(person)

    with pytest.raises(InvalidArguments, match="argument 'person' cannot be read as Person"):
        greet.enqueue({"name": "x"})  # type: ignore[arg-type]
    assert _keys(client, qname) == []
    job_id = greet.enqueue(Person("Ada", Address("London")), loud=True)
    assert queue.job(job_id).payload == {
        "person": {"name": "Ada", "address": {"city": "London", "zip": ""}},
        "loud": True,
    }
    queue.enqueue("greet", {"person": {"name": "Bob", "address": {"city": "Paris"}}})
    _burst(tasks, url)
    assert sorted(p.name for p in seen) == ["Ada", "Bob"]
    assert all(isinstance(p.address, Address) for p in seen)
    tasks.close()


def test_positional_only_and_extra_keyword_parameters(url: str, qname: str, queue: Queue) -> None:
    tasks = Tasks(qname, url=url)
    seen: list[tuple[int, dict[str, Any]]] = []

    @tasks.task()
    def tag(n: int, /, **labels: str) -> None:
        seen.append((n, labels))

    job_id = tag.enqueue(1, colour="red")
    assert queue.job(job_id).payload == {"n": 1, "colour": "red"}
    _burst(tasks, url)
    assert seen == [(1, {"colour": "red"})]
    tasks.close()


def test_tasks_that_cannot_be_made_are_refused_at_once(qname: str) -> None:
    tasks = Tasks(qname)
    with pytest.raises(InvalidOption, match=r"\*items"):

        @tasks.task()
        def spread(*items: int) -> None:
            pass

    with pytest.raises(InvalidOption, match="annotate it JobContext"):

        @tasks.task()
        def odd(ctx: str) -> None:
            pass

    for bad in ({"timeout_ms": 0}, {"priority": -(10**12)}, {"lane": ""}):
        with pytest.raises(InvalidInput):  # InvalidOption, InvalidName
            tasks.task("bad", **bad)(lambda: None)  # type: ignore[arg-type]
    assert len(tasks) == 0

    @tasks.task()
    def once() -> None:
        pass

    with pytest.raises(InvalidOption, match="already has a task named 'once'"):
        tasks.task("once")(lambda: None)
    with pytest.raises(InvalidOption, match="parentheses"):
        tasks.task(once)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="run on a worker of that queue"):
        Worker(f"{qname}-elsewhere", url="redis://127.0.0.1:1", tasks=tasks)
    w = Worker(qname, url="redis://127.0.0.1:1", handlers={"once": lambda p: None})
    with pytest.raises(InvalidOption, match="already has a handler"):
        w.include(tasks)


def test_the_docs_first_example_runs(url: str, qname: str, queue: Queue) -> None:
    code = python_blocks(ROOT / "docs" / "tasks.md")[0]
    code = code.replace("redis://127.0.0.1:6379/0", url).replace('"emails"', repr(qname))
    sent: list[tuple[str, str]] = []

    async def smtp_send(to: str, subject: str) -> None:
        sent.append((to, subject))

    scope: dict[str, Any] = {"smtp_send": smtp_send, "make_thumbnail": lambda i, w: f"{i}@{w}"}
    exec(compile(code, "docs/tasks.md", "exec"), scope)
    scope["send"].enqueue("a@b", subject="Hi")
    scope["resize"].enqueue(image="a.png", width=100)
    _burst(scope["tasks"], url)
    assert sent == [("a@b", "Hi")] and queue.counts()["completed"] == 2
    scope["tasks"].close()
