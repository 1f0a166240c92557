"""The clocks that supply ``now`` and the key helpers both stores' callers rely on."""

from __future__ import annotations

import math
import time

import pytest

from digest_stream.clock import Clock, ManualClock, SystemClock
from digest_stream.store.redis import keys, library, protocol


def test_manual_clock_moves_only_when_told() -> None:
    clock: Clock = ManualClock(100.0)
    assert clock.now() == 100.0
    assert isinstance(clock, ManualClock)
    assert clock.advance(2.5) == 102.5
    clock.set(50.0)
    assert clock.now() == 50.0
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.set(math.nan)


def test_system_clock_is_wall_time() -> None:
    before = time.time()
    now = SystemClock().now()
    assert before <= now <= time.time()


def test_keys_share_the_partition_tag() -> None:
    tag = keys.partition_tag("d", 7)
    assert tag == "{d:7}"
    assert keys.command_keys(protocol.DS_OPEN, tag, "user:{x}") == [
        "{d:7}:t:user:{x}",
        "{d:7}:d:user:{x}",
        "{d:7}:w",
        "{d:7}:r",
    ]
    assert keys.command_keys(protocol.DS_STATS, tag) == ["{d:7}:w", "{d:7}:r", "{d:7}:o"]
    assert keys.fence_key(tag) == "{d:7}:o"


def test_library_declares_its_name_and_version() -> None:
    assert library.SOURCE.startswith(f"#!lua name={library.NAME}\n")
    assert f"local LIBRARY_VERSION = '{library.VERSION}'" in library.SOURCE
