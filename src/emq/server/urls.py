"""Server URLs, checked before anything connects: the schemes emq accepts (plain, TLS, unix
sockets, the ``valkey://`` aliases, a cluster's seeds in ``redis+cluster://`` and Sentinel's
``redis+sentinel://``), what is wrong with a URL that cannot work, and the URL as it may be
shown (its passwords masked). No I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import ParseResult, SplitResult, parse_qs, parse_qsl, unquote, urlparse, urlsplit

from ..errors import InvalidUrl

URL_SCHEMES = ("redis", "rediss", "unix", "valkey", "valkeys")
_PASSWORD_QUERY = re.compile(r"([?&](?:sentinel_|ssl_)?password=)[^&#]*", re.IGNORECASE)
_DB_PATH = re.compile(r"(/([0-9]+)?/?)?")
_OPTION_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")  # any other text may be a misplaced password
_TRUE, _FALSE = ("1", "true", "yes", "y", "t"), ("0", "false", "no", "n", "f")
QUERY_OPTIONS: dict[str, str] = {
    "cluster": "text",  # emq's own switch: its value is checked by emq.server.clients
    "db": "count",
    "socket_timeout": "seconds",
    "socket_connect_timeout": "seconds",
    "socket_keepalive": "flag",
    "socket_read_size": "positive",
    "retry_on_timeout": "flag",
    "max_connections": "positive",
    "health_check_interval": "count",
    "client_name": "text",
    "username": "text",
    "password": "text",
}
"""The query options a ``redis://``, ``rediss://`` or ``unix://`` URL may carry (redis-py reads
them), each with the kind of value it takes; ``rediss://`` also takes :data:`TLS_OPTIONS`."""
TLS_OPTIONS: dict[str, str] = {
    "ssl_ca_certs": "text",
    "ssl_ca_path": "text",
    "ssl_ca_data": "text",
    "ssl_certfile": "text",
    "ssl_keyfile": "text",
    "ssl_password": "text",
    "ssl_cert_reqs": "reqs",
    "ssl_check_hostname": "flag",
    "ssl_ciphers": "text",
    "ssl_min_version": "positive",
    "ssl_include_verify_flags": "verify",
    "ssl_exclude_verify_flags": "verify",
}
_VERIFY = ("VERIFY_ALLOW_PROXY_CERTS", "VERIFY_CRL_CHECK_LEAF", "VERIFY_X509_PARTIAL_CHAIN",
           "VERIFY_X509_STRICT", "VERIFY_X509_TRUSTED_FIRST")  # fmt: skip
