"""Least privilege (docs/security.md, Least privilege): emq runs under the ACL users
docs/security.md gives, and under nothing less.

The ACLs are read from the doc's ```acl blocks, so the doc and this test cannot drift apart:
* statically, each role's command list is exactly the commands called by the scripts it runs
  (the source the server runs, its includes composed in) plus the ones its shell sends directly;
* live, on a server of each kind (Valkey, Redis) started here with those users created by the
  doc's own ``ACL SETUSER`` lines: a producer enqueues, a worker runs (burst, then parked on its
  wake list, with retries, a dead letter, a delayed job, a heartbeat and a stalled-lease sweep),
  an operator uses the CLI and the API; afterwards ``ACL LOG`` holds no refusal but the ones the
  doc calls expected;
* a user missing one permission gets an error that names the command.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from emq import AsyncQueue, Backoff, JobContext, Queue, QueueOptions, Worker, WorkerOptions
from emq.cli.main import cli
from emq.embedded.standalone import EmbeddedServer
from emq.errors import EmqError, ServerRefused, UnsafeServer
from emq.lua.scripts import SCRIPTS
from emq.server.durability import Guard, probe_commands

from ..support.helpers import assert_consistent, expire_leases, until

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
PLACEHOLDER = ">REPLACE-WITH-A-LONG-RANDOM-PASSWORD"
SAMPLE_QUEUE = "{orders}"

# What each role's shell sends outside scripts (read from queue/_async/, server/durability.py
# and worker/): the static check adds the commands its scripts call.
DIRECT = {
    "emq-producer": {"evalsha", "script|load", "info", "blpop", "sadd"},
    "emq-worker": {
        "evalsha", "script|load", "info", "blpop", "set", "hmget", "hgetall", "hscan", "hdel",
        "zadd", "zremrangebyscore", "sadd", "del", "zrem",  # the registry (emq.observe.registry)
    },
    "emq-operator": {
        "evalsha", "script|load", "info", "multi", "exec", "zcard", "hmget", "zrange",
        "hgetall", "zscore", "hget", "xrange", "xrevrange", "xread", "blpop", "hlen",
        "smembers", "sadd", "zrangebyscore", "get",  # emq stats, emq workers
        "zscan", "watch", "unwatch",  # emq dead-letters (emq.queue._sync.deadletters)
        "hscan", "hdel",  # obliterate delivers the outbox before it deletes it
        "lrange",  # emq job --logs, the dashboard's job page (Queue.job_logs)
    },
}  # fmt: skip
SCRIPTS_OF = {
    "emq-producer": {"enqueue", "enqueue_flow", "node_lease", "await_result", "settings"},
    "emq-worker": {
        "claim",
        "extend",
        "complete",
        "complete_claim",
        "fail",
        "delay",
        "promote",
        "sweep_stalled",
        "progress",
        "job_log",
        "step",
        "due_repeats",
        "fire_repeats",
        "deliver_flow",
        "cancel",
        "settings",
    },
    "emq-operator": {
        "redrive",
        "remove",
        "obliterate",
        "drain",
        "pause",
        "resume",
        "sweep_stalled",
        "set_limits",
        "lanes",
        "promote_job",
        "reschedule",
        "set_priority",
        "update_payload",
        "set_repeat",
        "unrepeat",
        "cancel",
        "await_result",
        "deliver_flow",
        "settings",
        "upgrade",
    },
}
# docs/security.md, "Denials that are expected": refused, tolerated, and never needed.
EXPECTED_DENIALS = {"config|get", "client|setinfo"}
CALL = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]")


def doc_acls(tag: str = "acl") -> dict[str, list[str]]:
    """``{user: rules}`` from every ``ACL SETUSER`` line in the doc's ```<tag> blocks (``acl``:
    the roles; ``acl-durable``: what ``durability="aof"`` adds)."""
    out: dict[str, list[str]] = {}
    for block in re.findall(rf"^```{tag}\n(.*?)^```", DOC.read_text(), re.S | re.M):
        for line in block.strip().splitlines():
            words = line.split()
            assert words[:2] == ["ACL", "SETUSER"], line
            out[words[2]] = words[3:]
    return out


def granted(rules: list[str]) -> set[str]:
    return {r[1:] for r in rules if r.startswith("+")}


def script_commands(name: str) -> set[str]:
    return {c.lower() for c in CALL.findall(SCRIPTS[name].source)}


def names(commands: list[tuple[str | int, ...]]) -> set[str]:
    """ACL names of commands as emq sends them: ``("CONFIG GET", ...)`` -> ``config|get``."""
    return {str(c[0]).lower().replace(" ", "|") for c in commands}


def durable_commands() -> set[str]:
    """What a ``durability="aof"`` queue sends besides its scripts: the probe and the tail."""
    guard = Guard(QueueOptions(durability="aof"), "emq:{q}:metrics")
    return names(probe_commands("aof")) | names(guard._tail(guard.marker))


# -- the doc against the code (no server) ---------------------------------------------------


def test_the_doc_has_one_acl_per_role_with_its_keys() -> None:
    acls = doc_acls()
    assert set(acls) == set(DIRECT)
    for user, rules in acls.items():
        assert rules[:3] == ["reset", "on", PLACEHOLDER], user
        keys = {r for r in rules if r.startswith("~")}
        want = {"~emq:{orders}:*", "~{emq}:queues"} | (
            {"~{emq}:node:*"} if user == "emq-producer" else {"~{emq}:worker*"}
        )  # the known queues (emq.server.discovery) and the worker registry (emq.observe.registry)
        assert keys == want, user
        assert not [r for r in rules if r.startswith(("+@", "&", "%", "allkeys", "allcommands"))]


def test_every_script_belongs_to_a_role() -> None:
    assert set(SCRIPTS) == set().union(*SCRIPTS_OF.values()), "a new script needs a role here"


@pytest.mark.parametrize("user", sorted(DIRECT))
def test_each_acl_grants_exactly_what_its_role_sends(user: str) -> None:
    needed = DIRECT[user].union(*(script_commands(s) for s in SCRIPTS_OF[user]))
    have = granted(doc_acls()[user])
    assert not needed - have, f"docs/security.md: {user} lacks {sorted(needed - have)}"
    assert not have - needed, f"docs/security.md: {user} grants unused {sorted(have - needed)}"


def test_the_eviction_probe_is_info_or_an_expected_denial() -> None:
    probe = names(probe_commands("none"))
    assert probe == {"config|get", "info"}, "docs/security.md explains these two"
    for user, rules in doc_acls().items():
        assert "info" in granted(rules) and "config|get" not in granted(rules), user
    assert probe - {"info"} <= EXPECTED_DENIALS


@pytest.mark.parametrize("user", sorted(DIRECT))
def test_the_durable_additions_are_exactly_what_aof_sends(user: str) -> None:
    added = doc_acls("acl-durable")[user]
    assert not [r for r in added if not r.startswith("+")], "additions only"
    assert granted(added) == durable_commands() - granted(doc_acls()[user]), user


# -- live, on servers started here -----------------------------------------------------------


@dataclass
class AclServer:
    srv: EmbeddedServer
    admin: redis.Redis
    kind: str

    @property
    def port(self) -> int:
        return int(self.srv.url().rsplit(":", 1)[1].split("/")[0])

    def user(
        self,
        role: str,
        queues: str,
        *,
        name: str | None = None,
        drop: str = "",
        durable: bool = False,
    ) -> str:
        """Create ``name`` (default: ``role``) with the doc's rules for ``role`` (and its
        ``durability="aof"`` additions if ``durable``), its queue pattern ``queues`` in place of
        ``orders``, less ``+drop``; returns its URL."""
        name = name or role
        password = secrets.token_urlsafe(16)
        lines = [doc_acls()[role]] + ([doc_acls("acl-durable")[role]] if durable else [])
        for doc_rules in lines:
            rules = [
                ">" + password if r == PLACEHOLDER else r.replace(SAMPLE_QUEUE, "{" + queues + "}")
                for r in doc_rules
                if r != "+" + drop
            ]
            self.admin.execute_command("ACL", "SETUSER", name, *rules)
        if drop:
            have = self.admin.acl_getuser(name)["commands"]
            assert drop not in granted(have.split() if isinstance(have, str) else have), drop
        return f"redis://{name}:{password}@127.0.0.1:{self.port}/0"

    def denials(self, user: str) -> set[str]:
        return {
            f"{e['reason']}:{e['object']}"
            for e in self.admin.acl_log(count=1000)
            if e["username"] == user
        }

    def assert_only_expected_denials(self, user: str) -> None:
        extra = self.denials(user) - {f"command:{c}" for c in EXPECTED_DENIALS}
        assert not extra, f"{user} was refused {sorted(extra)} (see ACL LOG)"


@pytest.fixture(scope="module")
def acl(server: EmbeddedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclServer]:
    """A server of each kind (the ``server`` fixture's binary), with ACL users, for this module."""
    srv = EmbeddedServer(tmp_path_factory.mktemp("acl"), binary=server.binary)
    admin = redis.Redis.from_url(srv.start(), decode_responses=True)
    yield AclServer(srv, admin, server.binary.name.split("-")[0])
    admin.close()
    srv.stop()


@pytest.fixture
def q(acl: AclServer, qname: str) -> Iterator[Queue]:
    """The queue seen by the default (all-powerful) user, for set-up and checks."""
    acl.admin.acl_log_reset()
    queue = Queue(redis.Redis.from_url(acl.srv.url(), decode_responses=True), qname)
    yield queue
    queue.close()


FIXED = Backoff(kind="fixed", base_ms=0, jitter=0.0)


@pytest.mark.timeout(60)
async def test_producer_enqueues_under_its_acl(acl: AclServer, q: Queue, qname: str) -> None:
    url = acl.user("emq-producer", qname)
    with Queue.from_url(url, qname) as producer:
        made = producer.enqueue_many([("job", {"i": i}) for i in range(50)])
        assert all(e.created for e in made)
        assert producer.enqueue("job", {"later": True}, delay_ms=60_000).created
        first = producer.enqueue("job", {"k": 1}, key="dedup-1")
        assert not producer.enqueue("job", {"k": 1}, key="dedup-1").created
        assert producer.enqueue("job", None, id=producer.new_id(), priority=5).created
    aproducer = AsyncQueue.from_url(url, qname)
    assert (await aproducer.enqueue("job", {"async": True})).created
    await aproducer.close()
    c = q.counts()
    assert (c["pending"], c["schedule"]) == (53, 1), c
    assert q.job(first) is not None
    acl.assert_only_expected_denials("emq-producer")


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_worker_runs_under_its_acl_in_burst_and_parked(
    acl: AclServer, q: Queue, qname: str
) -> None:
    url = acl.user("emq-worker", qname)
    with Queue.from_url(acl.user("emq-producer", qname), qname) as producer:
        producer.enqueue_many([("ok", {"i": i}) for i in range(40)])
        producer.enqueue_many([("flaky", {"i": i}) for i in range(5)])
        producer.enqueue("doomed", {}, max_attempts=1)
    tries: dict[int, int] = {}

    def flaky(payload: dict[str, int]) -> None:
        tries[payload["i"]] = tries.get(payload["i"], 0) + 1
        if tries[payload["i"]] == 1:
            raise RuntimeError("first try fails")

    def doomed(payload: Any) -> None:
        raise RuntimeError("always fails")

    handlers = {"ok": lambda p: None, "flaky": flaky, "doomed": doomed}
    burst = Worker(qname, handlers, url=url, options=WorkerOptions(burst=True, backoff=FIXED))
    await asyncio.wait_for(burst.run(), 30)
    assert (burst.stats.completed, q.counts()["dead"]) == (45, 1), burst.stats
    assert all(n == 2 for n in tries.values()) and len(tries) == 5

    # parked on the wake list (BLPOP), woken by an enqueue; a heartbeat extends a lease; a
    # delayed job is promoted; a stalled lease is swept back and completed
    stalled = str(q.enqueue("ok", {"stalled": True}))
    assert [c.id for c in q.claim(1, 60_000)] == [stalled]
    expire_leases(q.client, qname, stalled)

    async def slow(payload: Any, ctx: JobContext) -> None:
        await asyncio.sleep(0.9)

    opts = WorkerOptions(poll_ms=20_000, lease_ms=600, stalled_interval_ms=200, backoff=FIXED)
    w = Worker(qname, {**handlers, "slow": slow}, url=url, options=opts)
    task = asyncio.create_task(w.run())
    await until(lambda: q.counts()["completed"] >= 46, 20, "the stalled job swept and completed")
    await until(lambda: w.stats.sweeps >= 1, 10, "a sweep")
    await until(
        lambda: any(c["cmd"].startswith("blpop") for c in acl.admin.client_list()),
        10,
        "the worker to park on BLPOP",
    )
    with Queue.from_url(acl.user("emq-producer", qname), qname) as producer:
        producer.enqueue("slow", {})
        producer.enqueue("ok", {"delayed": True}, delay_ms=300)
    await until(lambda: q.counts()["completed"] >= 48, 20, "the woken and delayed jobs")
    w.stop()
    await asyncio.wait_for(task, 15)
    assert w.stats.recovered >= 1 and w.stats.heartbeats >= 1, w.stats
    c = q.counts()
    assert (c["pending"], c["active"], c["schedule"], c["dead"]) == (0, 0, 0, 1), c
    assert_consistent(q.client, qname)
    acl.assert_only_expected_denials("emq-worker")


def run_cli(*args: str) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, (args, result.output)
    return json.loads(result.output)


@pytest.mark.timeout(60)
def test_operator_cli_and_api_under_its_acl(acl: AclServer, q: Queue, qname: str) -> None:
    q.enqueue_many([("job", {"i": i}) for i in range(10)])
    for c in q.claim(3, 60_000):
        q.fail(c.id, c.token, "boom", retry=False)
    url = acl.user("emq-operator", qname)
    assert run_cli("stats", qname, "--url", url)["dead"] == 3
    pending = run_cli("jobs", qname, "pending", "--url", url)["jobs"]
    assert len(pending) == 7
    assert run_cli("job", qname, pending[0]["id"], "--url", url)["id"] == pending[0]["id"]
    dead = run_cli("dead", qname, "list", "--url", url)["jobs"]
    assert len(dead) == 3
    assert run_cli("dead", qname, "redrive", dead[0]["id"], "--url", url) == {"redrive": 1}
    assert run_cli("dead", qname, "purge", dead[1]["id"], "--url", url) == {"purge": 1}
    groups = run_cli("dead-letters", qname, "--url", url)["groups"]
    assert [(g["error"], g["count"]) for g in groups] == [("boom", 1)]
    extra = q.enqueue("extra", {}, priority=-1000)  # claimed first
    (c,) = q.claim(1, 60_000)
    assert c.id == extra and q.fail(c.id, c.token, "boom", retry=False) == "dead"
    purged = run_cli("dead-letters", qname, "purge", "--name", "extra", "--url", url)
    assert (purged["matched"], purged["moved"]) == (1, 1)  # ZSCAN, WATCH, MULTI, EXEC
    run_cli("pause", qname, "--url", url)
    run_cli("resume", qname, "--url", url)
    run_cli("sweep", qname, "--url", url)
    assert isinstance(run_cli("workers", "--url", url)["workers"], list)  # the registry's keys
    with Queue.from_url(url, qname) as op:
        assert op.counts()["pending"] == 8
        assert op.redrive_all() == 1
        assert not op.is_paused()
        assert [e.event for e in op.events()][:1] == ["enqueued"]
        assert op.drain() == 9
        q.enqueue("job", {})
        assert op.obliterate(force=True) >= 1
    assert q.counts()["pending"] == 0
    acl.assert_only_expected_denials("emq-operator")


@pytest.mark.timeout(60)
def test_a_prefix_pattern_covers_a_family_of_queues_and_nothing_else(
    acl: AclServer, qname: str
) -> None:
    url = acl.user("emq-producer", qname + ".*", name="emq-producer-prefix")
    for name in (qname + ".eu", qname + ".us"):
        with Queue.from_url(url, name) as producer:
            assert producer.enqueue("job", {}).created
    with Queue.from_url(url, qname + "-other") as outside, pytest.raises(EmqError) as info:
        outside.enqueue("job", {})
    assert "key" in str(info.value).lower(), str(info.value)


@pytest.mark.timeout(90)
async def test_durable_queues_run_under_the_acls_with_the_durable_additions(
    acl: AclServer, q: Queue, qname: str, request: pytest.FixtureRequest
) -> None:
    try:
        acl.admin.execute_command("WAITAOF", 0, 0, 1)
    except redis.ResponseError as exc:
        pytest.skip(f"{acl.kind} has no WAITAOF ({exc}): durability='aof' is refused there")
    durable = QueueOptions(durability="aof")
    acl.admin.config_set("appendfsync", "always")
    request.addfinalizer(lambda: acl.admin.config_set("appendfsync", "everysec"))
    with Queue.from_url(acl.user("emq-producer", qname, durable=True), qname, options=durable) as p:
        p.enqueue_many([("ok", {"i": i}) for i in range(20)])
        p.enqueue("doomed", {}, max_attempts=1)
    wq = AsyncQueue.from_url(acl.user("emq-worker", qname, durable=True), qname, options=durable)

    def doomed(payload: Any) -> None:
        raise RuntimeError("always fails")

    w = Worker(wq, {"ok": lambda p: None, "doomed": doomed}, options=WorkerOptions(burst=True))
    await asyncio.wait_for(w.run(), 30)
    await wq.close()
    assert w.stats.completed == 20 and q.counts()["dead"] == 1
    op_url = acl.user("emq-operator", qname, durable=True)
    with Queue.from_url(op_url, qname, options=durable) as op:
        (dead,) = op.jobs("dead")
        assert op.redrive(dead.id)
        assert op.remove(dead.id) == "pending"
    for user in ("emq-producer", "emq-worker", "emq-operator"):
        acl.assert_only_expected_denials(user)
        assert "command:config|get" not in acl.denials(user), "granted for durability"

    # without +config|get emq cannot confirm appendfsync, and refuses before writing anything
    url = acl.user("emq-producer", qname, name="emq-producer-durable", durable=True,
                   drop="config|get")  # fmt: skip
    with Queue.from_url(url, qname, options=durable) as p, pytest.raises(UnsafeServer) as info:
        p.enqueue("ok", {})
    assert "CONFIG GET appendfsync was refused" in str(info.value)
    assert q.counts()["pending"] == 0


# -- a missing permission names the command --------------------------------------------------


def make_dead(q: Queue) -> None:
    """One job in ``dead``: what the operator's calls below read."""
    q.enqueue("job", {})
    (c,) = q.claim(1, 60_000)
    q.fail(c.id, c.token, "boom", retry=False)


def refusal_text(exc: BaseException) -> str:
    """The refusal's text: the exception and its causes."""
    parts, seen = [], exc
    while seen is not None:
        parts.append(str(seen))
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return " | ".join(parts)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("role", "command", "in_script"),
    [
        ("emq-producer", "xadd", True),
        ("emq-producer", "evalsha", False),
        ("emq-operator", "hgetall", False),
        ("emq-operator", "zrange", True),
    ],
)
def test_a_missing_permission_is_an_error_that_names_the_command(
    acl: AclServer,
    q: Queue,
    qname: str,
    role: str,
    command: str,
    in_script: bool,
    request: pytest.FixtureRequest,
) -> None:
    make_dead(q)
    url = acl.user(role, qname, name=f"{role}-limited", drop=command)
    with Queue.from_url(url, qname) as limited:
        act = {
            "emq-producer": lambda: limited.enqueue("job", {}),
            "emq-operator": lambda: (
                limited.jobs("dead") if command == "hgetall" else limited.redrive_all()
            ),
        }[role]
        with pytest.raises(Exception) as info:
            act()
    text = refusal_text(info.value)
    assert f"'{command}'" in text, text


