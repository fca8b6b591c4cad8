"""Object storage for closed floor segments: a local directory or an S3-compatible bucket.

Layout under the target (``<q>`` is the queue name, ``<n>`` the segment number, 12 digits)::

    <q>/segments/<n>.jsonl.gz   the segment's rows, one JSON object a line, gzip (mtime 0)
    <q>/manifests/<n>.json      {format, queue, segment, first_id, last_id, events, sha256,
                                 bytes, encoding, floor_id}

Guarantees:

- **Create-only.** No object is ever overwritten. A local directory writes a temporary file
  and links it into place with ``os.link``, which fails if the name exists. S3 sends
  ``PutObject`` with ``If-None-Match: *`` (the server refuses an existing key: S3, R2, MinIO
  and Tigris honour it), after a ``HEAD`` check, so a server that ignores the condition still
  only ever sees a put for a key that was absent a moment before; with one shipper per floor
  (the archiver lease) nobody else writes those keys.
- **Deterministic bodies.** A segment's rows never change once it is closed and gzip runs with
  ``mtime=0``, so a retried ship produces the same bytes; an existing object with the same
  bytes counts as shipped (a crash between body and manifest is repaired by the next ship),
  and one with other bytes raises :class:`ShipConflict`.
- **A segment is shipped once its manifest exists**; the body is written first. Restore reads
  manifests 1, 2, ... and checks each body's sha256, row count and id range.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from ..errors import EmqError
from ..model.events import Event, parse_id
from .floor import Floor, FloorError, Segment

FORMAT = "emq.floor-segment/1"


class ShipConflict(EmqError):
    """An object already exists under a segment's name with different bytes."""


class RestoreError(EmqError):
    """The stored segments cannot be restored (missing, corrupt, or out of order)."""


class Target(Protocol):
    """Where segments go. ``put_new`` never overwrites: True if it created the object, False if
    an identical one was already there; :class:`ShipConflict` if a different one was."""

    def put_new(self, key: str, data: bytes) -> bool: ...

    def get(self, key: str) -> bytes: ...

    def list(self, prefix: str) -> list[str]: ...


