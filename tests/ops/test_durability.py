"""``QueueOptions(durability="aof")`` (docs/guarantees.md, Durability: what survives what): enqueue
and the finishing calls return only once the server has fsynced them (``WAITAOF`` on the same
connection), it is refused clearly where the server cannot confirm that, and a simulated power cut
keeps every write it acknowledged."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from emq import (
    AsyncQueue,
    InvalidOption,
    JobSpec,
    Queue,
    QueueOptions,
    UnsafeServer,
    Worker,
    WorkerOptions,
)
from emq.embedded.standalone import EmbeddedServer
from emq.lua.scripts import SCRIPTS
from emq.model.keys import QueueKeys
from emq.server.durability import Facts, NotDurable, confirm, read_facts, refusal

AOF = QueueOptions(durability="aof")
SHIM = Path(__file__).with_name("powercut.c")


def has_waitaof(client: redis.Redis) -> bool:
    info: dict[str, Any] = client.info("server")
    if "valkey_version" in info:
        return True
    major, minor = (int(p) for p in str(info["redis_version"]).split(".")[:2])
    return (major, minor) >= (7, 2)


def preload(client: redis.Redis) -> None:
    """Load every script, so no call in a count below takes the NOSCRIPT round (which waits
    twice: once in the refused pipeline, once after the reload)."""
    for script in SCRIPTS.values():
        client.script_load(script.source)


def waitaof_calls(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_waitaof", {}).get("calls", 0))


# -- I/O-free ---------------------------------------------------------------------------------


def test_options_are_validated() -> None:
    assert QueueOptions().durability == "none"
    assert QueueOptions().allow_eviction is False
    with pytest.raises(InvalidOption, match="durability"):
        QueueOptions(durability="fsync")  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="durability_timeout_ms"):
        QueueOptions(durability="aof", durability_timeout_ms=0)
    with pytest.raises(InvalidOption, match="allow_eviction"):
        QueueOptions(allow_eviction="yes")  # type: ignore[arg-type]


def _facts(waitaof: Any, fsync: str | None, info: dict[str, str]) -> Facts:
    config = {"appendfsync": fsync} if fsync else ResponseError("NOPERM")
    return read_facts([{"maxmemory-policy": "noeviction"}, {}, config, info, waitaof], "aof")


def test_what_durability_aof_needs_of_a_server() -> None:
    def why(waitaof: Any, fsync: str | None, info: dict[str, str]) -> str:
        problem = refusal(_facts(waitaof, fsync, info), AOF)
        return "" if problem is None else str(problem)

    ok, valkey = [1, 0], {"redis_version": "7.2.4", "valkey_version": "9.1.2"}
    old = ResponseError("unknown command 'WAITAOF', with args beginning with: '1' '0' '1'")
    assert "7.2" in why(old, "everysec", {"redis_version": "7.0.15"})
    assert "Redis 7.0.15" in why(old, "everysec", {"redis_version": "7.0.15"})
    off = ResponseError("WAITAOF cannot be used when numlocal is set but appendonly is disabled.")
    assert "appendonly" in why(off, "everysec", valkey)
    assert "appendfsync no" in why(ok, "no", valkey)
    # the early acknowledgement under everysec (fixed in Redis 8.0, not in Valkey)
    assert "appendfsync always" in why(ok, "everysec", valkey)
    assert "appendfsync always" in why(ok, "everysec", {"redis_version": "7.4.2"})
    assert "appendfsync always" in why(ok, None, valkey)  # unreadable: cannot tell
    assert why(ok, "always", valkey) == ""
    assert why(ok, "everysec", {"redis_version": "8.0.2"}) == ""
    # durability none asks nothing of the AOF
    assert refusal(_facts(old, "no", {}), QueueOptions()) is None


def test_policy_falls_back_to_info_memory() -> None:
    facts = read_facts([ResponseError("NOPERM"), {"maxmemory_policy": "allkeys-lru"}], "none")
    assert facts.policy == "allkeys-lru"
    assert read_facts([ResponseError("x"), ResponseError("y")], "none").policy is None


def test_confirm_reads_numlocal() -> None:
    confirm([1, [1, 0]], 100)
    with pytest.raises(NotDurable, match=r"applied but not confirmed durable.*100 ms"):
        confirm([1, [0, 0]], 100)
    with pytest.raises(NotDurable, match="refused WAITAOF"):
        confirm([1, ResponseError("appendonly is disabled")], 100)


# -- on servers -------------------------------------------------------------------------------


def test_aof_is_refused_with_nothing_written_where_it_cannot_be_confirmed(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    """Redis 7.0: no WAITAOF. Valkey with the embedded server's ``appendfsync everysec``:
    WAITAOF answers before the fsync, so only ``always`` is accepted."""
    with Queue.from_url(own.url(), "q", options=AOF) as q, pytest.raises(UnsafeServer) as err:
        q.enqueue("send")
    if has_waitaof(admin):
        assert "appendfsync always" in str(err.value)
    else:
        assert "7.2" in str(err.value) and "Redis 7.0" in str(err.value)
    assert admin.dbsize() == 0


def test_aof_refused_while_appendonly_is_off(own: EmbeddedServer, admin: redis.Redis) -> None:
    if not has_waitaof(admin):
        pytest.skip("no WAITAOF on this server")
    admin.config_set("appendonly", "no")
    with (
        Queue.from_url(own.url(), "q", options=AOF) as q,
        pytest.raises(UnsafeServer, match="appendonly"),
    ):
        q.enqueue("send")
    assert admin.dbsize() == 0


def test_every_durable_call_waits_for_its_fsync(own: EmbeddedServer, admin: redis.Redis) -> None:
    if not has_waitaof(admin):
        pytest.skip("no WAITAOF on this server")
    admin.config_set("appendfsync", "always")
    preload(admin)
    with Queue.from_url(own.url(), "q", options=AOF) as q:
        q.enqueue("warm-up")  # the probe
        waits = waitaof_calls(admin)
        one = q.enqueue("send", 0)
        many = q.enqueue_many([("send", i) for i in range(2500)])  # pipelined chunks
        assert waitaof_calls(admin) - waits == 2  # one enqueue, one pipeline of 3 chunks
        a, b, c, d = q.claim(4)
        waits = waitaof_calls(admin)
        q.complete(a.id, a.token)
        assert q.fail(b.id, b.token, "boom", retry=False) == "dead"
        assert q.delay(c.id, c.token, 0) == "pending"
        q.complete_many([(d.id, d.token)])
        assert q.redrive(b.id)
        assert q.remove(many[-1]) == "pending"
        assert waitaof_calls(admin) - waits == 6
        assert q.counts()["pending"] == 2502 - 2 - 1  # two completed, one removed
        assert q.job(one) is not None
    stats = admin.info("commandstats")["cmdstat_waitaof"]
    assert stats.get("failed_calls", 0) == 0 and stats.get("rejected_calls", 0) == 0


async def test_async_durable_calls(own: EmbeddedServer, admin: redis.Redis) -> None:
    if not has_waitaof(admin):
        pytest.skip("no WAITAOF on this server")
    admin.config_set("appendfsync", "always")
    preload(admin)
    async with AsyncQueue.from_url(own.url(), "q", options=AOF) as q:
        ids = await q.enqueue_many([("send", i) for i in range(2500)])
        waits = waitaof_calls(admin)
        jobs = await q.claim(100)
        assert waitaof_calls(admin) == waits  # a claim is not waited for
        await q.complete_many([(j.id, j.token) for j in jobs])
        assert waitaof_calls(admin) - waits == 1
        assert (await q.counts())["completed"] == 100
        assert len(ids) == 2500


def test_a_write_whose_fsync_does_not_come_is_reported(
    own: EmbeddedServer, admin: redis.Redis
) -> None:
    """The reply to WAITAOF is read: numlocal 0 (here: appendfsync switched to ``no`` after the
    check) raises NotDurable, and the write is there all the same."""
    if not has_waitaof(admin):
        pytest.skip("no WAITAOF on this server")
    admin.config_set("appendfsync", "always")
    opts = QueueOptions(durability="aof", durability_timeout_ms=200)
    with Queue.from_url(own.url(), "q", options=opts) as q:
        q.enqueue("warm-up")
        admin.config_set("appendfsync", "no")
        job_id = q.new_id()
        with pytest.raises(NotDurable, match="applied but not confirmed durable"):
            q.enqueue("send", id=job_id)
        assert q.job(job_id) is not None
        admin.config_set("appendonly", "no")
        with pytest.raises(NotDurable, match="refused WAITAOF"):
            q.enqueue_many([JobSpec("send", 2)])


def test_script_flush_still_waits(own: EmbeddedServer, admin: redis.Redis) -> None:
    if not has_waitaof(admin):
        pytest.skip("no WAITAOF on this server")
    admin.config_set("appendfsync", "always")
    with Queue.from_url(own.url(), "q", options=AOF) as q:
        q.enqueue("warm-up")
        admin.script_flush()
        waits = waitaof_calls(admin)
        job_id = q.enqueue("send")
        assert waitaof_calls(admin) - waits == 2  # the NOSCRIPT round, then after the reload
        assert q.job(job_id) is not None


def test_worker_acks_through_waitaof(own: EmbeddedServer, admin: redis.Redis) -> None:
    """A Worker given a Queue with durability="aof" sends every complete as EVALSHA, then the
    no-change write and WAITAOF, on the same connection, and never with a claim."""
    if not has_waitaof(admin):
        pytest.skip("no WAITAOF on this server")
    admin.config_set("appendfsync", "always")
    preload(admin)
    q = Queue.from_url(own.url(), "q", options=AOF)
    q.enqueue_many([("send", i) for i in range(40)])
    seen: list[tuple[str, list[str]]] = []
    ready, done = threading.Event(), threading.Event()

    def watch() -> None:
        mon = redis.Redis.from_url(own.url(), decode_responses=True)
        with mon.monitor() as m:
            ready.set()
            for cmd in m.listen():
                seen.append(
                    (f"{cmd['client_address']}:{cmd['client_port']}", cmd["command"].split())
                )
                if done.is_set():
                    return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    assert ready.wait(5)
    worker = Worker(q, {"send": lambda p: None}, options=WorkerOptions(burst=True))
    worker.run_sync(handle_signals=False)
    done.set()
    admin.ping()  # one more command, so the monitor loop sees done
    t.join(5)
    assert worker.stats.completed == 40
    # its acks go apart from its claims (a claim need not wait for the fsync)
    assert worker.stats.joined_acks == 0
    assert not [c for _, c in seen if c[:2] == ["EVALSHA", SCRIPTS["complete_claim"].sha]]
    sha = SCRIPTS["complete"].sha
    metrics = QueueKeys.of("q").metrics
    completes = [i for i, (_, c) in enumerate(seen) if c[:2] == ["EVALSHA", sha]]
    assert completes
    for i in completes:
        conn = seen[i][0]
        after = [c for who, c in seen[i + 1 :] if who == conn][:2]
        assert after == [["HINCRBY", metrics, "completed", "0"], ["WAITAOF", "1", "0", "5000"]]
    q.close()


@pytest.mark.slow
def test_worker_rides_out_acks_whose_fsync_is_late(own: EmbeddedServer, admin: redis.Redis) -> None:
    """An ack applied but not confirmed in time (NotDurable) is re-sent like any server error;
    the re-send waits for the fsync again, and the worker neither dies nor drops the ack."""
    if not has_waitaof(admin):
        pytest.skip("no WAITAOF on this server")
    admin.config_set("appendfsync", "always")
    preload(admin)
    opts = QueueOptions(durability="aof", durability_timeout_ms=100)
    q = Queue.from_url(own.url(), "q", options=opts)
    q.enqueue_many([("send", i) for i in range(30)])
    back = threading.Timer(1.0, admin.config_set, ("appendfsync", "always"))

    def handler(payload: int) -> None:
        if not back.is_alive() and not back.finished.is_set():
            admin.config_set("appendfsync", "no")  # the server stops confirming fsyncs
            back.start()

    worker = Worker(q, {"send": handler}, options=WorkerOptions(burst=True, concurrency=1))
    try:
        worker.run_sync(handle_signals=False)
    finally:
        back.cancel()  # a no-op once it has fired
        if back.ident is not None:
            back.join(5)
    assert q.counts()["completed"] == 30
    assert worker.stats.completed + worker.stats.uncertain_acks >= 30
    q.close()


# -- a power cut, simulated -------------------------------------------------------------------


def _shim(tmp_path: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the power-cut shim")
    out = tmp_path / "powercut.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM), "-ldl",
                    "-lpthread"], check=True, capture_output=True)  # fmt: skip
    return out


def _start_under_shim(srv: EmbeddedServer, shim: Path, mp: pytest.MonkeyPatch) -> redis.Redis:
    with mp.context() as m:
        m.setenv("LD_PRELOAD", str(shim))
        m.setenv("POWERCUT_LOG", str(srv.data_dir.parent / "powercut.log"))
        srv.start()
    c = redis.Redis.from_url(srv.url(), decode_responses=True)
    c.config_set("auto-aof-rewrite-percentage", "0")  # one AOF file for the whole test
    return c


def _power_cut(srv: EmbeddedServer) -> None:
    pid = srv.status().pid
    assert pid
    os.kill(pid, signal.SIGKILL)
    for _ in range(500):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    srv.start()  # from the same directory: loads what reached the AOF file


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_power_cut_keeps_every_acknowledged_durable_write(
    server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server runs under a shim that holds AOF writes in memory until fsync, so SIGKILL
    loses exactly what was not fsynced (a power cut). With durability="aof" (appendfsync
    always) every acknowledged enqueue and completion survives; with durability="none" and
    appendfsync everysec the last second may be lost (printed, not asserted)."""
    probe = redis.Redis.from_url(server.url(), decode_responses=True)
    valkey = "valkey_version" in probe.info("server")
    probe.close()
    if not valkey:
        pytest.skip("Redis 7.0 has no WAITAOF")
    shim = _shim(tmp_path)

    loose_srv = EmbeddedServer(tmp_path / "loose" / "srv", binary=server.binary)
    c = _start_under_shim(loose_srv, shim, monkeypatch)
    assert ".incr.aof" in (tmp_path / "loose" / "powercut.log").read_text()
    with Queue.from_url(loose_srv.url(), "q") as q:
        loose = [q.enqueue("send", i) for i in range(300)]
    acked = []  # why everysec is refused for "aof" on Valkey: WAITAOF answers too early
    for i in range(20):
        with c.pipeline(transaction=False) as p:
            p.set(f"raw{i}", i).execute_command("WAITAOF", 1, 0, 2000)
            if p.execute()[1][0] == 1:
                acked.append(f"raw{i}")
    c.close()
    _power_cut(loose_srv)
    with Queue.from_url(loose_srv.url(), "q") as q:
        kept = sum(q.job(j) is not None for j in loose)
        raw = sum(bool(q.client.exists(k)) for k in acked)
    loose_srv.stop()
    print(f"durability=none, appendfsync everysec: {kept} of {len(loose)} acknowledged kept")
    print(f"raw SET + WAITAOF 1 0, appendfsync everysec: {raw} of {len(acked)} acknowledged kept")

    srv = EmbeddedServer(tmp_path / "aof" / "srv", binary=server.binary)
    c = _start_under_shim(srv, shim, monkeypatch)
    c.config_set("appendfsync", "always")
    with Queue.from_url(srv.url(), "q", options=AOF) as q:
        singles = [q.enqueue("send", i) for i in range(20)]
        batch = q.enqueue_many([("send", i) for i in range(3000)])
        claimed = q.claim(50)
        for job in claimed[:25]:
            q.complete(job.id, job.token)
        q.complete_many([(j.id, j.token) for j in claimed[25:]])
    c.close()
    _power_cut(srv)
    with Queue.from_url(srv.url(), "q") as q:
        done = {j.id for j in claimed}
        missing = [j for j in singles + batch if j not in done and q.job(j) is None]
        undone = [j for j in done if q.job(j) is not None]
        assert q.counts()["completed"] == 50
    srv.stop()
    assert missing == []
    assert undone == []
