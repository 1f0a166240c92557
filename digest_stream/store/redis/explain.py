"""The Redis store's failures as one line naming the cause and the setting to check (what
``ops.failures`` prints for a BackendError of this backend): which Redis refused, why, and which
of its refusals the service waits out."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from digest_stream.store.backend import Explained, SettingName
from digest_stream.store.errors import BackendError, LibraryVersionMismatch, causes
from digest_stream.store.redis import library
from digest_stream.store.redis.client import RedisSettings
from digest_stream.store.redis.errors import BACKEND, LOAD_COMMAND


@dataclass(frozen=True)
class _Names:
    """The env vars of the Redis settings the lines name."""

    url: str
    ca: str
    cert: str
    key: str
    load: str
    namespace: str

    @classmethod
    def of(cls, setting: SettingName) -> _Names:
        return cls(
            setting("redis_url"),
            setting("redis_ssl_ca_certs"),
            setting("redis_ssl_certfile"),
            setting("redis_ssl_keyfile"),
            setting("redis_load_library"),
            setting("namespace"),
        )


@dataclass(frozen=True)
class _Where:
    """The Redis the settings point at, for the lines (never the password)."""

    address: str
    user: str
    tls: bool

    @classmethod
    def of(cls, settings: RedisSettings | None, error: BackendError) -> _Where:
        if settings is None:
            return cls(error.address or error.backend, "default", False)
        try:
            parts = urlsplit(settings.redis_url)
            address = f"{parts.hostname}:{parts.port or 6379}"
            user = parts.username or "default"
        except ValueError:
            address, user = BACKEND, "default"
        return cls(address, user, settings.redis_url.startswith("rediss://"))


def explain(
    error: BackendError,
    top: BaseException,
    settings: RedisSettings | None,
    setting: SettingName,
) -> Explained | None:
    """The line for one of the Redis store's errors; None for a bug (kind ``error``)."""
    where, names = _Where.of(settings, error), _Names.of(setting)
    if error.kind == "authentication":
        return Explained(
            "authentication",
            f"Redis at {where.address} refused the credentials of user {where.user!r} (wrong "
            f"password, or the user is unknown or disabled): check the user and password in "
            f"{names.url}",
        )
    if error.kind in ("authorization", "library_missing"):
        return Explained("authorization", _permission(error, where, settings, names))
    if error.kind in ("tls", "unreachable", "timeout"):
        return _connection(error, top, where, names)
    refusing = _refusing(error.kind, names)
    if refusing is not None:
        return Explained("refusing", f"Redis at {where.address} {refusing} ({error.detail})")
    return None


def _refusing(kind: str, names: _Names) -> str | None:
    """What a Redis that refuses calls for a while is doing, and what ends it (the service
    waits): the kinds the store raises as StoreUnavailable while it answers."""
    return {
        "full": "is out of memory and refuses writes (OOM: maxmemory under noeviction): free "
        "memory or raise maxmemory; the service waits meanwhile",
        "read_only": f"is a read-only replica (READONLY): check that {names.url} names the "
        "primary, or wait for the failover to end",
        "busy": "is busy running a script (BUSY): it answers once the script ends",
        "starting": "is loading its data set (LOADING): it answers once loaded",
        "failing_over": "has lost its primary or its replicas (MASTERDOWN, NOREPLICAS): it "
        "answers once the failover ends",
        "moving": "says its cluster is down or moving slots (CLUSTERDOWN, TRYAGAIN): it "
        "answers once the cluster is OK",
    }.get(kind)


def _permission(
    error: BackendError, where: _Where, settings: RedisSettings | None, names: _Names
) -> str:
    command = error.command
    if error.kind == "library_missing":
        return (
            f"the Redis Functions library {library.NAME} {library.VERSION} is not loaded (or "
            f"differs) on {where.address} and user {where.user!r} may not load it (no "
            f"+{LOAD_COMMAND}): load it as an administrator (any digest-stream command run "
            f"once with an admin {names.url}), then run with {names.load}=false; or grant "
            f"+{LOAD_COMMAND}"
        )
    if command is not None:
        return (
            f"Redis user {where.user!r} may not run {command.upper()} on "
            f"{where.address} (NOPERM): grant +{command} as the README's ACL line "
            "(section Security) does"
        )
    if error.in_library:
        return (
            f"Redis user {where.user!r} may not run a command the Functions library calls on "
            f"{where.address}: grant the commands of the README's ACL line (section Security)"
        )
    namespace = settings.namespace if settings else "d"
    return (
        f"Redis user {where.user!r} may not access the keys of namespace {namespace} on "
        f"{where.address} (NOPERM): its key pattern must include ~{{{namespace}:* (or check "
        f"{names.namespace})"
    )


def _connection(error: BackendError, top: BaseException, where: _Where, names: _Names) -> Explained:
    chain = list(causes(top))
    text = str(error)
    ca, cert, key, url = names.ca, names.cert, names.key, names.url
    if any(isinstance(c, ssl.SSLCertVerificationError) for c in chain) or (
        "CERTIFICATE_VERIFY_FAILED" in text
    ):
        reason = text.rsplit("verify failed: ", maxsplit=1)[-1].split(" (_ssl", maxsplit=1)[0]
        return Explained(
            "tls",
            f"Redis at {where.address}: the server's TLS certificate is not trusted ({reason}): "
            f"set {ca} to the CA that signed it",
        )
    if any(isinstance(c, ssl.SSLError) for c in chain) or "[SSL" in text:
        return Explained(
            "tls",
            f"Redis TLS handshake with {where.address} failed ({error.detail}): check {ca}, "
            f"and {cert} / {key} when the server asks for a client certificate",
        )
    if where.tls and any(isinstance(c, FileNotFoundError | PermissionError) for c in chain):
        return Explained(
            "tls",
            f"Redis TLS files unreadable ({error.detail}): check {ca}, {cert} and {key}",
        )
    if not where.tls and "Connection reset by peer" in text:
        return Explained(
            "tls",
            f"Redis at {where.address} reset a plaintext connection: is this a TLS port? use "
            f"rediss:// in {url} (and {ca} for its CA)",
        )
    if where.tls and error.connecting:
        return Explained(
            "tls",
            f"Redis at {where.address} did not answer the TLS handshake: is it a plaintext "
            f"port? use redis:// in {url}, or check the address and the network",
        )
    if error.kind == "timeout":
        return Explained(
            "timeout",
            f"Redis at {where.address} did not answer in time ({error.detail}): check "
            f"{url} and the network",
        )
    return Explained(
        "unreachable",
        f"Redis unreachable at {where.address} ({error.detail}): check {url} and the network",
    )


def library_mismatch(
    error: LibraryVersionMismatch, settings: RedisSettings | None, setting: SettingName
) -> Explained:
    """The line for a Functions library that is missing or differs, with its fix."""
    # The store's own text speaks the Python API (load_library=True); this speaks settings.
    text = str(error).split(" (construct ")[0]
    if "an administrator must reload it" in text:
        return Explained("library", text)
    names = _Names.of(setting)
    if settings is not None and not settings.redis_load_library:
        fix = (
            f"load it as an administrator (any digest-stream command run once with an admin "
            f"{names.url}), or set {names.load}=true with a user granted +{LOAD_COMMAND}"
        )
    else:
        fix = f"check that the user in {names.url} is granted +{LOAD_COMMAND}"
    return Explained("library", f"{text}: {fix}")


def outage(error: BaseException | None) -> str:
    """A role's line while it waits for Redis, when no better one explains the error."""
    return f"Redis unreachable or refusing ({error if error is not None else '?'})"