class LocalDir:
    """A directory as a target (e.g. a mounted volume or a synced folder)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def put_new(self, key: str, data: bytes) -> bool:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return _same(key, path.read_bytes(), data)
        finally:
            os.unlink(tmp)
        return True

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def list(self, prefix: str) -> list[str]:
        base = self.root / prefix
        if not base.is_dir():
            return []
        return sorted(f"{prefix}{p.name}" for p in base.iterdir() if not p.name.startswith("."))

    def __repr__(self) -> str:
        return f"LocalDir({str(self.root)!r})"


class S3Bucket:
    """An S3-compatible bucket (boto3, ``pip install 'emq[s3]'``) under a key prefix."""

    def __init__(self, bucket: str, prefix: str = "", *, client: Any = None, **kwargs: Any):
        if client is None:
            try:
                import boto3
            except ImportError:
                raise EmqError("S3 targets need boto3: pip install 'emq[s3]'") from None
            client = boto3.client("s3", **kwargs)
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""

    def _error_code(self, exc: Exception) -> str:
        response = getattr(exc, "response", None) or {}
        return str(response.get("Error", {}).get("Code", ""))

    def put_new(self, key: str, data: bytes) -> bool:
        full = self.prefix + key
        try:
            self.client.head_object(Bucket=self.bucket, Key=full)
        except Exception as exc:
            if self._error_code(exc) not in ("404", "NoSuchKey", "NotFound"):
                raise
        else:
            return _same(key, self.get(key), data)
        try:
            self.client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
        except Exception as exc:
            if self._error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return _same(key, self.get(key), data)
            raise
        return True

    def get(self, key: str) -> bytes:
        body = self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"]
        return bytes(body.read())

    def list(self, prefix: str) -> list[str]:
        out: list[str] = []
        pages = self.client.get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            out += [o["Key"][len(self.prefix) :] for o in page.get("Contents", [])]
        return sorted(out)

    def __repr__(self) -> str:
        return f"S3Bucket({self.bucket!r}, {self.prefix!r})"


def _same(key: str, existing: bytes, data: bytes) -> bool:
    if existing != data:
        raise ShipConflict(f"{key} already exists with different contents; not overwriting it")
    return False


def open_target(spec: str, *, endpoint_url: str | None = None) -> Target:
    """``s3://bucket/prefix`` (credentials and region from boto3's usual sources; an
    ``endpoint_url`` for MinIO, R2, Tigris, ...), else a directory path (``file://`` ok)."""
    parsed = urlparse(spec)
    if parsed.scheme == "s3":
        kwargs = {"endpoint_url": endpoint_url} if endpoint_url else {}
        return S3Bucket(parsed.netloc, parsed.path, **kwargs)
    if parsed.scheme == "file":
        return LocalDir(parsed.path)
    if parsed.scheme and len(parsed.scheme) > 1:
        raise EmqError(f"unknown archive target {spec!r}: use s3://bucket/prefix or a directory")
    return LocalDir(spec)


def encode_segment(events: list[Event]) -> bytes:
    lines = "".join(json.dumps(e.to_dict(), separators=(",", ":")) + "\n" for e in events)
    return gzip.compress(lines.encode("utf-8"), mtime=0)


def decode_segment(data: bytes) -> list[Event]:
    out = []
    for line in gzip.decompress(data).decode("utf-8").splitlines():
        d = json.loads(line)
        out.append(Event(d["id"], d["event"], d["job"], d["fields"]))
    return out


def _names(queue: str, no: int) -> tuple[str, str]:
    return f"{queue}/segments/{no:012d}.jsonl.gz", f"{queue}/manifests/{no:012d}.json"


@dataclass(frozen=True, slots=True)
class ShipResult:
    closed: int
    shipped: int
    events: int


def ship(
    floor: Floor, target: Target, *, segment_size: int = 10_000, flush: bool = False
) -> ShipResult:
    """Close full segments (all of W's prefix with ``flush``) and ship every unshipped one in
    order: body, then manifest, both create-only; then record it in the floor."""
    closed = floor.close_segments(segment_size, flush=flush)
    shipped = events = 0
    for seg in floor.segments():
        if seg.shipped_ms is not None:
            continue
        rows = floor.segment_events(seg)
        if len(rows) != seg.events:
            raise FloorError(f"segment {seg.no} has {len(rows)} rows, expected {seg.events}")
        body = encode_segment(rows)
        digest = hashlib.sha256(body).hexdigest()
        body_key, manifest_key = _names(floor.queue, seg.no)
        target.put_new(body_key, body)
        manifest = {
            "format": FORMAT,
            "queue": floor.queue,
            "segment": seg.no,
            "first_id": seg.first,
            "last_id": seg.last,
            "events": seg.events,
            "sha256": digest,
            "bytes": len(body),
            "encoding": "jsonl+gzip",
            "floor_id": floor.floor_id,
        }
        target.put_new(manifest_key, json.dumps(manifest, indent=1, sort_keys=True).encode())
        floor.mark_shipped(seg.no, digest, len(body))
        shipped += 1
        events += seg.events
    return ShipResult(len(closed), shipped, events)


@dataclass(frozen=True, slots=True)
class RestoreResult:
    segments: int
    events: int
    watermark: str | None


def restore(target: Target, floor: Floor) -> RestoreResult:
    """Rebuild ``floor`` (which must be empty) from every shipped segment of its queue, in
    order, verifying each; W becomes the last restored id. Events folded into the old floor
    after its last shipped segment are not in the target: the next archive cycle reports
    them as a ``gap`` if the stream no longer holds them."""
    if floor.count() or floor.segments() or floor.watermark():
        raise FloorError(f"{floor.path} is not empty; restore only into a new floor")
    manifests = target.list(f"{floor.queue}/manifests/")
    events = 0
    last: str | None = None
    for expected, key in enumerate(manifests, start=1):
        m = json.loads(target.get(key))
        if m.get("format") != FORMAT or m.get("queue") != floor.queue:
            raise RestoreError(f"{key} is not a segment manifest of queue {floor.queue!r}")
        if m["segment"] != expected:
            raise RestoreError(f"segment {expected} is missing (found {m['segment']} at {key})")
        body = target.get(_names(floor.queue, expected)[0])
        if hashlib.sha256(body).hexdigest() != m["sha256"]:
            raise RestoreError(f"segment {expected}: body does not match its manifest's sha256")
        rows = decode_segment(body)
        ids = [e.key for e in rows]
        if (
            len(rows) != m["events"]
            or ids != sorted(set(ids))
            or rows[0].id != m["first_id"]
            or rows[-1].id != m["last_id"]
            or (last is not None and parse_id(m["first_id"]) <= parse_id(last))
        ):
            raise RestoreError(f"segment {expected}: rows do not match the manifest's range")
        seg = Segment(expected, m["first_id"], m["last_id"], m["events"], m["sha256"], m["bytes"])
        floor.restore_segment(seg, rows)
        events += len(rows)
        last = m["last_id"]
    return RestoreResult(len(manifests), events, last)
