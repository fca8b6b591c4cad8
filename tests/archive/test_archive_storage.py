"""Shipping closed floor segments to object storage and restoring a floor from them.

Two targets: a local directory, and a real S3-speaking server on loopback (moto's threaded
server, started here; no S3 service is reachable from the test machines). The centrepiece:
a dead-lettered job's whole history survives a trim that removed every one of its live
events, and survives a restore into an empty floor.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from emq import Queue
from emq.archive import (
    Archive,
    Floor,
    FloorError,
    LocalDir,
    RestoreError,
    S3Bucket,
    ShipConflict,
    Target,
    restore,
    ship,
)
from emq.queue._sync.stream import read_range

from ..support.helpers import expire_leases
from .test_archive import Producer

if not os.environ.get("CI"):  # in CI the test group provides them: fail there, never skip
    pytest.importorskip("moto.server")
    pytest.importorskip("boto3")


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_client(s3_endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="emq-test",
        aws_secret_access_key="emq-test",
        region_name="us-east-1",
    )


@pytest.fixture(params=["dir", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "dir":
        return LocalDir(tmp_path / "bucket")
    client = request.getfixturevalue("s3_client")
    bucket = f"emq-{os.urandom(4).hex()}"
    client.create_bucket(Bucket=bucket)
    return S3Bucket(bucket, "archive/", client=client)


def test_dead_jobs_history_survives_the_trim_and_a_restore(
    queue: Queue, client: redis.Redis, target: Target, tmp_path: Path
) -> None:
    failed = queue.enqueue("charge", {"card": "4242", "cents": 990}, max_attempts=2)
    (c,) = queue.claim(1)
    queue.fail(c.id, c.token, "card declined", delay_ms=0)
    (c,) = queue.claim(1)  # promotes the due retry, then claims it
    queue.fail(c.id, c.token, "card declined again")
    stalled = queue.enqueue("resize", {"img": 7})
    queue.claim(1)
    expire_leases(client, queue.name)
    assert queue.sweep_stalled(max_stalled=1).dead == [stalled]
    queue.enqueue_many([("later", i) for i in range(5)])  # W moves past both jobs

    a = Archive(queue, tmp_path / "floor.sqlite3", batch=4)
    a.catch_up()
    live = list(read_range(client, queue.core.keys))
    assert not [e for e in live if e.job in (failed, stalled)]  # every live event trimmed

    story = queue.history(failed, floor=a.floor)
    assert [e.event for e in story] == [
        "enqueued", "claimed", "retrying", "promoted", "claimed", "dead"
    ]  # fmt: skip
    dead = story[-1].fields
    assert dead["name"] == "charge" and json.loads(dead["payload"]) == {
        "card": "4242",
        "cents": 990,
    }
    assert (dead["attempts"], dead["stalled"], dead["error"]) == ("2", "0", "card declined again")
    swept = queue.history(stalled, floor=a.floor)
    assert [e.event for e in swept] == ["enqueued", "claimed", "dead"]
    assert (swept[-1].fields["stalled"], swept[-1].fields["error"]) == ("1", "stalled")

    result = ship(a.floor, target, segment_size=5, flush=True)
    assert result.shipped == len(a.floor.segments()) and result.events == a.floor.count()
    fresh = Floor(tmp_path / "restored.sqlite3", queue=queue.name)
    restored = restore(target, fresh)
    assert (restored.events, restored.watermark) == (a.floor.count(), a.floor.watermark())
    assert fresh.all_events() == a.floor.all_events()
    assert queue.history(failed, floor=fresh) == story
    assert queue.history(stalled, floor=fresh) == swept
    fresh.close()
    a.close()


def test_segments_are_compressed_with_a_manifest_and_never_overwritten(
    queue: Queue, target: Target, tmp_path: Path, url: str
) -> None:
    producer = Producer(url, queue.name, batch=10)
    producer.run(4)  # 120 events
    a = Archive(queue, tmp_path / "f.sqlite3")
    a.catch_up()
    first = ship(a.floor, target, segment_size=50)
    assert (first.closed, first.shipped, first.events) == (2, 2, 100)  # 20 left open
    assert ship(a.floor, target, segment_size=50).shipped == 0  # nothing new: no put at all
    body = target.get(f"{queue.name}/segments/000000000001.jsonl.gz")
    assert body[:2] == b"\x1f\x8b"
    raw = gzip.decompress(body)
    assert len(body) < len(raw) and raw.count(b"\n") == 50
    manifest = json.loads(target.get(f"{queue.name}/manifests/000000000001.json"))
    assert manifest["events"] == 50 and manifest["encoding"] == "jsonl+gzip"
    assert manifest["queue"] == queue.name and manifest["first_id"] < manifest["last_id"]
    # create-only: identical bytes are accepted as already there, other bytes are refused
    key = f"{queue.name}/segments/000000000001.jsonl.gz"
    assert target.put_new(key, body) is False
    with pytest.raises(ShipConflict):
        target.put_new(key, b"something else")
    assert target.get(key) == body
    producer.close()
    a.close()


def test_a_crash_between_body_and_manifest_is_repaired_by_the_next_ship(
    queue: Queue, target: Target, tmp_path: Path, url: str
) -> None:
    producer = Producer(url, queue.name, batch=10)
    producer.run(2)
    a = Archive(queue, tmp_path / "f.sqlite3")
    a.catch_up()
    (seg,) = a.floor.close_segments(60, flush=True)
    from emq.archive.storage import encode_segment

    target.put_new(f"{queue.name}/segments/000000000001.jsonl.gz", encode_segment(
        a.floor.segment_events(seg)))  # fmt: skip
    assert ship(a.floor, target, segment_size=60).shipped == 1
    fresh = Floor(tmp_path / "r.sqlite3", queue=queue.name)
    assert restore(target, fresh).events == 60
    producer.close()
    fresh.close()
    a.close()


@pytest.mark.slow
def test_s3_put_is_conditional_even_without_the_head_check(s3_client: Any, tmp_path: Path) -> None:
    """``If-None-Match: *`` alone refuses an existing key on the server."""
    s3_client.create_bucket(Bucket="emq-conditional")
    s3_client.put_object(Bucket="emq-conditional", Key="k", Body=b"first")
    with pytest.raises(Exception) as info:
        s3_client.put_object(Bucket="emq-conditional", Key="k", Body=b"second", IfNoneMatch="*")
    assert info.value.response["Error"]["Code"] == "PreconditionFailed"  # type: ignore[attr-defined]
    bucket = S3Bucket("emq-conditional", client=s3_client)
    with pytest.raises(ShipConflict):
        bucket.put_new("k", b"second")
    assert bucket.get("k") == b"first"


def test_restore_refuses_a_non_empty_floor_and_a_corrupt_segment(
    queue: Queue, tmp_path: Path, url: str
) -> None:
    producer = Producer(url, queue.name, batch=10)
    producer.run(1)
    a = Archive(queue, tmp_path / "f.sqlite3")
    a.catch_up()
    target = LocalDir(tmp_path / "bucket")
    ship(a.floor, target, segment_size=10, flush=True)
    with pytest.raises(FloorError, match="not empty"):
        restore(target, a.floor)
    (target.root / queue.name / "segments" / "000000000002.jsonl.gz").write_bytes(b"rot")
    fresh = Floor(tmp_path / "r.sqlite3", queue=queue.name)
    with pytest.raises(RestoreError, match="segment 2"):
        restore(target, fresh)
    (target.root / queue.name / "manifests" / "000000000002.json").unlink()
    (target.root / queue.name / "segments" / "000000000002.jsonl.gz").unlink()
    with pytest.raises(RestoreError, match="segment 2 is missing"):
        restore(target, Floor(tmp_path / "r2.sqlite3", queue=queue.name))
    producer.close()
    fresh.close()
    a.close()


def test_a_restored_floor_keeps_archiving_and_reports_the_unshipped_tail_as_a_gap(
    queue: Queue, tmp_path: Path, url: str
) -> None:
    producer = Producer(url, queue.name, batch=10)
    producer.run(2)  # 60 events
    a = Archive(queue, tmp_path / "old.sqlite3")
    a.catch_up()
    target = LocalDir(tmp_path / "bucket")
    ship(a.floor, target, segment_size=50)  # events 51..60 stay only in the old floor
    a.release_lease()
    a.close()
    producer.run(1)
    fresh = Floor(tmp_path / "new.sqlite3", queue=queue.name)
    restored = restore(target, fresh)
    assert restored.events == 50
    b = Archive(queue, fresh)
    r = b.cycle()
    assert r.gap is not None  # the stream starts above the restored W: reported, not hidden
    assert r.gap[0] == restored.watermark
    assert r.folded == 31 and fresh.count() == 81  # the old W's witness entry, then 30 new
    producer.close()
    b.close()
