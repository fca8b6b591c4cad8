"""Counting an episode from the ledger and the system's own view (``agent.py inspect``).

Definitions (docs/reliability.md, How counting works), for the jobs whose enqueue the system
acknowledged:

- **lost**: never finished, and not accounted for by the system's waiting or in-flight
  counts at the end (``unfinished - waiting - inflight``, never below 0); where the system
  shows neither count, every unfinished job is counted lost;
- **stuck**: still in flight at the end, after the healthy workers ran for the system's
  ``RECOVERY_S`` plus a margin without finishing it;
- **left waiting**: still waiting at the end (a backlog the workers did not reach in time);
- **ran twice**: the handler's body ran to its end more than once (``finished`` > 1); of
  those, **after the fault** when one of its runs ended in a worker the fault hit (killed,
  frozen or cut off: the episode's ``faulted`` agents), which is what at-least-once delivery
  allows; the rest (``ran_twice_unexplained``) ran twice with no fault on their workers;
- **stale accepted**: completions the system accepted from a worker whose lease had lapsed
  (only where the system fences completions and shows them: the adapter's ``stale``).
"""

from __future__ import annotations

from typing import Any


def _after_fault(twice: list[str], ran_in: dict[str, set[str]], faulted: set[str]) -> int:
    """How many of ``twice`` had a run end in a worker the fault hit."""
    return sum(1 for j in twice if ran_in.get(j, set()) & faulted)


def jobs(ledger: Any, inspect: dict[str, Any], faulted: set[str] = frozenset()) -> dict[str, Any]:
    acked = ledger.members("acked")
    refused = ledger.members("refused")
    finished = ledger.counts("finished")
    started = ledger.counts("started")
    unfinished = sorted((j for j in acked if finished.get(j, 0) == 0), key=int)
    inflight, waiting = inspect.get("inflight"), inspect.get("waiting")
    known = (inflight or 0) + (waiting or 0)
    stuck = min(len(unfinished), inflight or 0)
    left = min(len(unfinished) - stuck, waiting or 0)
    lost = max(0, len(unfinished) - known)
    twice = sorted((j for j, n in finished.items() if n > 1), key=int)
    ran_in = ledger.agents("runs")
    after_fault = _after_fault(twice, ran_in, set(faulted))
    stale = inspect.get("stale")
    return {
        "acked": len(acked),
        "refused": len(refused),
        "finished": sum(1 for j in acked if finished.get(j, 0) > 0),
        "started_not_acked": len(set(started) - acked),
        "lost": lost,
        "stuck": stuck,
        "left_waiting": left,
        "ran_twice": len(twice),
        "ran_twice_after_fault": after_fault,
        "ran_twice_unexplained": len(twice) - after_fault,
        "stale_accepted": None if stale is None else stale.get("accepted"),
        "stale_refused": None if stale is None else stale.get("refused"),
        "inflight_end": inflight,
        "waiting_end": waiting,
        "unfinished_ids": unfinished[:20],
        "twice_ids": twice[:20],
        "twice_agents": {j: sorted(ran_in.get(j, ())) for j in twice[:20]},
    }


def cron(ledger: Any, every_s: float) -> dict[str, Any]:
    ticks = ledger.counts("ticks")
    twice = sorted(k for k, n in ticks.items() if n > 1)
    missed = None
    seconds = [int(k) for k in ticks if k.lstrip("-").isdigit()]
    if seconds and len(seconds) == len(ticks) and every_s >= 1:
        step = int(every_s)
        want = set(range(min(seconds), max(seconds) + 1, step))
        missed = len(want - set(seconds))
    return {"ticks": len(ticks), "ran_twice": len(twice), "missed": missed,
            "twice_ids": twice[:20]}  # fmt: skip


def fanin(ledger: Any, first: int, count: int, width: int,
          faulted: set[str] = frozenset()) -> dict[str, Any]:  # fmt: skip
    finished = ledger.counts("finished")
    calls = ledger.counts("callbacks")
    groups = range(first, first + count)
    done = [g for g in groups if all(finished.get(str(g * 1000 + i), 0) > 0 for i in range(width))]
    never = [g for g in done if calls.get(str(g), 0) == 0]
    twice = [g for g in groups if calls.get(str(g), 0) > 1]
    after_fault = _after_fault([str(g) for g in twice], ledger.agents("callback_runs"),
                               set(faulted))  # fmt: skip
    children = count * width
    finished_children = sum(1 for g in groups for i in range(width)
                            if finished.get(str(g * 1000 + i), 0) > 0)  # fmt: skip
    return {
        "groups": count,
        "groups_done": len(done),
        "callbacks": sum(1 for g in groups if calls.get(str(g), 0) > 0),
        "callback_missed": len(never),
        "callback_twice": len(twice),
        "callback_twice_after_fault": after_fault,
        "callback_twice_unexplained": len(twice) - after_fault,
        "children_unfinished": children - finished_children,
        "missed_ids": never[:20],
        "twice_ids": twice[:20],
    }


def losses(row: dict[str, Any]) -> int:
    """What no at-least-once system may show: a job lost or stuck, a stale completion
    accepted, a fan-in's callback that never ran, or a child of a fan-in that never ran."""
    keys = ("lost", "stuck", "stale_accepted", "callback_missed", "children_unfinished")
    return sum(int(row.get(k) or 0) for k in keys)


def duplicates(row: dict[str, Any]) -> int:
    """Work done twice with no fault on its workers to explain it: a job's body or a fan-in's
    callback none of whose runs was on a worker the fault hit, a cron tick run twice."""
    jobs = row.get("ran_twice_unexplained", row.get("ran_twice"))
    calls = row.get("callback_twice_unexplained", row.get("callback_twice"))
    return int(jobs or 0) + int(calls or 0)


def reruns(row: dict[str, Any]) -> int:
    """Work done twice where one run was on a worker the fault hit: what at least once allows."""
    keys = ("ran_twice_after_fault", "callback_twice_after_fault")
    return sum(int(row.get(k) or 0) for k in keys)
