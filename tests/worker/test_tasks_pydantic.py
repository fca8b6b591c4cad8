"""A task's argument annotated with a pydantic model (docs/tasks.md, Parameters): validated at
enqueue, stored as its JSON object, rebuilt into the model on the worker."""

from __future__ import annotations

import pytest

from emq import InvalidArguments, Queue, Tasks, Worker, WorkerOptions

pydantic = pytest.importorskip("pydantic")


class Order(pydantic.BaseModel):  # type: ignore[name-defined,misc]
    sku: str
    qty: int = 1


def test_a_pydantic_argument_is_checked_stored_and_rebuilt(
    url: str, qname: str, queue: Queue
) -> None:
    tasks = Tasks(qname, url=url)
    seen: list[Order] = []

    @tasks.task()
    def ship(order: Order) -> None:
        seen.append(order)

    with pytest.raises(InvalidArguments, match="argument 'order' cannot be read as Order"):
        ship.enqueue({"qty": "many"})  # type: ignore[arg-type]
    assert queue.counts()["pending"] == 0
    job_id = ship.enqueue(Order(sku="A1", qty=2))
    assert queue.job(job_id).payload == {"order": {"sku": "A1", "qty": 2}}
    queue.enqueue("ship", {"order": {"sku": "B2"}})
    Worker(qname, url=url, tasks=tasks, options=WorkerOptions(burst=True)).run_sync(
        handle_signals=False
    )
    assert sorted((o.sku, o.qty) for o in seen) == [("A1", 2), ("B2", 1)]
    assert all(isinstance(o, Order) for o in seen)
    tasks.close()
