"""Digest parts sized for the broker: key, carried headers and value within max_message_bytes."""

from __future__ import annotations

from digest_stream.roles.publish import MAX_CARRIED_HEADER_BYTES, headers_size, sized_parts
from digest_stream.wire import codec
from digest_stream.wire.models import Digest, Record

MAX = 65_536


def _digest(records: int, payload: int) -> Digest:
    return Digest.build(
        id="a" * 32,
        timeline="t",
        records=[
            Record(id=f"r{n}", timestamp=1_000 + n, payload=b"x" * payload) for n in range(records)
        ],
        opened_at=1_000,
    )


def _fits(parts: list[Digest], headers: list[tuple[str, bytes]]) -> bool:
    return all(len(codec.encode_digest(p)) + 1 + headers_size(headers) <= MAX for p in parts)


def test_light_headers_ride_on_every_part_and_every_part_fits() -> None:
    headers = [("traceparent", b"0" * 55)]
    parts, kept = sized_parts(_digest(10, 20_000), headers, MAX)
    assert kept == headers
    assert len(parts) > 1
    assert _fits(parts, kept)


def test_headers_too_heavy_to_carry_are_left_off_and_the_records_still_fit() -> None:
    headers = [(f"baggage{n}", b"b" * 4_000) for n in range(4)]
    assert headers_size(headers) > MAX_CARRIED_HEADER_BYTES
    parts, kept = sized_parts(_digest(3, 48_000), headers, MAX)
    assert kept == []
    assert sum(len(p.records) for p in parts) == 3
    assert _fits(parts, kept)
