"""Composing the Digest of an open digest under its timeline's policy: collapsed records, and
why it went out now, how many records it stood for, when the next one can come."""

from __future__ import annotations

from digest_stream.store.base import OpenDigest
from digest_stream.store.policy import TimelinePolicy
from digest_stream.wire.formats import DigestHead
from digest_stream.wire.models import Digest, DigestReason, Record, ScheduleReason


def collapse(records: list[Record], attribute: str) -> list[Record]:
    """Records (newest first) sharing a value of ``attribute`` become one: the newest of them,
    with ``count`` (occurrences) and ``first_seen`` (the oldest one's time). Records without
    the attribute stay as they are; the order stays newest first."""
    # One pass gathers each value's newest record, count and oldest time; each collapsed
    # record is then copied once (not once per occurrence).
    groups: dict[str, list[int]] = {}  # value -> [index in out, count, oldest time]
    out: list[Record] = []
    for record in records:
        value = record.attributes.get(attribute)
        oldest = record.timestamp if record.first_seen is None else record.first_seen
        group = None if value is None else groups.get(value)
        if group is None:
            if value is not None:
                groups[value] = [len(out), record.count, oldest]
            out.append(record)
        else:
            group[1] += record.count
            group[2] = min(group[2], oldest)
    for at, count, oldest in groups.values():
        kept = out[at]
        if count != kept.count:
            # model_copy: both fields are in range by construction.
            out[at] = kept.model_copy(update={"count": count, "first_seen": oldest})
    return out


#: DigestReason by its value: a dict lookup per digest instead of the enum's own call.
_REASONS = {member.value: member for member in DigestReason}


def reason(scheduled: ScheduleReason, digest: OpenDigest) -> DigestReason:
    """RECOVERED for a re-announced delivery (``scheduled``: its schedule entry's reason),
    else why the store made the timeline due."""
    if scheduled is ScheduleReason.RECOVERED:  # (an enum's == is a method call)
        return DigestReason.RECOVERED
    return _REASONS.get(digest.reason) or DigestReason(digest.reason)


def head(scheduled: ScheduleReason, digest: OpenDigest, now: float) -> DigestHead:
    """The whole digest's own fields (a format's fast path lays its records out itself);
    ``scheduled``: its schedule entry's reason; ``next_delivery_at`` is the store's due rule
    that came with it (store.due), evaluated at ``now``, its close."""
    return head_of(digest, reason(scheduled, digest), digest.due_rule.next_delivery_at(now))


def head_of(digest: OpenDigest, why: DigestReason, next_delivery_at: int) -> DigestHead:
    """``head`` with its reason and ``next_delivery_at`` worked out already (the leading edge
    shares both across an add's digests)."""
    return (
        digest.id,
        digest.timeline,
        digest.dropped,
        int(digest.opened_at * 1000),
        why,
        # what the digest took from the timeline plus what capacity trimmed before it
        len(digest.records) + digest.dropped,
        next_delivery_at,
    )


def compose(
    scheduled: ScheduleReason,
    digest: OpenDigest,
    records: list[Record],
    dropped: int,
    policy: TimelinePolicy,
    now: float,
) -> Digest:
    """The whole digest (before any split) of ``records`` decoded from ``digest``
    (``scheduled``: its schedule entry's reason)."""
    shown = records if policy.collapse_by is None else collapse(records, policy.collapse_by)
    digest_id, timeline, _, opened_at, why, total, next_at = head(scheduled, digest, now)
    return Digest.build(
        id=digest_id,
        timeline=timeline,
        records=shown,
        opened_at=opened_at,
        dropped=dropped,
        reason=why,
        total=total,
        next_delivery_at=next_at,
    )