@pytest.mark.timeout(60)
async def test_a_worker_missing_a_permission_logs_the_command_and_goes_on_once_granted(
    acl: AclServer,
    q: Queue,
    qname: str,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    q.enqueue("ok", {})  # packed (keyspace layout 3): the claim pops it from ready with LPOP
    url = acl.user("emq-worker", qname, name="emq-worker-limited", drop="lpop")
    w = Worker(qname, {"ok": lambda p: None}, url=url, options=WorkerOptions(burst=True))
    caplog.set_level(logging.WARNING, logger="emq")
    task = asyncio.create_task(w.run())

    def refused() -> list[str]:
        """The errors the worker logged for its claims."""
        extras = [getattr(r, "emq", None) for r in caplog.records]
        return [
            str(e.get("error")) for e in extras if isinstance(e, dict) and e.get("where") == "claim"
        ]

    try:
        await until(lambda: task.done() or refused(), 15, "the claim's refusal to be logged")
        assert not task.done(), "the worker goes on (retrying) while it is refused"
        assert q.counts()["pending"] == 1, "nothing claimed"
        acl.admin.execute_command("ACL", "SETUSER", "emq-worker-limited", "+lpop")
        await asyncio.wait_for(task, 30)  # burst: returns once the job is done
    finally:
        w.stop()
        await asyncio.wait([task], timeout=15)
    assert w.stats.completed == 1 and q.counts()["completed"] == 1
    assert any("'lpop'" in text for text in refused()), refused()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("role", "command"),
    [
        ("emq-producer", "evalsha"),
        ("emq-producer", "xadd"),
        ("emq-operator", "hgetall"),
    ],
)  # fmt: skip
def test_a_missing_permission_is_server_refused_noperm(
    acl: AclServer, q: Queue, qname: str, role: str, command: str
) -> None:
    make_dead(q)
    url = acl.user(role, qname, name=f"{role}-limited", drop=command)
    with Queue.from_url(url, qname) as limited:
        act = limited.jobs if role == "emq-operator" else limited.enqueue
        with pytest.raises(Exception) as info:
            act("dead" if role == "emq-operator" else "job")
    assert isinstance(info.value, ServerRefused), f"{type(info.value).__name__}: {info.value}"
    assert info.value.reason == "NOPERM"
    assert f"'{command}'" in str(info.value)
