"""A schedule call whose reply is lost, on the Redis clients the service builds (issue 36, g).

redis-py re-sends nothing for them (redis 8.1): a client made from a URL has no retries, and
RedisCluster does not retry a command sent to a named node (``routing.on_node``). The lost
reply surfaces as StoreUnavailable; the scheduler takes it for an outage, and the first tick
that reaches Redis again announces every READY timeline of its partitions (RECOVERED), the
ones the lost call moved included. (A client that does re-send is answered the first run's
reply: tests/integration/store/test_redis_store.py and test_semantics.py.)
"""

from __future__ import annotations

import pytest
import redis

from digest_stream.clock import ManualClock
from digest_stream.ops.metrics import Metrics
from digest_stream.roles.scheduler import ScheduleEmitter, Scheduler
from digest_stream.settings import Settings
from digest_stream.store import NewRecord
from digest_stream.store.redis import RedisStore
from digest_stream.store.redis.client import redis_client
from digest_stream.wire import codec
from digest_stream.wire.models import ScheduleReason
from tests.support import new_id
from tests.support.fakes import FakeProducer

TOPIC = "schedule"
T0 = 1_000_000.0


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.cluster)])
def settings(request: pytest.FixtureRequest) -> Settings:
    """The service's settings for the single Redis or the cluster (a 10 s cool-down)."""
    if request.param == "redis":
        url = str(request.getfixturevalue("redis_url"))
    else:
        url = f"redis://{request.getfixturevalue('redis_cluster_nodes')[0]}/0"
    return Settings(
        schedule_topic=TOPIC,
        redis_url=url,
        redis_cluster=request.param == "cluster",
        minimum_delay=10.0,
    )


def test_a_schedule_reply_lost_on_the_services_client_is_announced_at_the_next_ticks(
    settings: Settings, namespace: str
) -> None:
    client = redis_client(settings)
    store = RedisStore(client, namespace=namespace, policy=settings.policy())
    producer = FakeProducer()
    clock = ManualClock(T0)
    metrics = Metrics()
    emitter = ScheduleEmitter(producer.as_producer(), TOPIC, metrics)
    scheduler = Scheduler(settings, store, emitter, clock, metrics)
    # "t" WAITING, due in 10 s: a record behind a digest closed now
    store.add(0, [NewRecord("t", "r1", T0, b"p", 0)], T0)
    digest = store.open(0, "t", new_id(), T0)
    store.add(0, [NewRecord("t", "r2", T0, b"p", 1)], T0)
    assert store.close(0, "t", digest.id, T0)
    lost: list[object] = []

    def lose_first(response: object, **_options: object) -> object:
        # Redis ran the call; its reply is lost on the way, as a broken connection loses it
        if not lost:
            lost.append(response)
            raise redis.ConnectionError("reply lost")
        return response

    client.set_response_callback("FCALL", lose_first)
    try:
        clock.advance(10.0)
        assert scheduler.tick({0}) == 0  # the outage path: nothing to announce yet
        assert lost, "no FCALL reply went by"
        assert store.inspect(0, "t").state == "ready"  # the lost call did move it
        scheduler.tick({0})  # Redis answers again: the partition is taken over
        scheduler.tick({0})
    finally:
        client.set_response_callback("FCALL", lambda response, **_options: response)
        client.close()
    producer.flush()
    entries = [codec.decode_schedule_entry(v or b"") for _, v in producer.on(TOPIC)]
    assert [(e.timeline, e.reason) for e in entries] == [("t", ScheduleReason.RECOVERED)]
