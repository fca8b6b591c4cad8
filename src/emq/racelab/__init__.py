"""The race lab: atomic vs naive stalled recovery, run command by command on a real server.

emq recovers an expired lease with one script (``sweep_stalled.lua``): detect, move and count
are one indivisible step. The lab sets that beside the cautionary form, the same recovery as
separate round trips (:func:`~emq.racelab.forms.naive_sweep`, used nowhere else), and shows
on real keys what happens between the round trips:

- :mod:`~emq.racelab.scenarios`: the seed's four pictures, ``two-sweeps``, ``counter``,
  ``worked-example`` and ``claim-between``, with readouts measured from the server's replies;
- :mod:`~emq.racelab.explorer`: every interleaving of two sweeps (and a claiming worker), each
  run on its own queue; the atomic form's table is all zeros;
- :mod:`~emq.racelab.stress`: real processes racing a form with no forced schedule.

The lab lives outside the library core and uses its public keyspace and script calls.
"""

from .explorer import Tally, explore, explore_one
from .forms import MODES, Mode, atomic_sweep, naive_sweep
from .interleaver import RunResult, RunSpec, StepRecord, lab_run
from .scenarios import SCENARIOS, Outcome, run_scenario
from .schedule import ActorSpec, Schedule, ScheduleError
from .stress import StressResult, stress
from .wire import Command, execute, execute_many

__all__ = [
    "MODES",
    "SCENARIOS",
    "ActorSpec",
    "Command",
    "Mode",
    "Outcome",
    "RunResult",
    "RunSpec",
    "Schedule",
    "ScheduleError",
    "StepRecord",
    "StressResult",
    "Tally",
    "atomic_sweep",
    "execute",
    "execute_many",
    "explore",
    "explore_one",
    "lab_run",
    "naive_sweep",
    "run_scenario",
    "stress",
]
