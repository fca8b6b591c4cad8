"""The logging of an ``emq worker`` process: its two formats, or the user's own set-up.

``emq worker`` owns its process, so it configures logging for every logger, as Celery, rq and
dramatiq do: one handler on the root logger, on stderr, in JSON lines (:class:`JsonFormatter`)
or text (:class:`TextFormatter`, with the pid, so the children of ``--processes`` can be told
apart), at ``--log-level``. A handler's ``logging.getLogger("myapp").info(...)`` comes out in
the same stream, with the job it ran for (:class:`~emq.worker.log.JobFields`). With
``--log-config FILE`` (a :func:`logging.config.dictConfig` dictionary, JSON or TOML) the user's
set-up is applied instead and emq installs no handler of its own. A :class:`~emq.Worker` run
inside a user's own program configures nothing: that program's logging is its own.
"""

from __future__ import annotations

import json
import logging
import logging.config
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from ..errors import InvalidOption
from ..worker.log import JobFields

JOB_FIELDS = (("job", "job_id"), ("job_name", "job_name"), ("queue", "job_queue"),
              ("attempt", "job_attempt"))  # fmt: skip
"""A handler's record's job, as it is shown: (the name in a log line, the record attribute)."""


def _job(record: logging.LogRecord) -> dict[str, Any]:
    """The job a handler's record was emitted for (set by :class:`JobFields`), or nothing."""
    if not getattr(record, "job_id", ""):
        return {}
    return {shown: getattr(record, attr) for shown, attr in JOB_FIELDS}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, msg, pid, then the job a handler's record
    is about (job, job_name, queue, attempt) or the ``emq`` fields of emq's own records."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "pid": record.process,
        }
        out.update(_job(record))
        out.update(getattr(record, "emq", {}))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """``time pid level event: msg key=value ...`` (``event``: the logger's name for a record
    that is not one of emq's own events)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _job(record) | dict(getattr(record, "emq", {}))
        event = fields.pop("event", record.name)
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        pairs = " ".join(f"{k}={v}" for k, v in fields.items())
        level = record.levelname.lower()
        line = f"{stamp} {record.process} {level:7} {event}: {record.getMessage()} {pairs}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line.rstrip()


def setup_logging(fmt: str, level: str) -> None:
    """emq's own set-up: one stderr handler on the root logger, for every logger."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(JobFields())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    emq = logging.getLogger("emq")  # its records reach the root's handler, at the same level
    emq.handlers[:] = []
    emq.setLevel(logging.NOTSET)
    emq.propagate = True
    logging.captureWarnings(True)  # warnings.warn in a handler: a record, not a bare line


def read_log_config(path: str) -> dict[str, Any]:
    """The ``dictConfig`` dictionary in ``path``: TOML for a ``.toml`` file, else JSON."""
    where = f"--log-config {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidOption(f"{where}: cannot read it: {exc}") from None
    try:
        if path.endswith(".toml"):
            data: Any = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "TOML" if path.endswith(".toml") else "JSON (name a TOML file *.toml)"
        raise InvalidOption(f"{where}: not valid {kind}: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != 1:
        raise InvalidOption(f"{where}: expected a logging.config.dictConfig table with version = 1")
    return data


def apply_log_config(path: str) -> None:
    """The user's set-up from ``path`` (:func:`read_log_config`), applied as is."""
    data = read_log_config(path)
    try:
        logging.config.dictConfig(data)
    except (ValueError, TypeError, AttributeError, ImportError) as exc:
        cause = f"{exc}: {exc.__cause__}" if exc.__cause__ else str(exc)
        raise InvalidOption(f"--log-config {path}: logging refused it: {cause}") from None
