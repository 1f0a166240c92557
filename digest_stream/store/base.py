"""The store contract: value types and the protocol both stores implement.

Its errors are in ``store.errors``, timeline policies in ``store.policy``, the limits it
shares with the Lua library in ``store.limits``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from digest_stream.store.due import NextDue
from digest_stream.store.errors import InvalidState
from digest_stream.store.limits import CAUSES, DIGEST_ID_LENGTH, OPEN_NONCE_LENGTH
from digest_stream.store.policy import TimelinePolicy
from digest_stream.vocabulary import Control, State

#: Why a timeline is (or was) due: the ``reason`` of its next digest, as the store knows it.
#: The delivery role adds RECOVERED (a digest re-announced by maintenance or a take-over).
REASONS = tuple(CAUSES)

#: Control operations that travel with a timeline's events (``NewRecord.control``): the
#: members of vocabulary.Control, whose order numbers ds_add's packed controls.
FLUSH = Control.FLUSH
CANCEL = Control.CANCEL
CANCEL_ALL = Control.CANCEL_ALL
CONTROLS = tuple(Control)

#: A store's namespace (every key and name of one deployment): letters, digits, "_", "." and
#: "-" only, so it fits inside a Redis hash tag (no braces, colons or spaces) and any other
#: backend's key scheme.
NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]+$")
#: Digest ids are DIGEST_ID_LENGTH lowercase hex characters (a uuid4 hex), minted by the caller.
DIGEST_ID_PATTERN = re.compile(rf"^[0-9a-f]{{{DIGEST_ID_LENGTH}}}$")
#: An add's leading-edge nonce: its digest ids are the nonce and its number in hex digits.
OPEN_NONCE_PATTERN = re.compile(rf"^[0-9a-f]{{{OPEN_NONCE_LENGTH}}}$")
#: Hex digits of a leading digest's number after its nonce.
_LEADING_DIGITS = DIGEST_ID_LENGTH - OPEN_NONCE_LENGTH


def new_nonce() -> str:
    """A fresh call nonce (OPEN_NONCE_LENGTH lowercase hex characters): an add's leading
    edge, a schedule call's."""
    return os.urandom(OPEN_NONCE_LENGTH // 2).hex()


def leading_id(nonce: str, number: int) -> str:
    """The id of the digest an add with ``nonce`` opened for its ``number``-th timeline (from 1,
    in the order its records name them)."""
    return f"{nonce}{number:0{_LEADING_DIGITS}x}"


class NewRecord(NamedTuple):
    """One record to add: its Kafka offset fences replays of the partition.

    With ``control`` set (one of CONTROLS) it is no record but a control operation on its
    timeline, applied in offset order with the records around it: FLUSH, CANCEL (of the
    pending record ``id``) or CANCEL_ALL; ``id`` carries its argument
    (``vocabulary.ControlSpec.carried``: a name as it is, a time as its text; none: any
    name), its payload is ignored.

    ``urgent``: its timeline's ``urgent_when`` calls the event urgent (the ingest decides):
    its timeline is due at once, never sooner than FLUSH_AT_FLOOR after its last digest.

    A named tuple, not a frozen dataclass: the ingest builds one per event, and a frozen
    dataclass's __init__ (one object.__setattr__ per field) costs three times as much
    (0.66 against 0.23 us here), a quarter of the message check.
    """

    timeline: str
    id: str
    timestamp: float  # event time, seconds since the epoch
    payload: bytes
    offset: int
    control: str | None = None
    urgent: bool = False


@dataclass(frozen=True, slots=True)
class AddResult:
    """What one batched add did."""

    ready: list[str]  # timelines that became READY at once (absent -> READY)
    added: int  # records written
    skipped: int  # records at or below the applied offset (replays)
    dropped: int  # records trimmed by capacity in this call
    fence_before: int | None  # applied offset found before the call; None = no fence
    fence_after: int | None  # applied offset after the call
    #: The topic id the fence found belongs to (None: not recorded). When it is not the
    #: caller's ``topic_id``, nothing was applied: the offsets are another topic's.
    fence_topic: str | None = None
    cancelled: int = 0  # pending records removed by cancel controls in this call
    #: The leading edge (asked with ``open_nonce``): digests this call opened, one per
    #: timeline it made READY from absent, in that order; those are not in ``ready``.
    opened: list[OpenDigest] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Fence:
    """A partition's fence: the last applied offset and the topic incarnation it belongs to."""

    offset: int | None  # None: nothing applied (absent, or reset for a new topic)
    topic_id: str | None = None  # None: not recorded (written before topic ids, or unknown)


@dataclass(frozen=True, slots=True)
class DueTimeline:
    """A timeline moved to READY by schedule or maintenance."""

    timeline: str
    due: float


#: Timelines one schedule or maintenance call moves at most, unless told otherwise: a
#: backlog (150,000 READY timelines after a delivery outage) is drained in slices, so no
#: single call, reply or burst of schedule entries grows with it.
DEFAULT_SLICE = 1_000


class DueBatch(list[DueTimeline]):
    """One slice of timelines moved by schedule or maintenance, in order (a list, so
    callers that only iterate keep working); ``more``: further ones remain for the next
    call."""

    def __init__(self, timelines: Iterable[DueTimeline] = (), *, more: bool = False) -> None:
        super().__init__(timelines)
        self.more = more

    def __repr__(self) -> str:
        return f"DueBatch({list.__repr__(self)}, more={self.more})"


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__,
# and the leading edge makes one StoredRecord and one OpenDigest per new timeline (3x the
# time; NewRecord below is a named tuple for the same reason).
@dataclass(slots=True)
class StoredRecord:
    """A record as it comes back in a digest."""

    id: str
    timestamp: float
    payload: bytes


def age_key(record: StoredRecord) -> tuple[float, bytes]:
    """Oldest first by timestamp, ties by id bytes: the order of the Lua code."""
    return (record.timestamp, record.id.encode("utf-8"))


@dataclass(slots=True)
class OpenDigest:
    """An open digest: stable id, records newest first, and what it lost."""

    id: str
    timeline: str
    records: list[StoredRecord]
    dropped: int  # capacity trimming + missing payloads
    opened_at: float
    #: The timeline was scheduled but its earlier records had expired (TTL) or been evicted
    #: before this digest: an unknown number of them is lost. Reported again on a reopen.
    expired: bool = False
    #: Why the timeline became due (one of REASONS), kept with the digest for its reopen.
    reason: str = "IMMEDIATE"
    #: When the timeline is due again once this digest closes: the store's rule, attached by
    #: every open (store.due); the digest's next_delivery_at is read from it.
    next_due: NextDue | None = None

    @property
    def due_rule(self) -> NextDue:
        """``next_due``, which every store's open attaches (a ValueError if it is missing)."""
        rule = self.next_due
        if rule is None:
            raise ValueError(f"digest {self.id} of {self.timeline} came without its due rule")
        return rule

    @property
    def policy(self) -> TimelinePolicy:
        """Its timeline's policy, as the store resolved it for the open (the one its due rule
        applies): what the digest is published by, handed to publish with it."""
        return self.due_rule.policy


@dataclass(frozen=True, slots=True)
class TimelineInfo:
    """Read-only view of one timeline."""

    timeline: str
    state: State
    due: float | None
    last_delivery: float | None
    pending: int  # records waiting for the next digest
    open_digest: str | None
    open_records: int
    dropped: int  # dropped since the last digest was opened
    #: Why it is due (one of REASONS); None when absent.
    reason: str | None = None
    #: Its snooze's end (nothing goes out before it), None: not snoozed. As stored: one that
    #: has ended may be shown until the store next reads it (compare with the clock).
    snoozed_until: float | None = None


def reason_of(cause: str | None, last_delivery: float | None) -> str:
    """The reason a timeline is due: the one recorded, else IMMEDIATE before its first
    delivery and COOLDOWN after one (what a timeline written before reasons existed meant)."""
    if cause is not None:
        return cause
    return "IMMEDIATE" if last_delivery is None else "COOLDOWN"


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """Read-only counts for one input partition."""

    partition: int
    waiting: int
    ready: int
    oldest_due: float | None  # smallest due time among WAITING timelines
    applied_offset: int | None
    extra: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the store runs the server-side code this code expects, on every node.

    ``versions``: the version each node runs (None: not loaded), by node name; empty for a
    store with no server-side code (the model), which is always ready once it answers.
    """

    expected: str
    versions: dict[str, str | None] = field(default_factory=dict)

    @property
    def wrong(self) -> dict[str, str]:
        """The nodes that run another version (or none), with what they run."""
        return {node: found or "absent" for node, found in self.versions.items()
                if found != self.expected}  # fmt: skip


#: (partition, timeline, digest id): one digest to open or close in a batch.
DigestTarget = tuple[int, str, str]


class DigestStore(Protocol):
    """Timelines and their schedule, scoped by input partition; every call is atomic."""

    #: Its name in the lines an operator reads ("Redis lost writes ..."): the backend's label.
    label: str

    def add(
        self,
        partition: int,
        records: Sequence[NewRecord],
        now: float,
        *,
        expected_fence: int | None = None,
        through_offset: int | None = None,
        topic_id: str | None = None,
        open_nonce: str | None = None,
    ) -> AddResult:
        """Store a batch of records of one partition, fenced by offset.

        ``expected_fence`` is the fence the caller left last time: when the stored fence is
        behind it or gone (Redis lost writes), nothing is applied and the result reports the
        fence found (``added == skipped == dropped == 0``) so the caller can replay.
        ``through_offset`` is the batch's last Kafka offset (>= every record's offset): the
        fence advances to it even for records that were never handed to the store.
        ``topic_id`` is the id of the topic the records were read from, written with the
        fence: a fence of another topic applies nothing and is reported (``fence_topic``);
        a fence without one takes it. None: not known, nothing is checked.
        ``open_nonce`` (OPEN_NONCE_PATTERN) asks for the leading edge: every timeline the
        call makes READY from nothing stored gets its digest in the same call, with id
        ``open_nonce`` + its number in the call (8 hex digits, from 1), returned in
        ``opened`` instead of ``ready``: the timeline is READY and that digest open, exactly
        as ``open`` leaves them, so the caller publishes it and ``close``s it once the broker
        acknowledged it (or leaves it for an announcement to reopen). A batch holding
        controls, or a timeline its capacity would trim, is announced instead.
        """
        ...

    def schedule(
        self, partition: int, now: float, *, limit: int = DEFAULT_SLICE, nonce: str | None = None
    ) -> DueBatch:
        """Move up to ``limit`` WAITING timelines due at or before ``now`` (earliest due
        first, ties by name) to READY and return them; ``.more`` when more are due.

        ``nonce`` (OPEN_NONCE_PATTERN) names the call: the partition's last call that moved
        something is remembered with it (SCHEDULE_REPLY_TTL in Redis), and a call with the
        same nonce (a re-send of that call, whose reply was lost) returns that call's reply
        again and moves nothing. RedisStore gives each call a fresh one when none is given.
        """
        ...

    def maintenance(
        self, partition: int, deadline: float, now: float, *, limit: int = DEFAULT_SLICE
    ) -> DueBatch:
        """Move up to ``limit`` READY timelines scheduled before ``deadline`` (oldest first)
        back to WAITING and return them; ``.more`` when more remain. Snoozes that ended by
        ``now`` are removed, and snoozed timelines' state kept until their snooze's end."""
        ...

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        ...

    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """Close that digest; False when the id is unknown or already closed."""
        ...

    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """open() for each target, in order; a timeline that is not READY gives its error.

        Each open is atomic on its own, the batch is not: it saves round trips, not races.
        """
        ...

    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close() for each target, in order (each atomic on its own)."""
        ...

    def close_leading(self, nonce: str, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close_many() for digests one add led (``nonce``: its ``open_nonce``), all of one
        partition, once the broker acknowledged them; the add's other digests (whose publish
        failed) stay open. One call: a backend may close them all in one write."""
        ...

    def delete(self, partition: int, timeline: str) -> bool:
        """Remove the timeline and everything it owns; False when it did not exist."""
        ...

    def inspect(self, partition: int, timeline: str) -> TimelineInfo:
        """Describe one timeline."""
        ...

    def stats(self, partition: int) -> PartitionStats:
        """Count WAITING and READY timelines of a partition."""
        ...

    def applied_offset(self, partition: int) -> int | None:
        """The partition's fence: last applied offset, or None when absent."""
        ...

    def fence(self, partition: int) -> Fence:
        """The partition's fence with the topic id it belongs to."""
        ...

    def set_applied_offset(
        self, partition: int, offset: int | None, *, topic_id: str | None = None
    ) -> None:
        """Write exactly this fence (a new topic, admin replays); both None remove it."""
        ...

    def server_time(self) -> float | None:
        """The store's own clock (seconds since the epoch), which due times are compared
        with by every host; None when it keeps none (the model)."""
        ...

    def readiness(self) -> Readiness:
        """Ask the store whether it answers and runs the expected server-side code (raises
        the store's errors when it cannot be asked)."""
        ...

    def disconnect(self) -> None:
        """Release the store's connections (a later call connects again)."""
        ...
