"""The murmur2 hash is Kafka's (its published test vectors); librdkafka agreement for every
partitioner is in tests/integration/test_client.py."""

from __future__ import annotations

from digest_stream.wire.partitioner import murmur2


def test_known_murmur2_values() -> None:
    # Kafka's own test vectors (clients' UtilsTest.testMurmur2), as signed ints there.
    assert murmur2(b"21") == -973932308 & 0xFFFFFFFF
    assert murmur2(b"foobar") == -790332482 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-long-string") == -985981536 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-longer-string") == -1486304829 & 0xFFFFFFFF
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971 & 0xFFFFFFFF
