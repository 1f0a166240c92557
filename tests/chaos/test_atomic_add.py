"""Issue 20 items 1 and 5: a batch holding controls against a Redis that loses writes mid-batch.

The store runs on a redis-server of our own (`own_redis`), rolled back to an older snapshot
(SHUTDOWN NOSAVE, restart) at a chosen moment. The client is a stock redis-py client, as the
service builds it: its own retry reconnects and sends the next FCALL to the restarted server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from digest_stream.roles.ingest import fence
from digest_stream.roles.ingest.commit import Ledger
from digest_stream.store import TimelinePolicy
from digest_stream.store.base import FLUSH, NewRecord
from digest_stream.store.redis import RedisStore
from tests.chaos.harness import OwnRedis, Services, SettingsFactory, recovery_deadline
from tests.support import wait_until
from tests.support.kafka import Collector, send_events
from tests.support.proxy import TcpProxy

P = 0
NOW = 1_700_000_000.0
#: Long cool-downs: nothing becomes due by itself while a test runs.
POLICY = TimelinePolicy(minimum_delay=600.0, increment_delay=1.0, maximum_delay=3600.0)


def _record(timeline: str, record_id: str, offset: int, control: str | None = None) -> NewRecord:
    return NewRecord(timeline, record_id, NOW, record_id.encode(), offset, control)


def _rollback_after_first_fcall(client: redis.Redis, server: OwnRedis) -> Callable[..., object]:
    """A response callback (redis-py's own hook) that, once, restarts `server` from its last
    snapshot right after an FCALL answered: the next FCALL meets the rolled-back Redis."""
    done: list[bool] = []

    def callback(response: object, **_options: Any) -> object:
        if not done:
            done.append(True)
            server.shutdown_nosave()
            server.start()
        return response

    client.set_response_callback("FCALL", callback)
    return callback


def test_a_rollback_inside_a_batch_holding_a_control_is_noticed(
    own_redis: OwnRedis, namespace: str
) -> None:
    """Redis goes back to the snapshot taken before the batch, right after the batch's first
    FCALL. Whatever the store does, the ingest (its ledger and fence rules) must notice before
    it books the batch's offsets over records Redis no longer holds: at this batch's add or at
    the next one's. (Today's split add answered with the fence it found, which is exactly what
    the ingest expects, so nothing was noticed and the offsets were committed.)"""
    client = redis.Redis(host="127.0.0.1", port=own_redis.port, socket_timeout=5)
    store = RedisStore(client, namespace=namespace, policy=POLICY)
    ledger = Ledger()
    ledger.assign(P, 0, None)

    def ingest(records: list[NewRecord]) -> fence.Decision | None:
        """One batch as the applier books it: the fence check, then the ledger."""
        expected = ledger.expected(P)
        last = records[-1].offset
        result = store.add(P, records, NOW, expected_fence=expected, through_offset=last)
        if expected is not None:
            decision = fence.after_add(
                P, expected, result.fence_before, "replay", store=store.label
            )
            if decision is not None:
                return decision
        ledger.book(P, last, result.fence_after if result.fence_after is not None else last)
        return None

    assert ingest([_record("t", "a", 0)]) is None
    own_redis.snapshot()  # the fence is 0: the state before the batch below
    _rollback_after_first_fcall(client, own_redis)
    batch = [_record("t", "b", 1), _record("t", "f", 2, FLUSH), _record("u", "c", 3)]
    noticed = ingest(batch)
    if noticed is None:
        noticed = ingest([_record("u", "d", 4)])
    assert noticed is not None, (
        f"offsets 1..3 booked as applied (ledger expects fence {ledger.expected(P)}) while "
        f"Redis holds fence {store.applied_offset(P)}: the rollback went unnoticed"
    )
    assert noticed.cause == "fence_behind", noticed.message
    assert noticed.offset == 1  # replayed from the first offset Redis lost


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_timeline_made_ready_by_an_add_whose_reply_was_lost_is_announced(
    make_settings: SettingsFactory, own_redis: OwnRedis
) -> None:
    """Item 5: Redis runs a ds_add, its reply is lost, redis-py re-sends it: the re-run skips
    the records (the fence covers them) and names nothing READY. The timeline the first run
    made READY must still be announced, well before maintenance (300 s) would find it."""
    with TcpProxy("127.0.0.1", own_redis.port) as proxy:
        settings = make_settings(redis=f"redis://{proxy.address}/0", partitions=1)
        services = Services(settings)
        out = Collector(settings, settings.output_topic)
        try:
            service = services.start()
            services.wait_started(service)
            first = send_events(settings, "lost-reply:warm-up")  # the path works end to end
            out.wait_for(lambda: set(first) <= out.record_ids(), 60, "the warm-up digest")
            proxy.lose_reply_to(b"ds_add")
            ready = send_events(settings, "lost-reply:new")  # absent -> READY in that add
            wait_until(lambda: proxy.replies_lost == 1, 30, "the add's reply to be lost")
            out.wait_for(
                lambda: set(ready) <= out.record_ids(),
                recovery_deadline(settings),
                "the digest of the timeline the lost-reply add made READY",
            )
        finally:
            services.cleanup()
            out.close()
