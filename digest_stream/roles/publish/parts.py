"""Sizing a digest's parts for the broker.

The carried headers travel on every part, so they come out of the split's budget; past their
share of it, the ones that fit ride (each name's newest value first) and the rest are left off.
"""

from __future__ import annotations

import logging

from digest_stream.settings import MESSAGE_OVERHEAD_BYTES
from digest_stream.wire.formats import DigestFormat
from digest_stream.wire.models import Digest

log = logging.getLogger(__name__)

# Per-header framing in a Kafka record (lengths as varints, attributes); generous on purpose.
HEADER_OVERHEAD = 16
# The smallest split budget worth keeping carried headers for: below it they are left off.
MIN_PART_BUDGET = 4096
# Carried headers ride on every part beside records of up to max_event_bytes, which the
# settings keep MESSAGE_OVERHEAD_BYTES under max_message_bytes: half of that room is theirs,
# the rest is the key's and the digest's own fields'. Past it, carried_within picks what rides.
MAX_CARRIED_HEADER_BYTES = MESSAGE_OVERHEAD_BYTES // 2


def headers_size(headers: list[tuple[str, bytes]]) -> int:
    """Bytes the headers add to every message they ride on."""
    return sum(len(k.encode()) + len(v) + HEADER_OVERHEAD for k, v in headers)


def sized_parts(
    whole: Digest, headers: list[tuple[str, bytes]], max_bytes: int, output: DigestFormat
) -> tuple[list[Digest], list[tuple[str, bytes]]]:
    """Split a digest so each part (in the ``output`` format) plus key and headers fits
    ``max_bytes``.

    Carried headers too heavy to ride on every part are cut to the ones that fit (logged,
    see carried_within): the records matter more than the headers that came with them, and a
    heavy header must not push a light one (a traceparent) off with it.
    """
    budget = part_budget(whole.timeline, headers, max_bytes)
    if budget < 0:
        kept = carried_within(whole.timeline, headers, max_bytes)
        log.warning(
            "digest %s of %s: carried headers (%d values, %d bytes) exceed what a part can "
            "carry; %d values (%d bytes) sent, %d left off",
            whole.id, whole.timeline, len(headers), headers_size(headers),
            len(kept), headers_size(kept), len(headers) - len(kept),
        )  # fmt: skip
        headers = kept
        budget = part_budget(whole.timeline, headers, max_bytes)
    return output.split(whole, budget), headers


def carried_within(
    timeline: str, headers: list[tuple[str, bytes]], max_bytes: int
) -> list[tuple[str, bytes]]:
    """The carried headers one part can take, in their order: each name's newest value first,
    then older values, each kept while the total stays within MAX_CARRIED_HEADER_BYTES and
    leaves MIN_PART_BUDGET for the part's value; the rest are left off."""
    room = min(MAX_CARRIED_HEADER_BYTES, max_bytes - len(timeline.encode()) - MIN_PART_BUDGET)
    newest: dict[str, int] = {}  # name -> index of its newest value (headers are newest first)
    for index, (name, _) in enumerate(headers):
        newest.setdefault(name, index)
    firsts = set(newest.values())
    order = [*newest.values(), *(i for i in range(len(headers)) if i not in firsts)]
    kept: set[int] = set()
    used = 0
    for index in order:
        size = headers_size([headers[index]])
        if used + size <= room:
            kept.add(index)
            used += size
    return [header for index, header in enumerate(headers) if index in kept]


def encoded_parts(
    whole: Digest, headers: list[tuple[str, bytes]], max_bytes: int, output: DigestFormat
) -> tuple[list[bytes], list[tuple[str, bytes]]]:
    """sized_parts, each part encoded as the message value it travels as."""
    parts, headers = sized_parts(whole, headers, max_bytes, output)
    return [output.encode(part) for part in parts], headers


def part_budget(timeline: str, headers: list[tuple[str, bytes]], max_bytes: int) -> int:
    """Bytes one part's value may take next to its key and headers; -1 when the headers are
    too heavy to carry (sized_parts then leaves them off)."""
    if not headers:  # the common digest: nothing carried
        return max_bytes - len(timeline.encode())
    size = headers_size(headers)
    budget = max_bytes - len(timeline.encode()) - size
    return budget if budget >= MIN_PART_BUDGET and size <= MAX_CARRIED_HEADER_BYTES else -1
