"""Kafka and Redis failures as ONE line that names the cause and the setting to check.

Every command and ``run`` print these lines instead of a traceback (``--debug`` or
``DIGEST_STREAM_DEBUG=1`` shows it). One table for both backends: authentication,
authorization (with the resource), TLS (an untrusted certificate, plaintext against TLS and
TLS against plaintext), unreachable, timed out, the Functions library a user may not load, and
a Redis that refuses calls for a while (OOM, READONLY, BUSY, LOADING, a failover, a cluster
moving slots), from the store's errors and their kind.
A failure of kind ``authentication``, ``authorization``, ``tls`` or ``library`` is a setting
to fix, not an outage to wait out: commands and the service's start stop on it.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from digest_stream.ops.failures.kafka import explain_kafka, kafka_detail
from digest_stream.ops.failures.store import explain_store, library_mismatch
from digest_stream.ops.failures.types import (
    ACL_DOCS,
    FATAL_KINDS,
    Failure,
    FailureError,
    KafkaScope,
    Kind,
    causes,
)
from digest_stream.settings import Settings
from digest_stream.store import backend_error
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
            found = library_mismatch(error, settings)
        else:
            backend = backend_error(error)  # the store's, or its client's raw error
            if backend is not None:
                found = explain_store(backend, exc, settings)
        if found is not None:
            return found
    return None


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
    """What a running role logs while it waits for Redis: a Redis that refuses calls for a
    while (OOM, READONLY, BUSY, ...) named with what ends it; anything else as Redis's own
    text. A lost connection keeps its own text: mid-run it is an outage, and the start's
    hints (a TLS port? the URL?) would mislead."""
    found = explain(exc, settings) if exc is not None else None
    if found is not None and found.kind == "refusing":
        return found.line
    return f"Redis unreachable or refusing ({exc if exc is not None else '?'})"
