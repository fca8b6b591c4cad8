"""emq.contrib.asgi in real apps on the suite's servers: the example FastAPI app of
examples/fastapi_app.py served with its lifespan (a POST enqueues, a GET reads the job's
state), and the lifespan's promises: queues open for the app's life and closed after it,
the app's own lifespan inside, several queues and servers composed, clear errors."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import pytest
import redis
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from emq import AsyncQueue, InvalidName, InvalidOption, InvalidUrl, Queue
from emq.contrib.asgi import STATE, emq_lifespan, get_queue, queue_dependency
from emq.testing import arun_worker
from tests.support.asgi import served

ROOT = Path(__file__).parents[2]
TheQueue = Annotated[AsyncQueue, Depends(get_queue)]
Sms = Annotated[AsyncQueue, Depends(queue_dependency("sms"))]


def connections(client: redis.Redis) -> set[str]:
    """The ids of the server's open connections (another test's closing one may still
    leave, so a test compares ids, not a count)."""
    return {c["id"] for c in client.client_list()}


@pytest.fixture
def example(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """examples/fastapi_app.py imported fresh with EMQ_URL set to the suite's server; its
    queue ("emails") is emptied after the test."""
    monkeypatch.setenv("EMQ_URL", url)
    path = ROOT / "examples" / "fastapi_app.py"
    spec = importlib.util.spec_from_file_location("fastapi_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fastapi_app", module)
    spec.loader.exec_module(module)
    yield module
    with Queue.from_url(url, module.QUEUE) as q:
        q.obliterate(force=True)


async def test_the_example_app_enqueues_on_post_and_reads_state_on_get(
    example: ModuleType, client: redis.Redis
) -> None:
    before = connections(client)
    async with served(example.app) as http:
        sent = await http.post("/emails", json={"to": "ada@example.com", "subject": "hi"})
        bad = await http.post("/emails", json={"to": "nobody", "subject": "hi"})
        assert sent.status_code == bad.status_code == 202
        job, dead = sent.json()["id"], bad.json()["id"]
        assert (await http.get(f"/jobs/{job}")).json() == {
            "id": job, "state": "pending", "attempts": 0, "error": None,
        }  # fmt: skip
        run = await arun_worker(example.worker)
        assert run.outcomes() == {job: "completed", dead: "dead"}
        assert (await http.get(f"/jobs/{job}")).json()["state"] == "completed"
        failed = (await http.get(f"/jobs/{dead}")).json()
        assert (failed["state"], failed["attempts"]) == ("dead", 1)
        assert "not an address" in failed["error"]
        assert (await http.post("/emails", json={"to": "x"})).status_code == 422
        assert (await http.get("/jobs/nope")).status_code == 400
        assert (await http.get("/jobs/JOB00000000000")).status_code == 404
        assert list(getattr(example.app.state, STATE)) == ["emails"]
    assert getattr(example.app.state, STATE) == {}
    assert connections(client) <= before  # the app's connections closed at shutdown


async def test_the_apps_own_lifespan_runs_inside_and_its_state_reaches_requests(
    url: str,
) -> None:
    seen: list[str] = []

    @asynccontextmanager
    async def own(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        seen.append(",".join(getattr(app.state, STATE)))  # the queues are open already
        yield {"greeting": "hello"}
        seen.append(",".join(getattr(app.state, STATE)))  # and still open at shutdown

    app = FastAPI(lifespan=emq_lifespan(url, "a-queue", lifespan=own))

    @app.get("/")
    async def index(request: Request, q: TheQueue) -> dict[str, str]:
        return {"queue": q.name, "greeting": request.state.greeting}

    async with served(app) as http:
        assert (await http.get("/")).json() == {"queue": "a-queue", "greeting": "hello"}
    assert seen == ["a-queue", "a-queue"]


async def test_several_queues_and_servers_compose_and_are_picked_by_name(
    url: str, own: Any, client: redis.Redis
) -> None:
    before = connections(client)
    inner = emq_lifespan(own.url(), "reports")
    app = FastAPI(lifespan=emq_lifespan(url, "emails", "sms", lifespan=inner))

    @app.post("/{name}")
    async def put(name: str, request: Request) -> dict[str, str]:
        queue = queue_dependency(name)(request)
        return {"id": await queue.enqueue("x", name)}

    @app.get("/sms")
    async def sms_only(q: Sms) -> str:
        return q.name

    @app.get("/only")
    async def only(q: TheQueue) -> None:
        return None

    async with served(app) as http:
        assert sorted(getattr(app.state, STATE)) == ["emails", "reports", "sms"]
        ids = {n: (await http.post(f"/{n}")).json()["id"] for n in ("emails", "sms", "reports")}
        assert (await http.get("/sms")).json() == "sms"
        with pytest.raises(InvalidOption, match="3 emq queues are open"):
            await http.get("/only")
        with pytest.raises(InvalidOption, match="'fax' is not open"):
            await http.post("/fax")
    with Queue.from_url(url, "sms") as sms, Queue.from_url(own.url(), "reports") as reports:
        assert sms.job(ids["sms"]) is not None and reports.job(ids["reports"]) is not None
        assert sms.job(ids["reports"]) is None  # each queue on its own server
        sms.obliterate(force=True)
    with Queue.from_url(url, "emails") as emails:
        emails.obliterate(force=True)
    assert connections(client) <= before


async def test_a_plain_starlette_app_reads_its_queue(url: str, qname: str) -> None:
    async def count(request: Request) -> JSONResponse:
        return JSONResponse((await get_queue(request).counts())["pending"])

    app = Starlette(routes=[Route("/", count)], lifespan=emq_lifespan(url, qname))
    async with served(app) as http:
        assert (await http.get("/")).json() == 0


async def test_bad_input_is_refused_before_the_app_starts(url: str) -> None:
    with pytest.raises(InvalidOption, match="at least one queue"):
        emq_lifespan(url)
    with pytest.raises(InvalidOption, match="twice"):
        emq_lifespan(url, "a", "a")
    with pytest.raises(InvalidName):
        emq_lifespan(url, "no spaces")
    with pytest.raises(InvalidUrl):
        emq_lifespan("http://nowhere", "a")
    with pytest.raises(InvalidName):
        queue_dependency("")
    app = FastAPI(lifespan=emq_lifespan(url, "a", lifespan=emq_lifespan(url, "a")))
    with pytest.raises(InvalidOption, match="already open"):
        async with served(app):
            pass


async def test_a_route_without_the_lifespan_is_told_what_is_missing() -> None:
    app = FastAPI()

    @app.get("/")
    async def index(q: TheQueue) -> None:
        return None

    async with served(app) as http:
        with pytest.raises(InvalidOption, match="lifespan=emq_lifespan"):
            await http.get("/")
