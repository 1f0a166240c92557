"""One digest, built: from its schedule entry, the opened digest and its timeline's policy
(the caller hands it: the one the store resolved for the open, ``OpenDigest.policy``) to the
message values that publish it.

Pure: no Kafka, no store, no clock (``now`` is given). Two ways give the same message: the
output format's own fast path for the common digest (Avro: the stored event bytes become its
records as they are, no models, one encode pass), and the models for everything else
(``collapse_by``, records that cannot be read, a digest too large for one message, hooks that
want the whole Digest, or a format without a fast path).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from digest_stream.roles.publish.compose import compose, head
from digest_stream.roles.publish.parts import encoded_parts, part_budget
from digest_stream.store.base import OpenDigest
from digest_stream.store.policy import TimelinePolicy
from digest_stream.wire import codec, envelope
from digest_stream.wire.formats import DigestFormat, DigestHead
from digest_stream.wire.models import Digest, Record, ScheduleReason

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
    scheduled: ScheduleReason,
    digest: OpenDigest,
    policy: TimelinePolicy,
    *,
    now: float,
    max_bytes: int,
    output: DigestFormat,
    whole: bool = False,
    checked: bool = False,
) -> Built:
    """The messages that publish ``digest`` (opened for a schedule entry of reason
    ``scheduled``) under ``policy``, its timeline's, in the ``output`` format, each within
    ``max_bytes`` next to its key and headers; ``whole``: always build the Digest model too
    (hooks see it). ``now`` is when the timeline is closed (next_delivery_at). ``checked``:
    the records' bytes are the ingest's, checked moments ago (the leading edge), not read
    back from the store: their timestamps are taken as stored."""
    if not whole:
        stored = one_part(scheduled, digest, policy, now, max_bytes, output, checked)
        if stored is not None:
            return Built([stored[0]], stored[1])
    return _through_models(scheduled, digest, policy, now, max_bytes, output)


def one_part(
    scheduled: ScheduleReason,
    digest: OpenDigest,
    policy: TimelinePolicy,
    now: float,
    max_bytes: int,
    output: DigestFormat,
    checked: bool,
) -> tuple[bytes, Headers] | None:
    """``build``'s common case without its models: the one message value and the carried
    headers of a digest the format lays out from its stored bytes (Avro: as they are) and
    that fits one part; None for any other (collapsed, unreadable, too large for one part, a
    format without a fast path), which ``build`` takes through the models."""
    if policy.collapse_by is not None:
        return None
    return one_part_of(head(scheduled, digest, now), digest, max_bytes, output, checked)


def one_part_of(
    fields: DigestHead, digest: OpenDigest, max_bytes: int, output: DigestFormat, checked: bool
) -> tuple[bytes, Headers] | None:
    """``one_part`` of a digest whose own fields (``head``) are worked out already (the
    leading edge shares them across an add's digests) and whose policy collapses nothing."""
    stored = output.from_stored(fields, digest.records, checked)
    if stored is not None and len(stored[0]) <= part_budget(digest.timeline, stored[1], max_bytes):
        return stored
    return None


def _through_models(
    scheduled: ScheduleReason,
    digest: OpenDigest,
    policy: TimelinePolicy,
    now: float,
    max_bytes: int,
    output: DigestFormat,
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
    digest_model = compose(scheduled, digest, records, dropped, policy, now)
    headers = envelope.digest_headers(carried) if carried else []
    values, headers = encoded_parts(digest_model, headers, max_bytes, output)
    return Built(values, headers, digest_model, unreadable)
