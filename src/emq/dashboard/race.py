"""The race lab page: ``emq race`` on the dashboard's server, drawn in the browser.

- ``GET /race?run=ID``: the form (``form#race``: scenario, mode) and, for a run, its trace
  (``#race-trace``: one table per scenario and form, a column per actor, one row per command
  with the server's reply, the queue's key prefix left out and the job's id shown as J, as
  ``emq race`` draws it) and its readouts (``#race-readout``).
- ``POST /race/run`` (CSRF-checked, refused when read-only): runs the scenario(s) with
  :func:`emq.racelab.scenarios.run_scenario` in a thread on a client of its own, one run at a
  time, bounded by :data:`RUN_TIMEOUT_S`; then 303 to ``/race?run=ID``.

The lab writes only keys of its own fresh ``race-*`` queues. The last :data:`KEPT` runs are
remembered in this process.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from typing import Any

import redis
from starlette.requests import Request
from starlette.responses import Response

from ..errors import EmqError
from ..racelab.forms import MODES
from ..racelab.scenarios import SCENARIOS, Outcome, modes, run_scenario
from ..server.clients import close_client, sync_client
from .web import action_form, dash, done, render

RUN_TIMEOUT_S = 60.0
KEPT = 16
CHOICES = ("all", *SCENARIOS)
MODE_CHOICES = ("both", *MODES)


@dataclass(frozen=True, slots=True)
class Trace:
    """One scenario in one form, ready to draw: ``rows`` hold one cell per column."""

    scenario: str
    summary: str
    mode: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str
    readout: str
    numbers: dict[str, Any]


def trace(outcome: Outcome) -> Trace:
    """An outcome as ``emq race`` pictures it (sweep A | sweep B | workers)."""
    r = outcome.result
    prefix = f"emq:{{{r.queue}}}:"
    workers = list(dict.fromkeys(s.actor for s in r.steps if s.actor.startswith("W")))
    actors = sorted({s.actor for s in r.steps} - set(workers)) + (["W"] if workers else [])
    rows = []
    for step in r.steps:
        column = "W" if step.actor in workers else step.actor
        who = f"{step.actor} " if column == "W" and len(workers) > 1 else ""
        reply = json.dumps(step.reply, separators=(",", ":"))
        text = f"{who}{step.step}: {step.command.replace(prefix, '')} -> {reply}"
        text = text.replace(r.job, "J")
        rows.append(tuple(text if c == column else "" for c in actors))
    titles = tuple(f"sweep {c}" if c != "W" else "worker(s)" for c in actors)
    d = outcome.as_dict()
    keys = ("recover_count", "stalled", "expected_stalled", "lost_increments", "double_delivered")
    return Trace(
        scenario=outcome.scenario,
        summary=SCENARIOS[outcome.scenario].summary,
        mode=r.mode,
        columns=titles,
        rows=tuple(rows),
        caption=f"keys shown without the prefix {prefix} · J = {r.job}",
        readout=outcome.readout,
        numbers={k: d[k] for k in keys},
    )


def run_lab(url: str, scenario: str, mode: str) -> list[Trace]:
    """Run ``scenario`` (or ``all``) in ``mode`` (or ``both``) on the server at ``url``."""
    client = sync_client(url, decode_responses=True, socket_connect_timeout=5, socket_timeout=30)
    try:
        names = list(SCENARIOS) if scenario == "all" else [scenario]
        return [trace(run_scenario(client, n, m)) for n in names for m in modes(mode)]
    finally:
        close_client(client)


def _runs(request: Request) -> dict[str, list[Trace]]:
    runs: dict[str, list[Trace]] | None = getattr(request.app.state, "race_runs", None)
    if runs is None:
        runs = request.app.state.race_runs = {}
    return runs


async def race_page(request: Request) -> Response:
    run_id = request.query_params.get("run", "")
    context = {
        "scenarios": [(n, SCENARIOS[n].summary) for n in SCENARIOS],
        "mode_choices": MODE_CHOICES,
        "chosen": request.query_params.get("scenario", "two-sweeps"),
        "mode": request.query_params.get("mode", "both"),
        "traces": _runs(request).get(run_id),
    }
    return render(request, "race.html", context)


async def race_run(request: Request) -> Response:
    form = await action_form(request)
    scenario, mode = form.get("scenario", ""), form.get("mode", "both")
    if scenario not in CHOICES or mode not in MODE_CHOICES:
        return done(request, "/race", "race lab: choose a scenario and a mode from the lists")
    state = request.app.state
    if getattr(state, "race_busy", False):
        return done(request, "/race", "race lab: a run is going on; try again in a moment")
    state.race_busy = True
    try:
        traces = await asyncio.wait_for(
            asyncio.to_thread(run_lab, dash(request).url, scenario, mode), RUN_TIMEOUT_S
        )
    except TimeoutError:
        return done(request, "/race", f"race lab: no answer within {RUN_TIMEOUT_S:.0f} s")
    except (EmqError, redis.RedisError, OSError) as exc:
        return done(request, "/race", f"race lab failed: {exc}")
    finally:
        state.race_busy = False
    runs = _runs(request)
    while len(runs) >= KEPT:
        del runs[next(iter(runs))]
    run_id = secrets.token_urlsafe(9)
    runs[run_id] = traces
    back = f"/race?run={run_id}&scenario={scenario}&mode={mode}"
    return done(request, back, f"ran {scenario} in {mode} form(s): {len(traces)} run(s)")
