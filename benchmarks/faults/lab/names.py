"""The scenarios' names, in the order a run takes them, and the cells of a run (no imports:
run.py reads them before it has re-executed itself inside benchmarks/.venv).

A **cell** is one system under one scenario and one server setting; a run takes every cell
``--repeat`` times, each time with its own seed (:func:`seed_of`)."""

SCENARIOS = ["worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
             "oom", "cron", "fan-in"]  # fmt: skip
DURABLE = {"server-kill", "power-loss"}  # the server runs with its AOF on
FSYNCS = ["everysec", "always"]  # a durable scenario runs under each, the same for every system
NONE = "-"  # the server setting of a scenario without persistence

Cell = tuple[str, str, str, int]  # (system, scenario, appendfsync or NONE, run)


def fsyncs(scenario: str, only: list[str] | None = None) -> list[str]:
    """The server settings ``scenario`` runs under (``only``: a subset of FSYNCS)."""
    if scenario not in DURABLE:
        return [NONE]
    return [f for f in FSYNCS if not only or f in only]


def seed_of(seed: int, run: int) -> int:
    """The seed of a cell's run ``run`` (0-based) in a run started with ``--seed seed``: the
    first run keeps ``seed`` itself, so a run of ``--repeat 1`` draws as before."""
    return seed + 1000 * run


def cells(systems: list[str], scenarios: list[str], repeat: int,
          only_fsyncs: list[str] | None = None) -> list[Cell]:  # fmt: skip
    """Every (system, scenario, setting, run) of a run, system by system, in scenario order."""
    return [(sy, sc, f, r) for sy in systems for sc in scenarios
            for f in fsyncs(sc, only_fsyncs) for r in range(repeat)]  # fmt: skip
