"""``emq demo``: the stalled-recovery story on a real server, in a few seconds.

Enqueue jobs, lease some, let leases lapse (on the server clock), sweep, and show that every
expired lease was recovered exactly once, that a stale worker's late completion is refused,
and that a job which stalls twice is dead-lettered. Exits non-zero if any job is lost.
"""

from __future__ import annotations

import sys
import time
from typing import cast

import click
from rich.table import Table

from ..errors import LeaseLost
from ..queue import Queue
from .common import console, handle_errors, resolve_url, url_option

LEASE_MS = 400


def _counts_table(title: str, rows: list[tuple[str, dict[str, int]]]) -> Table:
    cols = ["pending", "active", "schedule", "dead", "completed", "recovered"]
    table = Table(title=title)
    table.add_column("moment")
    for c in cols:
        table.add_column(c, justify="right")
    for label, counts in rows:
        table.add_row(label, *(str(counts[c]) for c in cols))
    return table


def _lapse(q: Queue) -> None:
    """Wait until every current lease has passed its deadline on the server clock."""
    leases = cast(
        list[tuple[str, float]], q.client.zrange(q.core.keys.active, 0, -1, withscores=True)
    )
    deadline = max((score for _, score in leases), default=0.0)
    while True:
        sec, usec = q.client.time()
        if sec * 1000 + usec // 1000 > deadline:
            return
        time.sleep(0.05)


def run_demo(url: str, name: str = "demo", jobs: int = 100) -> bool:
    """Run the story; returns True when nothing was lost."""
    q = Queue.from_url(url, name)
    q.obliterate(force=True)
    rows: list[tuple[str, dict[str, int]]] = []
    console.rule("[bold]emq demo[/bold]: stalled recovery, one script per step")
    console.print(f"server {url}, queue [bold]{name}[/bold]")
    q.enqueue_many([("resize", {"image": i}) for i in range(jobs)])
    rows.append(("enqueued", q.counts()))

    first = q.claim(count=30, lease_ms=LEASE_MS)
    console.print(f"worker A leased {len(first)} jobs for {LEASE_MS} ms, then stopped answering")
    for job in first[:10]:
        q.complete(job.id, job.token)
    console.print("worker A completed 10 of them before it stalled")
    rows.append(("A leased 30, done 10", q.counts()))

    _lapse(q)
    console.print("the other 20 leases lapsed (deadline <= now, server clock)")
    sweeps = [q.sweep_stalled(max_stalled=2, limit=100) for _ in range(2)]
    recovered = [i for s in sweeps for i in s.recovered]
    console.print(
        f"two sweeps ran back to back: the first recovered {len(sweeps[0].recovered)}, "
        f"the second {len(sweeps[1].recovered)} (the jobs were already gone from active)"
    )
    rows.append(("after sweep 1", q.counts()))

    late = first[10]
    try:
        q.complete(late.id, late.token)
        refused = False
    except LeaseLost:
        refused = True
    console.print(
        f"worker A woke up and tried to complete {late.id}: "
        + ("[green]refused (LeaseLost)[/green]" if refused else "[red]accepted[/red]")
    )

    poison = q.claim(count=20, lease_ms=LEASE_MS)
    stalled_ids = {j.id for j in poison if j.stalled == 1}
    console.print(
        f"worker B leased {len(poison)} jobs; {len(stalled_ids)} had stalled once "
        "already, and B stalls too"
    )
    _lapse(q)
    second = q.sweep_all(max_stalled=2)
    console.print(
        f"sweep 2: {len(second.recovered)} recovered, {len(second.dead)} dead-lettered "
        "(stalled twice = max_stalled)"
    )
    rows.append(("after sweep 2", q.counts()))

    rest = q.claim(count=1000, lease_ms=30_000)
    q.complete_many([(j.id, j.token) for j in rest])
    final = q.counts()
    rows.append(("worker C finished the rest", final))
    console.print(_counts_table("counts per location", rows))

    dead_jobs = q.jobs("dead", 0, 1000)
    checks = {
        "each expired lease recovered exactly once": sorted(recovered)
        == sorted({j.id for j in first[10:]}),
        "the stale completion was refused": refused,
        "jobs stalled twice are dead with last_error=stalled": {j.id for j in dead_jobs}
        == stalled_ids
        and all(j.last_error == "stalled" and j.stalled == 2 for j in dead_jobs),
        "nothing lost: completed + dead == enqueued": final["completed"] + final["dead"] == jobs
        and final["pending"] + final["active"] + final["schedule"] == 0,
    }
    for label, ok in checks.items():
        console.print(("[green]ok  [/green] " if ok else "[red]FAIL[/red] ") + label)
    q.close()
    return all(checks.values())


@click.command()
@url_option
@handle_errors
def demo(url: str | None) -> None:
    """Show stalled recovery end to end on the embedded server (or --url)."""
    ok = run_demo(resolve_url(url))
    sys.exit(0 if ok else 1)


def register(group: click.Group) -> None:
    group.add_command(demo)
