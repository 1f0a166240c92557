"""Issue 7: the real service under faults; every event id accounted for.

The full scenarios (50,000 events each) are marked `chaos` and run only with
DIGEST_STREAM_CHAOS=1 (`make chaos`). A short slice (a few thousand events) of the ingest-kill
and hostile-input scenarios runs in `make test` (marked `slow`, so `make test-quick` skips it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import OwnKafka, OwnRedis, SettingsFactory, need_chaos
from tests.chaos.scenarios import FULL, SLICE
from tests.support.proxy import TcpProxy

# ------------------------------------------------------------------ the make-test slice


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_slice_ingest_sigkill(make_settings: SettingsFactory) -> None:
    scenarios.ingest_sigkill(make_settings(), SLICE, every=3.0)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_slice_hostile_input(make_settings: SettingsFactory) -> None:
    settings = make_settings(max_event_age=scenarios.MAX_EVENT_AGE)
    scenarios.hostile_input(settings, SLICE, every=20)


# ------------------------------------------------------------------ the full runs (make chaos)

ScenarioTest = TypeVar("ScenarioTest", bound=Callable[..., None])


def full_run(test: ScenarioTest) -> ScenarioTest:
    """A full scenario: marked `chaos`, skipped unless DIGEST_STREAM_CHAOS=1, 20 minutes at most."""
    for mark in (pytest.mark.timeout(1200), need_chaos(), pytest.mark.chaos):
        test = mark(test)
    return test


@full_run
def test_chaos_1_ingest_sigkill(make_settings: SettingsFactory) -> None:
    scenarios.ingest_sigkill(make_settings(), FULL, every=3.0)


@full_run
def test_chaos_2_delivery_sigkill_before_close(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    scenarios.delivery_sigkill_before_close(make_settings(), FULL, tmp_path)


@full_run
def test_chaos_3_rolling_restart(make_settings: SettingsFactory) -> None:
    scenarios.rolling_restart(make_settings(), FULL, every=4.0)


@full_run
def test_chaos_4a_redis_rollback(make_settings: SettingsFactory, own_redis: OwnRedis) -> None:
    scenarios.redis_rollback(make_settings(redis=own_redis.url), FULL, own_redis)


@full_run
@pytest.mark.parametrize("mode", ["replay", "continue"])
def test_chaos_4bc_redis_restarted_empty(
    make_settings: SettingsFactory, own_redis: OwnRedis, mode: str
) -> None:
    settings = make_settings(redis=own_redis.url, on_state_loss=mode)
    scenarios.redis_restarted_empty(settings, FULL, own_redis, mode)


@full_run
def test_chaos_5_redis_unreachable(make_settings: SettingsFactory, redis_proxy: TcpProxy) -> None:
    settings = make_settings(redis=f"redis://{redis_proxy.address}/0")
    scenarios.redis_unreachable(settings, FULL, redis_proxy, outage=15.0)


@full_run
def test_chaos_6_kafka_restart(make_settings: SettingsFactory, own_kafka: OwnKafka) -> None:
    scenarios.kafka_restart(make_settings(bootstrap=own_kafka.bootstrap), FULL, own_kafka)


@full_run
def test_chaos_7_hostile_input(make_settings: SettingsFactory) -> None:
    settings = make_settings(max_event_age=scenarios.MAX_EVENT_AGE)
    scenarios.hostile_input(settings, FULL, every=50)
