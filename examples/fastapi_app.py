"""An example FastAPI app: a POST enqueues an email job, a GET reads the job's state.

    EMQ_URL=redis://127.0.0.1:6379/0 uvicorn examples.fastapi_app:app
    EMQ_URL=redis://127.0.0.1:6379/0 emq worker examples.fastapi_app:worker

The queue is opened when the app starts and closed when it stops (emq.contrib.asgi); each
request reaches it with ``Depends(get_queue)``. tests/contrib/test_asgi.py drives this app
with FastAPI's TestClient against a real server. See docs/asgi.md.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel

from emq import AsyncQueue, InvalidId, Permanent, QueueOptions, Worker
from emq.contrib.asgi import emq_lifespan, get_queue

URL = os.environ.get("EMQ_URL", "redis://127.0.0.1:6379/0")
QUEUE = "emails"
OPTIONS = QueueOptions(keep_completed=(3_600_000, 10_000))  # GET shows "completed" for an hour

app = FastAPI(lifespan=emq_lifespan(URL, QUEUE, options=OPTIONS))
worker = Worker(QUEUE, url=URL, queue_options=OPTIONS)
Emails = Annotated[AsyncQueue, Depends(get_queue)]  # the queue, handed to each request


class Email(BaseModel):
    to: str
    subject: str


@app.post("/emails", status_code=202)
async def send(email: Email, queue: Emails) -> dict[str, str]:
    """Enqueue the email; the job's id is where to look for its state."""
    job = await queue.enqueue("send_email", email.model_dump())
    return {"id": job}


@app.get("/jobs/{job_id}")
async def job_state(job_id: str, queue: Emails) -> dict[str, Any]:
    try:
        job = await queue.job(job_id)
    except InvalidId:
        raise HTTPException(400, "not a job id") from None
    if job is None:
        raise HTTPException(404, "no such job")
    return {"id": job.id, "state": job.state, "attempts": job.attempts, "error": job.last_error}


@worker.handler("send_email", max_attempts=3)
async def send_email(payload: dict[str, str]) -> None:
    """A real one would call an SMTP or HTTP API (idempotently: emq delivers at least once)."""
    if "@" not in payload["to"]:
        raise Permanent(f"not an address: {payload['to']!r}")