_EXPECTED = {
    "count": "an integer, 0 or more",
    "positive": "an integer, 1 or more",
    "seconds": "a number of seconds above 0, e.g. 2.5",
    "flag": "yes or no (true/false, 1/0)",
    "reqs": "required, optional or none",
    "verify": "a comma list of " + ", ".join(_VERIFY),
}
_LOOSE_USERINFO = re.compile(r"(://[^:/?#@]*:).*@")  # through the last "@": over-masks, never leaks


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``: the one in the user-info part
    (``redis://user:secret@host`` -> ``redis://user:***@host``) and a ``password=`` query
    (and ``sentinel_password=``, ``ssl_password=``) argument. Scheme, user, host, port, db
    and the other query arguments are kept. Never raises and never returns the password,
    even for a URL that :func:`check_url` refuses (a password with an unescaped ``/``, ``?``
    or ``#``: then everything up to the last ``@`` is masked)."""
    if not isinstance(url, str):
        return "<not a string>"
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = ""
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        url = url.replace(netloc, userinfo.partition(":")[0] + ":***@" + hostport, 1)
    elif not at and "@" in url:
        url = _LOOSE_USERINFO.sub(r"\1***@", url, count=1)
    return _PASSWORD_QUERY.sub(r"\1***", url)


def check_url(url: str) -> str:
    """Return a URL redis-py accepts, or raise :class:`InvalidUrl` saying what to fix; the
    message shows the URL with its password redacted (:func:`redact_url`).

    ``valkey://`` and ``valkeys://`` are accepted as aliases of ``redis://`` and ``rediss://``;
    ``rediss://`` takes TLS options as query arguments (``?ssl_ca_certs=/path/ca.crt``).
    ``redis+sentinel://`` and ``valkey+sentinel://`` are checked by
    :func:`emq.server.sentinel.check_sentinel_url` (returned as ``redis+sentinel://``; redis-py
    cannot open them with ``from_url``: :mod:`emq.server.sentinel` makes their clients).
    """
    if not isinstance(url, str) or not url:
        raise InvalidUrl("server URL is empty; expected e.g. redis://127.0.0.1:6379/0")
    if url.partition("://")[0] in SENTINEL_SCHEMES:
        return check_sentinel_url(url)
    if url.partition("://")[0] in CLUSTER_SCHEMES:
        return check_cluster_url(url)
    shown = redact_url(url)
    try:
        parsed = urlparse(url)
    except ValueError as exc:
        raise InvalidUrl(f"server URL {shown!r} cannot be parsed: {exc}") from None
    if parsed.scheme not in URL_SCHEMES:
        raise InvalidUrl(
            f"server URL {shown!r} has scheme {parsed.scheme!r}; use one of "
            + ", ".join(f"{s}://" for s in (*URL_SCHEMES, *CLUSTER_SCHEMES, *SENTINEL_SCHEMES))
        )
    if parsed.scheme == "unix":
        if not parsed.path:
            raise InvalidUrl(f"unix URL {shown!r} has no socket path; e.g. unix:///tmp/valkey.sock")
        _check_query(parsed, shown)
        return url
    if "," in parsed.netloc.rpartition("@")[2]:
        raise InvalidUrl(
            f"server URL {shown!r} names several hosts: list a cluster's seed nodes in a "
            f"redis+cluster:// URL (rediss+cluster:// with TLS), e.g. {CLUSTER_EXAMPLE}"
        )
    try:
        port = parsed.port
    except ValueError:  # its text may be a misplaced password: not echoed
        raise InvalidUrl(
            f"server URL {shown!r} has a bad port: expected an integer within 1-65535"
        ) from None
    if not parsed.hostname:
        raise InvalidUrl(f"server URL {shown!r} has no host; e.g. redis://127.0.0.1:6379/0")
    if port is not None and not 0 < port < 65536:
        raise InvalidUrl(f"server URL {shown!r} has port {port} outside 1-65535")
    if not _DB_PATH.fullmatch(parsed.path):  # its text may be a misplaced password: not echoed
        raise InvalidUrl(
            f"server URL {shown!r}: after the host only a database number may follow "
            "(redis://host:6379/0)"
        )
    _check_query(parsed, shown)
    if parsed.scheme.startswith("valkey"):
        url = "redis" + url[len("valkey") :]
    return url


def _check_query(parsed: ParseResult | SplitResult, shown: str, *, cluster: bool = False) -> None:
    """Refuse a query option redis-py would pass on as an argument nobody takes (a
    ``TypeError`` deep in redis-py), or read wrong (a timeout ``abc``, a db ``x`` taken as 0).
    Only the option's name is named, never its value (it may be a misplaced password).
    ``cluster``: a ``redis+cluster://`` URL's query (no ``cluster`` switch, only db 0)."""
    tls = parsed.scheme in ("rediss", "valkeys", "rediss+cluster", "valkeys+cluster")
    allowed = QUERY_OPTIONS | (TLS_OPTIONS if tls else {})
    if parsed.scheme == "unix":
        allowed = {k: v for k, v in allowed.items() if k != "socket_keepalive"}
    seen: set[str] = set()
    for name, value in parse_qsl(parsed.query, keep_blank_values=True):
        if name not in allowed:
            if name in TLS_OPTIONS:
                tls_url = "rediss+cluster://" if cluster else "rediss:// (or valkeys://)"
                hint = f"it is a TLS option: use a {tls_url} URL"
            else:
                hint = f"emq takes {', '.join(sorted(allowed))}"
            named = repr(name) if _OPTION_NAME.fullmatch(name) else "(not shown: not a name)"
            raise InvalidUrl(f"server URL {shown!r} has an unknown query option {named}; {hint}")
        if name in seen:
            raise InvalidUrl(f"server URL {shown!r} gives the query option {name!r} twice")
        if cluster and name == "cluster":
            raise InvalidUrl(
                f"cluster URL {shown!r} has the query option 'cluster': its scheme already "
                "says it is a cluster; drop the option"
            )
        if cluster and name == "db" and value != "0":
            raise InvalidUrl(f"cluster URL {shown!r}: a cluster has only database 0 (db=0)")
        seen.add(name)
        kind = allowed[name]
        if not _valid(kind, value):
            raise InvalidUrl(
                f"server URL {shown!r} has a bad value for {name!r}: expected "
                + _EXPECTED.get(kind, "some text")
            )


def _valid(kind: str, value: str) -> bool:
    if kind == "text":
        return True  # blank too: redis-py skips an option with no value
    if not value:
        return False
    if kind in ("count", "positive"):
        return value.isascii() and value.isdigit() and (kind == "count" or int(value) > 0)
    if kind == "seconds":
        try:
            return 0 < float(value) < float("inf")
        except ValueError:
            return False
    if kind == "verify":
        return all(f.strip() in _VERIFY for f in value.strip("[]").split(","))
    low = value.lower()
    if kind == "flag":
        return low in _TRUE or low in _FALSE
    return value in ("required", "optional", "none")  # reqs: redis-py's exact words


SENTINEL_SCHEMES = ("redis+sentinel", "valkey+sentinel")
DEFAULT_PORT = 26379
EXAMPLE = "redis+sentinel://:password@127.0.0.1:26379,127.0.0.1:26380/mymaster/0"
QUERY_ARGS = ("sentinel_password", "sentinel_username")


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    """A parsed sentinel URL (holds passwords: keep it out of logs)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None
    sentinel_username: str | None
    sentinel_password: str | None


def _host_port(text: str, shown: str, *, seed: bool = False) -> tuple[str, int]:
    """One ``host[:port]`` (``[v6]:port``) of a sentinel URL's sentinels, or with ``seed`` of a
    cluster URL's seeds; the port's text is never echoed (it may be a misplaced password)."""
    kind, item = ("cluster", "seed") if seed else ("sentinel", "sentinel")
    example = CLUSTER_EXAMPLE if seed else EXAMPLE
    if text.startswith("["):  # [::1]:26379
        host, close, rest = text[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise InvalidUrl(f"{kind} URL {shown!r} has a bad IPv6 address {text!r}")
        port_text = rest[1:]
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise InvalidUrl(
            f"{kind} URL {shown!r} has an empty {item} address; list them as "
            f"host:port,host:port, e.g. {example}"
        )
    if not port_text:
        return host, SEED_PORT if seed else DEFAULT_PORT
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidUrl(
            f"{kind} URL {shown!r} has a bad port in {host!r}: expected an integer within 1-65535"
        )
    return host, int(port_text)


def parse_sentinel_url(url: str) -> SentinelUrl:
    """Parse a sentinel URL, or raise :class:`InvalidUrl` saying what to fix (the URL shown
    with its passwords redacted)."""
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidUrl(f"sentinel URL {shown!r} cannot be parsed: {exc}") from None
    if parts.scheme not in SENTINEL_SCHEMES:
        raise InvalidUrl(
            f"sentinel URL {shown!r} has scheme {parts.scheme!r}; use redis+sentinel:// or "
            "valkey+sentinel://"
        )
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at and "@" in url:
        raise InvalidUrl(
            f"sentinel URL {shown!r} cannot be read: percent-encode a '/', '?' or '#' in the "
            "user or password (urllib.parse.quote(password, safe=''))"
        )
    if not hosts:
        raise InvalidUrl(f"sentinel URL {shown!r} names no sentinel; e.g. {EXAMPLE}")
    sentinels = tuple(_host_port(h.strip(), shown) for h in hosts.split(","))
    user, colon, password = userinfo.partition(":")
    path = [p for p in parts.path.split("/")]
    if len(path) < 2 or not path[1]:
        raise InvalidUrl(
            f"sentinel URL {shown!r} has no service name: put the name the sentinels monitor "
            f"the primary under after the hosts, e.g. {EXAMPLE}"
        )
    if len(path) > 3 or (len(path) == 3 and not path[2].isdigit()):
        raise InvalidUrl(
            f"sentinel URL {shown!r}: after the service name only a database number may "
            f"follow (/service/0), e.g. {EXAMPLE}"
        )
    query = _query(parts.query, shown)
    return SentinelUrl(
        sentinels=sentinels,
        service=unquote(path[1]),
        db=int(path[2]) if len(path) == 3 else 0,
        username=unquote(user) or None if at else None,
        password=unquote(password) if at and colon else None,
        sentinel_username=query.get("sentinel_username"),
        sentinel_password=query.get("sentinel_password"),
    )


def _query(text: str, shown: str) -> dict[str, str]:
    try:
        raw = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError:
        raise InvalidUrl(f"sentinel URL {shown!r} has a query that cannot be parsed") from None
    unknown = sorted(set(raw) - set(QUERY_ARGS))
    if unknown:
        raise InvalidUrl(
            f"sentinel URL {shown!r} has unknown query argument(s) {', '.join(unknown)}; "
            f"a sentinel URL takes only {' and '.join(QUERY_ARGS)}"
        )
    repeated = sorted(k for k, v in raw.items() if len(v) > 1)
    if repeated:
        raise InvalidUrl(f"sentinel URL {shown!r} gives {', '.join(repeated)} more than once")
    return {k: v[0] for k, v in raw.items()}


def check_sentinel_url(url: str) -> str:
    """Return the URL with its scheme as ``redis+sentinel``, or raise :class:`InvalidUrl`
    saying what to fix; the message never shows a password."""
    parse_sentinel_url(url)
    if url.startswith("valkey+"):
        url = "redis+" + url[len("valkey+") :]
    return url


CLUSTER_SCHEMES = {
    "redis+cluster": "redis",
    "rediss+cluster": "rediss",
    "valkey+cluster": "redis",
    "valkeys+cluster": "rediss",
}
"""A cluster URL's schemes, each with the scheme of one of its nodes."""
SEED_PORT = 6379
CLUSTER_EXAMPLE = "redis+cluster://:password@10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000/"
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True, slots=True)
class ClusterUrl:
    """A parsed cluster URL (holds its password: keep it out of logs). ``node_url`` is the
    first seed's own ``redis://`` (``rediss://``) URL, with the user, password and query
    options every seed shares; ``seeds`` are every seed's ``(host, port)``, in order."""

    seeds: tuple[tuple[str, int], ...]
    node_url: str


def parse_cluster_url(url: str) -> ClusterUrl:
    """Parse ``redis+cluster://[user:password@]host[:port][,host[:port]...][/][?options]``
    (``rediss+cluster://`` with TLS; ``valkey+cluster://``, ``valkeys+cluster://``), or raise
    :class:`InvalidUrl` saying what to fix (the URL shown with its password redacted; the
    text of a bad port never). A seed's port defaults to 6379; a seed given twice counts once."""
    scheme = url.partition("://")[0]
    schemes = _SCHEME.findall(url)
    if len(schemes) > 1:  # the URL is not shown: a second user-info would not be masked
        known = (*URL_SCHEMES, *CLUSTER_SCHEMES, *SENTINEL_SCHEMES)
        named = ", ".join(f"{s}://" for s in schemes if s.lower() in known)
        raise InvalidUrl(
            f"a cluster URL names its scheme once, and this one names {named}: list the "
            f"seeds after it as host:port,host:port, e.g. {CLUSTER_EXAMPLE}"
        )
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidUrl(f"cluster URL {shown!r} cannot be parsed: {exc}") from None
    if scheme not in CLUSTER_SCHEMES:
        raise InvalidUrl(f"cluster URL {shown!r} has scheme {scheme!r}; use redis+cluster://")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "@" in url and not at:
        raise InvalidUrl(
            f"cluster URL {shown!r} cannot be read: percent-encode a '/', '?' or '#' in the "
            "user or password (urllib.parse.quote(password, safe=''))"
        )
    if not hosts:
        raise InvalidUrl(f"cluster URL {shown!r} names no seed node; e.g. {CLUSTER_EXAMPLE}")
    seeds = tuple(dict.fromkeys(_host_port(h.strip(), shown, seed=True) for h in hosts.split(",")))
    if parts.path not in ("", "/", "/0", "/0/"):  # its text may be a misplaced password
        raise InvalidUrl(
            f"cluster URL {shown!r}: after the seeds only / (or /0: a cluster has only "
            f"database 0) may follow, e.g. {CLUSTER_EXAMPLE}"
        )
    _check_query(parts, shown, cluster=True)
    host, port = seeds[0]
    node = f"[{host}]" if ":" in host else host
    query = f"?{parts.query}" if parts.query else ""
    login = f"{userinfo}@" if at else ""
    return ClusterUrl(seeds, f"{CLUSTER_SCHEMES[scheme]}://{login}{node}:{port}/0{query}")


def check_cluster_url(url: str) -> str:
    """Return the URL with its scheme as ``redis+cluster`` (``rediss+cluster`` with TLS), or
    raise :class:`InvalidUrl` saying what to fix; the message never shows a password."""
    parse_cluster_url(url)
    scheme, sep, rest = url.partition("://")
    return CLUSTER_SCHEMES[scheme] + "+cluster" + sep + rest
