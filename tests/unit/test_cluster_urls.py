"""A cluster URL names several seed nodes (``redis+cluster://h1:p1,h2:p2/``): the accepted
spellings and what each seed becomes, and every malformed one refused with one line that
says what to fix and never shows the password. No server: nothing connects."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from emq import InvalidUrl, Queue, Tasks, Worker
from emq.cli.main import cli
from emq.server.clients import async_client
from emq.server.urls import check_url, parse_cluster_url, redact_url
from emq.worker.connections import ClientFactory

SECRET = "hunter2-not-shown"


def test_seeds_in_every_spelling() -> None:
    url = f"valkey+cluster://:{SECRET}@10.0.0.1:7000, 10.0.0.2,[::1]:7002/"
    checked = check_url(url)
    assert checked == f"redis+cluster://:{SECRET}@10.0.0.1:7000, 10.0.0.2,[::1]:7002/"
    parsed = parse_cluster_url(checked)
    assert parsed.seeds == (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002))
    assert parsed.node_url == f"redis://:{SECRET}@10.0.0.1:7000/0"
    assert SECRET not in redact_url(checked) and "10.0.0.2" in redact_url(checked)


def test_tls_seeds_keep_their_options_and_a_seed_named_twice_counts_once() -> None:
    url = "valkeys+cluster://app:pw@h1:7000,h2:7001,h1:7000/0?ssl_ca_certs=/etc/ca.crt"
    parsed = parse_cluster_url(check_url(url))
    assert check_url(url).startswith("rediss+cluster://")
    assert parsed.seeds == (("h1", 7000), ("h2", 7001))
    assert parsed.node_url == "rediss://app:pw@h1:7000/0?ssl_ca_certs=/etc/ca.crt"


def test_every_seed_gets_the_login_and_tls_and_so_do_a_workers_own_clients() -> None:
    """An asyncio client connects at its first command: its seeds are read, not dialled."""
    url = f"rediss+cluster://app:{SECRET}@127.0.0.1:1,127.0.0.1:2/?ssl_ca_certs=/etc/ca.crt"
    made = async_client(url, decode_responses=True)
    factory = ClientFactory(like=made)  # Worker(AsyncQueue(...)) copies the client's settings
    for client in (made, factory.asyncio(), ClientFactory(url=url).asyncio()):
        nodes = client.nodes_manager.startup_nodes  # type: ignore[attr-defined]
        assert sorted(nodes) == ["127.0.0.1:1", "127.0.0.1:2"]
        for node in nodes.values():
            assert "SSL" in node.connection_class.__name__
            kw = node.connection_kwargs
            assert (kw["username"], kw["password"], kw["ssl_ca_certs"]) == (
                "app",
                SECRET,
                "/etc/ca.crt",
            )
    assert SECRET not in factory.shown_url and factory.shown_url.startswith("rediss+cluster://")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (f"redis+cluster://:{SECRET}@h1:7000,,h2:7001/", "empty seed address"),
        (f"redis+cluster://:{SECRET}@h1:7000,h2:7001,/", "empty seed address"),
        (f"redis+cluster://:{SECRET}@/", "names no seed node"),
        (f"redis+cluster://:{SECRET}@h1:7000,h2:70x1/", "bad port in 'h2'"),
        (f"redis+cluster://:{SECRET}@h1:7000,h2:99999/", "bad port in 'h2'"),
        (f"redis+cluster://:{SECRET}@h1:7000,redis://:{SECRET}@h2:7001/", "names its scheme once"),
        (f"redis+cluster://:{SECRET}@h1:7000,rediss://h2:7001/", "redis+cluster://, rediss://"),
        (f"redis+cluster://:{SECRET}@h1:7000/3", "only database 0"),
        (f"redis+cluster://:{SECRET}@h1:7000/?db=1", "only database 0"),
        (f"redis+cluster://:{SECRET}@h1:7000/?cluster=no", "scheme already says"),
        (f"redis+cluster://:{SECRET}@h1:7000/?ssl_ca_certs=x", "rediss+cluster://"),
        (f"redis+cluster://:{SECRET}@h1:7000/?nonsense=1", "unknown query option"),
        (f"redis://:{SECRET}@h1:7000,h2:7001/0", "redis+cluster://"),
        (f"valkey://:{SECRET}@h1:7000,h2:7001", "redis+cluster://"),
        (f"redis+clusters://:{SECRET}@h1:7000/", "has scheme"),
    ],
)
def test_bad_cluster_urls_are_refused_in_one_line(url: str, said: str) -> None:
    with pytest.raises(InvalidUrl) as refused:
        check_url(url)
    message = str(refused.value)
    assert said in message and SECRET not in message and "\n" not in message, message


def test_every_entry_point_checks_a_cluster_url_before_it_connects() -> None:
    """Nothing listens on these ports: each refusal comes from the URL alone."""
    bad = f"redis+cluster://:{SECRET}@127.0.0.1:1,,127.0.0.1:2/"
    for make in (
        lambda: Queue.from_url(bad, "q"),
        lambda: Worker("q", url=bad),
        lambda: Tasks("q", url=bad),
    ):
        with pytest.raises(InvalidUrl, match="empty seed address") as refused:
            make()
        assert SECRET not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        f"redis+cluster://:{SECRET}@127.0.0.1:1,,127.0.0.1:2/",
        f"redis+cluster://:{SECRET}@127.0.0.1:1,rediss://:{SECRET}@127.0.0.1:2/",
    ],
)
def test_the_cli_refuses_a_bad_cluster_url_in_one_line(url: str) -> None:
    for args, env in ((["--url", url], {}), ([], {"EMQ_URL": url})):
        result = CliRunner().invoke(cli, ["stats", "q", *args], env=env)
        lines = result.output.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: ")
        assert SECRET not in result.output and "Traceback" not in result.output
