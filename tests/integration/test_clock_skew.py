"""A host whose clock disagrees with Redis's says so at start (issue 12, item 10)."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from digest_stream.app import check_clock
from digest_stream.clock import ManualClock
from digest_stream.ops.metrics import Metrics
from digest_stream.store.redis import RedisStore


def test_a_skewed_host_clock_is_measured_and_warned_about(
    redis_client: redis.Redis, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisStore(redis_client, namespace=namespace)
    metrics = Metrics()
    assert abs(check_clock(store, ManualClock(time.time()), metrics)) < 1.0
    assert "clock" not in caplog.text
    skew = check_clock(store, ManualClock(time.time() + 30), metrics)
    assert 29 < skew < 31
    assert metrics.value("digest_clock_skew_seconds") == pytest.approx(skew)
    assert any(
        r.levelno == logging.WARNING and "30.0s ahead of Redis" in r.getMessage()
        for r in caplog.records
    )
