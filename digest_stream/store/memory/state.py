"""The reference model's state: a partition's fence, schedule, timelines and open digests,
with the lookups every operation shares."""

from __future__ import annotations

from dataclasses import dataclass, field

from digest_stream.store.base import DueBatch, OpenDigest, StoredRecord, TimelineInfo, reason_of
from digest_stream.store.due import NextDue
from digest_stream.vocabulary import State


def score_key(item: tuple[str, float]) -> tuple[float, bytes]:
    """Zset order: score, then member bytes."""
    return (item[1], item[0].encode("utf-8"))


@dataclass
class TimelineState:
    """A timeline's pending records and meta."""

    records: dict[str, StoredRecord] = field(default_factory=dict)
    dropped: int = 0  # trimmed since the last digest was opened
    last_delivery: float | None = None
    expired: bool = False  # earlier records of this still scheduled timeline expired
    behind_open: bool = False  # started while a digest was open: its records wait behind it
    cause: str | None = None  # why it is due (a REASON), when recorded


@dataclass
class DigestState:
    """An open digest."""

    id: str
    opened_at: float
    dropped: int
    records: list[StoredRecord]  # newest first
    last_delivery: float | None
    expired: bool
    reason: str

    def opened(self, timeline: str, rule: NextDue) -> OpenDigest:
        """This digest as an open returns it, with its timeline's due rule."""
        return OpenDigest(
            self.id,
            timeline,
            list(self.records),
            self.dropped,
            self.opened_at,
            self.expired,
            self.reason,
            rule,
        )


@dataclass
class PartitionState:
    """One input partition: fence, schedule, timelines, open digests."""

    fence: int | None = None
    fence_topic: str | None = None
    waiting: dict[str, float] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)
    timelines: dict[str, TimelineState] = field(default_factory=dict)
    digests: dict[str, DigestState] = field(default_factory=dict)
    #: The last schedule call with a nonce that moved something: its nonce and reply.
    last_schedule: tuple[str, DueBatch] | None = None
    #: The open nonces of the adds that led a digest (another add may not take one again).
    led_nonces: set[str] = field(default_factory=set)
    #: Each snoozed timeline's snooze's end (the Lua's T:z; one that ended is removed where
    #: it is read, as there).
    snoozes: dict[str, float] = field(default_factory=dict)
    #: The snoozed timelines whose next move to READY an urgent record passes (the Lua's
    #: " u" on the T:z entry: snoozes.let_through).
    snooze_passes: set[str] = field(default_factory=set)

    def snooze_end(self, name: str, now: float) -> float | None:
        """Until when the timeline is snoozed at ``now``, or None (an ended one removed)."""
        ends = self.snoozes.get(name)
        if ends is not None and ends <= now:
            self.forget_snooze(name)
            return None
        return ends

    def snooze_holds(self, name: str, now: float) -> float | None:
        """The end of the snooze that holds the timeline's move to READY at ``now``, or None:
        no snooze, or an urgent record passes it (once; the Lua's snoozes.hold_due)."""
        ends = self.snooze_end(name, now)
        if ends is not None and name in self.snooze_passes:
            self.snooze_passes.discard(name)
            return None
        return ends

    def forget_snooze(self, name: str) -> float | None:
        """The timeline's snooze removed, an urgent record's pass with it; its end, or None."""
        self.snooze_passes.discard(name)
        return self.snoozes.pop(name, None)

    def cooling(self, name: str) -> TimelineState | None:
        """The timeline's meta when it cools down: a meta alone (a close left nothing
        pending) in no set, with no digest open; None otherwise."""
        timeline = self.timelines.get(name)
        if (
            timeline is None
            or timeline.records
            or timeline.last_delivery is None
            or name in self.ready
            or name in self.waiting
            or name in self.digests
        ):
            return None
        return timeline

    def last_delivery(self, name: str) -> float | None:
        """When the timeline's last digest was closed (its records' or its digest's meta)."""
        timeline = self.timelines.get(name)
        if timeline is not None and timeline.last_delivery is not None:
            return timeline.last_delivery
        digest = self.digests.get(name)
        return digest.last_delivery if digest is not None else None

    def info(self, timeline: str) -> TimelineInfo:
        """What ds_inspect answers of the timeline: a cooling one's due left to the caller
        (its policy's cool-down after its last delivery)."""
        due: float | None = None
        if timeline in self.ready:
            status, due = State.READY, self.ready[timeline]
        elif timeline in self.waiting:
            status, due = State.WAITING, self.waiting[timeline]
        else:
            status = State.ABSENT if self.cooling(timeline) is None else State.COOLING
        pending = self.timelines.get(timeline)
        digest = self.digests.get(timeline)
        last_delivery = self.last_delivery(timeline)
        cause = (pending.cause if pending is not None else None) or (
            digest.reason if digest is not None else None
        )
        return TimelineInfo(
            timeline=timeline,
            state=status,
            due=due,
            last_delivery=last_delivery,
            pending=len(pending.records) if pending is not None else 0,
            open_digest=digest.id if digest is not None else None,
            open_records=len(digest.records) if digest is not None else 0,
            dropped=pending.dropped if pending is not None else 0,
            reason=None if status is State.ABSENT else reason_of(cause, last_delivery),
            snoozed_until=self.snoozes.get(timeline),
        )
