"""``pytest -p emq.testing`` run for real with pytester: the fixtures, the server they share,
the keys gone between tests, one registration whether the entry point or ``-p`` loads it,
and the complete example of docs/testing.md, run as a user would run it.

Most inner runs share the suite's Valkey through ``--emq-url`` on a database of their own
(``INNER_DB``), so they start no server; one runs the embedded server as users get it."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis

from emq.testing.plugin import worker_url
from tests.support.docs import block_after

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.servers("valkey")

ROOT = Path(__file__).parents[2]
INNER_DB = 9  # the inner runs flush this database of the suite's server, never db 0
INI = """[pytest]
filterwarnings = error
asyncio_default_fixture_loop_scope = function
"""


def example() -> str:
    """The example test file of docs/testing.md (the python block after its marker)."""
    return block_after(ROOT / "docs" / "testing.md", "<!-- example: test_signup.py -->")


@pytest.fixture
def inner(pytester: pytest.Pytester, url: str) -> str:
    """An ini like emq's (warnings are errors), and the URL the inner runs are given."""
    pytester.makeini(INI)
    return urlparse(url)._replace(path=f"/{INNER_DB}").geturl()


def test_the_docs_example_passes_on_the_embedded_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EMQ_TEST_URL", raising=False)
    pytester.makeini(INI)
    pytester.makepyfile(test_signup=example())
    pytester.makeconftest(
        "import pytest\n"
        "@pytest.fixture(autouse=True)\n"
        "def note(emq_url, pytestconfig):\n"
        "    (pytestconfig.rootpath / 'url.txt').write_text(emq_url)\n"
    )
    result = pytester.runpytest("-p", "emq.testing")
    result.assert_outcomes(passed=6)
    embedded = redis.Redis.from_url((pytester.path / "url.txt").read_text())
    with pytest.raises(redis.ConnectionError):  # stopped when the session ended
        embedded.ping()
    embedded.close()


def test_keys_are_gone_after_each_test(pytester: pytest.Pytester, inner: str) -> None:
    pytester.makepyfile(
        """
        import redis

        def test_writes(emq_url, emq_queue):
            emq_queue.enqueue("x", 1)
            with redis.Redis.from_url(emq_url) as c:
                c.set("mine", "1")
                assert c.dbsize() > 1

        def test_finds_nothing(emq_url):
            with redis.Redis.from_url(emq_url) as c:
                assert c.dbsize() == 0

        def test_each_queue_is_new(emq_queue, request):
            assert emq_queue.name.startswith("test_each_queue_is_new-")
            assert emq_queue.counts()["pending"] == 0
        """
    )
    with redis.Redis.from_url(inner) as c:
        c.set("before", "1")  # an external server is flushed when the session starts
        result = pytester.runpytest("-p", "emq.testing", "--emq-url", inner)
        result.assert_outcomes(passed=3)
        assert c.dbsize() == 0


def test_the_entry_point_and_p_register_one_plugin(pytester: pytest.Pytester, inner: str) -> None:
    pytester.makepyfile(
        """
        def test_once(request):
            plugins = request.config.pluginmanager.get_plugins()
            assert sum(getattr(p, "__name__", "") == "emq.testing" for p in plugins) == 1
        """
    )
    pytester.runpytest("-p", "emq.testing").assert_outcomes(passed=1)
    pytester.runpytest().assert_outcomes(passed=1)  # the entry point alone
    off = pytester.runpytest("-p", "no:emq.testing", "--emq-url", inner)
    assert off.ret == pytest.ExitCode.USAGE_ERROR  # no plugin: no --emq-url option


def test_emq_test_url_is_read_and_the_async_fixture_closes_on_its_loop(
    pytester: pytest.Pytester, inner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMQ_TEST_URL", inner)
    pytester.makepyfile(
        f"""
        import pytest
        from emq.testing import arun_worker

        @pytest.mark.asyncio
        async def test_async(emq_aqueue, emq_url):
            assert emq_url.endswith("/{INNER_DB}")
            job = await emq_aqueue.enqueue("echo", "hi")

            async def echo(payload):
                return payload

            run = await arun_worker({{"echo": echo}}, queue=emq_aqueue)
            assert run[job].result == "hi"
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)  # ResourceWarnings are errors here


def test_a_bad_emq_url_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(emq_url):\n    pass\n")
    pytester.makeini(INI)
    result = pytester.runpytest("--emq-url", "http://nowhere")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*InvalidUrl*scheme 'http'*"])


def test_xdist_workers_get_a_database_each() -> None:
    url = "redis://:pw@127.0.0.1:6379/2"
    assert worker_url(url, None) == worker_url(url, "master") == worker_url(url, "gw0") == url
    assert worker_url(url, "gw3") == "redis://:pw@127.0.0.1:6379/5"
    assert worker_url("redis://127.0.0.1:6379", "gw1") == "redis://127.0.0.1:6379/1"
    with pytest.raises(pytest.UsageError, match="database number"):
        worker_url("unix:///tmp/v.sock", "gw1")


@pytest.mark.slow
def test_each_xdist_worker_starts_its_own_embedded_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EMQ_TEST_URL", raising=False)
    pytester.makeini(INI)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(4))
        def test_note(emq_url, n, pytestconfig, worker_id):
            (pytestconfig.rootpath / f"{worker_id}.txt").write_text(emq_url)
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "-p", "emq.testing")
    result.assert_outcomes(passed=4)
    urls = {p.read_text() for p in pytester.path.glob("gw*.txt")}
    assert len(urls) == 2
