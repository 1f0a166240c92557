"""Kafka and store failures as ONE line that names the cause and the setting to check.

Every command and ``run`` print these lines instead of a traceback (``--debug`` or
``DIGEST_STREAM_DEBUG=1`` shows it). One set of kinds for Kafka and the store: authentication,
authorization (with the resource), TLS (an untrusted certificate, plaintext against TLS and
TLS against plaintext), unreachable, timed out, server-side code a user may not load, and a
store that refuses calls for a while (``refusing``: the service waits). Kafka's lines are
written here (``kafka.py``); the store's by its backend (``StoreBackend.explain``: for Redis,
``store/redis/explain.py``), from the store's errors and their kind.
A failure of kind ``authentication``, ``authorization``, ``tls`` or ``library`` is a setting
to fix, not an outage to wait out: commands and the service's start stop on it.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from digest_stream.ops.failures.kafka import explain_kafka, kafka_detail
from digest_stream.ops.failures.types import (
    ACL_DOCS,
    FATAL_KINDS,
    Failure,
    FailureError,
    KafkaScope,
    Kind,
    causes,
)
from digest_stream.settings import Settings, env_name
from digest_stream.store import backend_error, backend_of, backend_raising
from digest_stream.store.backend import Explained
from digest_stream.store.errors import LibraryVersionMismatch

__all__ = [
    "ACL_DOCS",
    "FATAL_KINDS",
    "Failure",
    "FailureError",
    "KafkaScope",
    "Kind",
    "explain",
    "explain_kafka",
    "kafka_detail",
    "one_line",
    "outage_line",
]


def explain(
    exc: BaseException, settings: Settings | None = None, scope: KafkaScope | None = None
) -> Failure | None:
    """The failure behind an exception (its causes included), or None when it is none of ours."""
    for error in causes(exc):
        found: Failure | None = None
        if isinstance(error, FailureError):
            found = error.failure
        elif isinstance(error, KafkaException) and error.args:
            if isinstance(error.args[0], KafkaError):
                found = explain_kafka(error.args[0], settings, scope)
        elif isinstance(error, KafkaError):
            found = explain_kafka(error, settings, scope)
        elif isinstance(error, LibraryVersionMismatch):
            found = _failure(backend_of(settings).library_mismatch(error, settings, env_name))
        else:
            backend = backend_error(error)  # the store's, or its client's raw error
            if backend is not None:
                # The backend that raised it writes the line.
                explained = backend_raising(backend, settings).explain(
                    backend, exc, settings, env_name
                )
                found = None if explained is None else _failure(explained)
        if found is not None:
            return found
    return None


def _failure(explained: Explained) -> Failure:
    return Failure(explained.kind, explained.line)


def one_line(
    exc: BaseException, settings: Settings | None = None, scope: KafkaScope | None = None
) -> str:
    """The failure's line, or the exception's own first line when no mapping knows it."""
    found = explain(exc, settings, scope)
    if found is not None:
        return found.line
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def outage_line(exc: BaseException | None, settings: Settings | None = None) -> str:
    """What a running role logs while it waits for the store: a store that refuses calls for a
    while (for Redis: OOM, READONLY, BUSY, ...) named with what ends it; anything else as the
    backend's own text. A lost connection keeps its own text: mid-run it is an outage, and
    the start's hints (a TLS port? the URL?) would mislead."""
    found = explain(exc, settings) if exc is not None else None
    if found is not None and found.kind == "refusing":
        return found.line
    return backend_of(settings).outage(exc)
