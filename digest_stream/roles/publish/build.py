"""One digest, built: from its schedule entry, the opened digest and the timeline's policy to
the message values that publish it.

Pure: no Kafka, no Redis, no clock (``now`` is given). Two ways give the same bytes: the
common digest's stored event bytes become its records as they are (no models, one encode
pass), and everything else goes through the models (``collapse_by``, records that cannot be
read, a digest too large for one message, or hooks that want the whole Digest).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from digest_stream.roles.publish.compose import Entry, compose, next_delivery_at, reason
from digest_stream.roles.publish.parts import encoded_parts, part_budget
from digest_stream.store.base import OpenDigest
from digest_stream.store.policy import TimelinePolicy
from digest_stream.wire import codec, envelope
from digest_stream.wire.digest_bytes import whole_digest
from digest_stream.wire.event_head import decode_event_head
from digest_stream.wire.models import INT_MAX, Digest, Record

Headers = list[tuple[str, bytes]]


@dataclass(slots=True)  # not frozen: one per digest, and a frozen __init__ costs twice
class Built:
    """What one opened digest publishes: nothing (``values`` empty) or its parts."""

    values: list[bytes]  # each part's message value, in part order
    headers: Headers = field(default_factory=list)  # carried event headers, on every part
    whole: Digest | None = None  # the digest before splitting, when built through the models
    # Stored records that could not be read (id, why): lost, not fatal; the caller logs them.
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def build(
    entry: Entry,
    digest: OpenDigest,
    policy: TimelinePolicy,
    *,
    now: float,
    max_bytes: int,
    whole: bool = False,
    checked: bool = False,
) -> Built:
    """The messages that publish ``digest`` (opened for ``entry``) under ``policy``, each
    within ``max_bytes`` next to its key and headers; ``whole``: always build the Digest
    model too (hooks see it). ``now`` is when the timeline is closed (next_delivery_at).
    ``checked``: the records' bytes are the ingest's, checked moments ago (the leading
    edge), not read back from Redis: their timestamps are taken as stored."""
    if not whole and policy.collapse_by is None:
        stored = _as_stored(entry, digest, policy, now, max_bytes, checked)
        if stored is not None:
            return stored
    return _through_models(entry, digest, policy, now, max_bytes)


def _as_stored(
    entry: Entry,
    digest: OpenDigest,
    policy: TimelinePolicy,
    now: float,
    max_bytes: int,
    checked: bool,
) -> Built | None:
    """The common digest in one part, its stored event bytes as its records; None when it
    has no readable record or needs splitting (then the models)."""
    events: list[bytes] = []
    timestamps: list[int] = []
    carried: list[list[tuple[str, bytes]]] = []
    for stored in digest.records:
        try:
            headers, event = envelope.unwrap(stored.payload)
            if checked:  # the event's milliseconds, as the ingest divided them
                timestamps.append(round(stored.timestamp * 1000))
            else:
                timestamps.append(decode_event_head(event).timestamp)  # and checks the bytes
        except ValueError:
            return None  # the models path says which and counts it lost
        events.append(event)
        if headers:
            carried.append(headers)
    if not events or digest.dropped > INT_MAX:
        return None  # nothing to publish, or a count the models path refuses loudly
    headers = envelope.digest_headers(carried) if carried else []
    value = whole_digest(
        digest.id,
        digest.timeline,
        events,
        timestamps,
        digest.dropped,
        int(digest.opened_at * 1000),
        reason=reason(entry, digest),
        total=len(digest.records) + digest.dropped,
        next_delivery_at=next_delivery_at(policy, now),
    )
    if len(value) > part_budget(digest.timeline, headers, max_bytes):
        return None  # split into parts by the models path
    return Built([value], headers)


def _through_models(
    entry: Entry, digest: OpenDigest, policy: TimelinePolicy, now: float, max_bytes: int
) -> Built:
    """The digest through the models: collapsed, split, unreadable records left out."""
    records: list[Record] = []
    carried: list[list[tuple[str, bytes]]] = []
    unreadable: list[tuple[str, str]] = []
    for stored in digest.records:
        try:
            headers, event = envelope.unwrap(stored.payload)
            records.append(codec.decode_record(event))
            if headers:
                carried.append(headers)
        except ValueError as exc:  # codec.DecodeError or a damaged header envelope
            # Stored bytes were valid when ingested; corrupt ones count as lost, not fatal.
            unreadable.append((stored.id, str(exc)))
    if not records:
        return Built([], unreadable=unreadable)
    dropped = digest.dropped + (len(digest.records) - len(records))
    digest_model = compose(entry, digest, records, dropped, policy, now)
    headers = envelope.digest_headers(carried) if carried else []
    values, headers = encoded_parts(digest_model, headers, max_bytes)
    return Built(values, headers, digest_model, unreadable)
