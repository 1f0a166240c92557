"""Digest parts sized for the broker: key, carried headers and value within max_message_bytes."""

from __future__ import annotations

from digest_stream.roles.publish.parts import MAX_CARRIED_HEADER_BYTES, headers_size, sized_parts
from digest_stream.wire import codec, envelope
from digest_stream.wire.formats.avro import AvroFormat
from digest_stream.wire.models import Digest, Record

MAX = 65_536
AVRO = AvroFormat()


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
    parts, kept = sized_parts(_digest(10, 20_000), headers, MAX, AVRO)
    assert kept == headers
    assert len(parts) > 1
    assert _fits(parts, kept)


def test_headers_beyond_their_share_are_left_off_and_the_records_still_fit() -> None:
    headers = [(f"baggage{n}", b"b" * 4_000) for n in range(4)]
    assert headers_size(headers) > MAX_CARRIED_HEADER_BYTES
    parts, kept = sized_parts(_digest(3, 48_000), headers, MAX, AVRO)
    assert kept == headers[:2]  # two fit the share, in order; the other two are left off
    assert headers_size(kept) <= MAX_CARRIED_HEADER_BYTES
    assert sum(len(p.records) for p in parts) == 3
    assert _fits(parts, kept)


def test_a_shared_traceparent_still_rides_beside_distinct_heavy_baggage() -> None:
    # Chaos 12a: six records with one traceparent and a distinct 4,000-byte baggage each. The
    # baggage values together exceed the share; the traceparent must not go with them.
    traceparent = ("traceparent", b"00-" + b"a" * 51)
    baggage = [("baggage", f"{n:08d}".encode().ljust(4_000, b"b")) for n in range(6)]
    headers = envelope.digest_headers([traceparent, bag] for bag in baggage)
    assert headers_size(headers) > MAX_CARRIED_HEADER_BYTES
    parts, kept = sized_parts(_digest(6, 48_000), headers, MAX, AVRO)
    assert kept == [traceparent, baggage[0], baggage[1]]  # newest values first, as they came
    assert headers_size(kept) <= MAX_CARRIED_HEADER_BYTES
    assert sum(len(p.records) for p in parts) == 6
    assert _fits(parts, kept)


def test_every_name_keeps_its_newest_value_before_any_name_keeps_an_older_one() -> None:
    # In order, the two baggage values would fill the share and push the traceparent out.
    older = ("baggage", b"o" * 4_096)
    headers = [("baggage", b"n" * 4_000), older, ("traceparent", b"t" * 55)]
    assert headers_size(headers) > MAX_CARRIED_HEADER_BYTES
    assert headers_size(headers[:2]) <= MAX_CARRIED_HEADER_BYTES
    _, kept = sized_parts(_digest(2, 1_000), headers, MAX, AVRO)
    assert kept == [headers[0], headers[2]]
