"""The scenarios' names, in the order a run takes them (no imports: run.py reads them before
it has re-executed itself inside benchmarks/.venv)."""

SCENARIOS = ["worker-sigkill", "worker-sigstop", "server-kill", "power-loss", "partition",
             "oom", "cron", "fan-in"]  # fmt: skip
DURABLE = {"server-kill", "power-loss"}  # the server runs with its AOF on
