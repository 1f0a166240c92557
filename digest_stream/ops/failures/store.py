"""The store's errors (their kind, the refused command, the address) as one line naming the
cause and the setting to check."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from digest_stream.ops.failures.types import Failure, causes
from digest_stream.settings import Settings, env_name
from digest_stream.store import SERVER_CODE
from digest_stream.store.errors import BackendError, LibraryVersionMismatch

_REDIS_URL = env_name("redis_url")
_CA = env_name("redis_ssl_ca_certs")
_CERT = env_name("redis_ssl_certfile")
_KEY = env_name("redis_ssl_keyfile")
_LOAD = env_name("redis_load_library")


@dataclass(frozen=True)
class _Where:
    """The Redis the settings point at, for the lines (never the password)."""

    address: str
    user: str
    tls: bool

    @classmethod
    def of(cls, settings: Settings | None, error: BackendError) -> _Where:
        if settings is None:
            return cls(error.address or error.backend, "default", False)
        try:
            parts = urlsplit(settings.redis_url)
            address = f"{parts.hostname}:{parts.port or 6379}"
            user = parts.username or "default"
        except ValueError:
            address, user = "Redis", "default"
        return cls(address, user, settings.redis_url.startswith("rediss://"))


def explain_store(
    error: BackendError, top: BaseException, settings: Settings | None
) -> Failure | None:
    where = _Where.of(settings, error)
    if error.kind == "authentication":
        return Failure(
            "authentication",
            f"Redis at {where.address} refused the credentials of user {where.user!r} (wrong "
            f"password, or the user is unknown or disabled): check the user and password in "
            f"{_REDIS_URL}",
        )
    if error.kind == "authorization":
        return Failure("authorization", _redis_permission(error, where, settings))
    if error.kind in ("tls", "unreachable", "timeout"):
        return _redis_connection(error, top, where)
    refusing = _REFUSING.get(error.kind)
    if refusing is not None:
        return Failure("refusing", f"Redis at {where.address} {refusing} ({error.detail})")
    return None


#: What a Redis that refuses calls for a while is doing, and what ends it (the service waits).
_REFUSING = {
    "oom": "is out of memory and refuses writes (OOM: maxmemory under noeviction): free "
    "memory or raise maxmemory; the service waits meanwhile",
    "readonly": f"is a read-only replica (READONLY): check that {_REDIS_URL} names the "
    "primary, or wait for the failover to end",
    "busy": "is busy running a script (BUSY): it answers once the script ends",
    "loading": "is loading its data set (LOADING): it answers once loaded",
    "failover": "has lost its primary or its replicas (MASTERDOWN, NOREPLICAS): it answers "
    "once the failover ends",
    "cluster": "says its cluster is down or moving slots (CLUSTERDOWN, TRYAGAIN): it answers "
    "once the cluster is OK",
}


def _redis_permission(error: BackendError, where: _Where, settings: Settings | None) -> str:
    command = error.command
    if command == "function|load":
        name, version = SERVER_CODE
        return (
            f"the Redis Functions library {name} {version} is not loaded (or "
            f"differs) on {where.address} and user {where.user!r} may not load it (no "
            f"+function|load): load it as an administrator (any digest-stream command run once "
            f"with an admin {_REDIS_URL}), then run with {_LOAD}=false; or grant +function|load"
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
        f"{env_name('namespace')})"
    )


def _redis_connection(error: BackendError, top: BaseException, where: _Where) -> Failure:
    chain = list(causes(top))
    text = str(error)
    if any(isinstance(c, ssl.SSLCertVerificationError) for c in chain) or (
        "CERTIFICATE_VERIFY_FAILED" in text
    ):
        reason = text.rsplit("verify failed: ", maxsplit=1)[-1].split(" (_ssl", maxsplit=1)[0]
        return Failure(
            "tls",
            f"Redis at {where.address}: the server's TLS certificate is not trusted ({reason}): "
            f"set {_CA} to the CA that signed it",
        )
    if any(isinstance(c, ssl.SSLError) for c in chain) or "[SSL" in text:
        return Failure(
            "tls",
            f"Redis TLS handshake with {where.address} failed ({error.detail}): check {_CA}, "
            f"and {_CERT} / {_KEY} when the server asks for a client certificate",
        )
    if where.tls and any(isinstance(c, FileNotFoundError | PermissionError) for c in chain):
        return Failure(
            "tls",
            f"Redis TLS files unreadable ({error.detail}): check {_CA}, {_CERT} and {_KEY}",
        )
    if not where.tls and "Connection reset by peer" in text:
        return Failure(
            "tls",
            f"Redis at {where.address} reset a plaintext connection: is this a TLS port? use "
            f"rediss:// in {_REDIS_URL} (and {_CA} for its CA)",
        )
    if where.tls and error.connecting:
        return Failure(
            "tls",
            f"Redis at {where.address} did not answer the TLS handshake: is it a plaintext "
            f"port? use redis:// in {_REDIS_URL}, or check the address and the network",
        )
    if error.kind == "timeout":
        return Failure(
            "timeout",
            f"Redis at {where.address} did not answer in time ({error.detail}): check "
            f"{_REDIS_URL} and the network",
        )
    return Failure(
        "unreachable",
        f"Redis unreachable at {where.address} ({error.detail}): check {_REDIS_URL} and the "
        "network",
    )


def library_mismatch(error: LibraryVersionMismatch, settings: Settings | None) -> Failure:
    # The store's own text speaks the Python API (load_library=True); this speaks settings.
    text = str(error).split(" (construct ")[0]
    if "an administrator must reload it" in text:
        return Failure("library", text)
    if settings is not None and not settings.redis_load_library:
        fix = (
            f"load it as an administrator (any digest-stream command run once with an admin "
            f"{_REDIS_URL}), or set {_LOAD}=true with a user granted +function|load"
        )
    else:
        fix = f"check that the user in {_REDIS_URL} is granted +function|load"
    return Failure("library", f"{text}: {fix}")
