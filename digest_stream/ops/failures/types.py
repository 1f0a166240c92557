"""The failure types every mapping shares: a failure's kind and line, and what a Kafka call
was about."""

from __future__ import annotations

from dataclasses import dataclass

from digest_stream.store.backend import FailureKind
from digest_stream.store.errors import causes

__all__ = ["ACL_DOCS", "FATAL_KINDS", "Failure", "FailureError", "KafkaScope", "Kind", "causes"]

#: What a failure means (the same kinds for Kafka and for the store's backends).
Kind = FailureKind

#: Kinds that waiting does not cure: a command exits on them, the service refuses to start.
FATAL_KINDS: frozenset[Kind] = frozenset({"authentication", "authorization", "tls", "library"})

#: Where the Kafka ACLs each role and command needs are listed.
ACL_DOCS = "docs/operations.md, Secured clusters"


@dataclass(frozen=True)
class Failure:
    """What went wrong, as one line naming the cause and the setting to check."""

    kind: Kind
    line: str

    @property
    def fatal(self) -> bool:
        """A setting to fix, not an outage: stop instead of retrying."""
        return self.kind in FATAL_KINDS


class FailureError(Exception):
    """A failure found by a check (preflight, a consumer's error): its line is the message."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.line)
        self.failure = failure


@dataclass(frozen=True)
class KafkaScope:
    """What a Kafka call was about, to name the resource a refusal concerns."""

    topic: str | None = None
    group: str | None = None
    #: The setting or flag that names the group (the service's, or `tail --group`).
    group_setting: str | None = None
