"""The durable floor of the event stream: archive before trim, object storage, job history.

- :class:`Archive` folds the stream into a :class:`Floor` and only then trims it with
  ``XTRIM MINID`` at the watermark W (``archiver.py`` documents the cycle).
- :class:`Floor` is the SQLite archive of one queue (``floor.py`` documents the schema).
- :func:`ship` / :func:`restore` move closed segments to and from a :class:`LocalDir` or an
  :class:`S3Bucket`, create-only and compressed, with a manifest each (``storage.py``).
- :func:`history` / :func:`ahistory` merge the floor and the live tail of one job.
"""

from typing import Any

from .archiver import (
    PAUSE_POINTS,
    Archive,
    ArchiveConflict,
    CycleResult,
    Totals,
)
from .floor import SCHEMA_VERSION, Floor, FloorError, Segment, default_path
from .storage import (
    LocalDir,
    RestoreError,
    RestoreResult,
    S3Bucket,
    ShipConflict,
    ShipResult,
    Target,
    open_target,
    restore,
    ship,
)

__all__ = [
    "PAUSE_POINTS",
    "SCHEMA_VERSION",
    "Archive",
    "ArchiveConflict",
    "CycleResult",
    "Floor",
    "FloorError",
    "LocalDir",
    "RestoreError",
    "RestoreResult",
    "S3Bucket",
    "Segment",
    "ShipConflict",
    "ShipResult",
    "Target",
    "Totals",
    "ahistory",
    "default_path",
    "history",
    "merge",
    "open_target",
    "restore",
    "ship",
]


def __getattr__(name: str) -> Any:
    # history reads the floor and the live stream through a queue's client: imported on
    # first use, so the floor does not pull the queue shells in
    if name in ("history", "ahistory", "merge"):
        from ..queue._async import history as async_history
        from ..queue._sync import history as sync_history

        return getattr(sync_history if name == "history" else async_history, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
