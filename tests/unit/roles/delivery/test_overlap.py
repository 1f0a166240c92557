"""The next batch's opens overlap this one's publishing, and this one's closes the next's."""

from __future__ import annotations

from typing import Any

from digest_stream.roles.delivery import Delivery
from digest_stream.settings import Settings
from digest_stream.store import MemoryStore
from tests.support import wait_until
from tests.support.fakes import FakeConsumer, FakeProducer
from tests.unit.roles.delivery.rig import (
    OUTPUT,
    SCHEDULE,
    FlakyStore,
    entry,
    one_each,
    queued,
    ready,
    started,
)


def _batched_rig(store: MemoryStore, consumer: FakeConsumer) -> tuple[Delivery, FakeProducer]:
    """A delivery taking one entry per batch, so the next batch is taken ahead of each one."""
    settings = Settings(
        schedule_topic=SCHEDULE, output_topic=OUTPUT, batch_timeout=0.0, batch_size=1
    )
    producer = FakeProducer()
    return started(settings, store, consumer, producer, partitions=(0, 1)), producer


def test_the_next_batch_is_opened_while_this_one_is_published() -> None:
    store = MemoryStore()
    consumer = FakeConsumer(SCHEDULE)
    delivery, producer = _batched_rig(store, consumer)
    queued(store, consumer, ["t1", "t2"])
    assert delivery.step() == 1
    # t2's batch was taken and opened ahead, but not published nor committed yet; t1's
    # closes overlap t2's publishing, so t1 is committed once they are done, in the next step.
    assert [key for key, _ in producer.on(OUTPUT)] == [b"t1"]
    assert consumer.committed_offsets == {}
    # opened on the helper thread, which may still be at it when the step returns
    wait_until(lambda: store.inspect(0, "t2").open_digest is not None, 5, "t2 opened ahead")
    assert [key for key, _ in producer.on(OUTPUT)] == [b"t1"]
    assert delivery.step() == 1
    assert [key for key, _ in producer.on(OUTPUT)] == [b"t1", b"t2"]
    assert consumer.committed_offsets == {0: 2}  # nothing in hand: closed before returning
    for timeline in ("t1", "t2"):
        info = store.inspect(0, timeline)
        assert info is not None
        assert info.state == "cooling"


def test_a_stop_commits_the_closing_batch_and_leaves_the_one_opened_ahead() -> None:
    store = MemoryStore()
    consumer = FakeConsumer(SCHEDULE)
    delivery, producer = _batched_rig(store, consumer)
    queued(store, consumer, ["t1", "t2"])
    assert delivery.step() == 1
    delivery.close()
    assert consumer.committed_offsets == {0: 1}  # t1: published, closed, committed
    t1, t2 = store.inspect(0, "t1"), store.inspect(0, "t2")
    assert t1 is not None
    assert t1.state == "cooling"
    assert t2 is not None
    assert t2.open_digest is not None  # t2's entry comes back and reopens it, same id
    assert [key for key, _ in producer.on(OUTPUT)] == [b"t1"]


def test_a_timeline_of_the_batch_in_hand_is_not_opened_ahead() -> None:
    # Opened ahead, the repeat would reopen the digest in hand and publish it twice; after
    # that digest is closed, the repeat is stale, as when the batches run one after the other.
    store = MemoryStore()
    consumer = FakeConsumer(SCHEDULE)
    delivery, producer = _batched_rig(store, consumer)
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)
    entry(consumer, "t1", 1)
    assert delivery.step() == 1
    assert delivery.step() == 0
    assert len(producer.on(OUTPUT)) == 1
    assert consumer.committed_offsets == {0: 2}


class RevokingConsumer(FakeConsumer):
    """Revokes a partition inside the poll that takes the next batch ahead."""

    revoke_at_poll: int = 0
    revoking: int = 0

    def poll(self, timeout: float) -> Any:
        if self.polls + 1 == self.revoke_at_poll:
            self.revoke([self.revoking])
        return super().poll(timeout)


def test_a_partition_revoked_while_its_batch_is_in_hand_is_left_to_the_next_owner() -> None:
    store = MemoryStore()
    consumer = RevokingConsumer(SCHEDULE)
    consumer.revoke_at_poll, consumer.revoking = 2, 0  # the poll taking the next batch
    delivery, producer = _batched_rig(store, consumer)
    ready(store, "t1", 1)
    entry(consumer, "t1", 0)
    assert delivery.step() == 0  # t1's entry is the next owner's now: not published
    assert producer.on(OUTPUT) == []
    assert consumer.committed_offsets == {}
    t1 = store.inspect(0, "t1")
    assert t1 is not None
    assert t1.open_digest is not None


def test_a_failed_open_ahead_is_retried_in_order() -> None:
    store = FlakyStore(failures=0)
    consumer = FakeConsumer(SCHEDULE)
    delivery, producer = _batched_rig(store, consumer)
    queued(store, consumer, ["t1", "t2"])
    delivery.step()
    store.failures = 1  # (t2 was opened ahead already; the next ahead open fails)
    one_each(store, ["t3"], first_offset=2)
    entry(consumer, "t3", 2)
    assert delivery.step() == 1
    assert delivery.step() == 1
    assert store.failures == 0  # the one failure was an open ahead, retried
    assert [key for key, _ in producer.on(OUTPUT)] == [b"t1", b"t2", b"t3"]
    assert consumer.committed_offsets == {0: 3}


def test_a_revocation_commits_the_closing_batch_before_the_next_owner_starts() -> None:
    store = MemoryStore()
    consumer = RevokingConsumer(SCHEDULE)
    consumer.revoke_at_poll, consumer.revoking = 3, 0  # the next batch's poll in step 2
    delivery, producer = _batched_rig(store, consumer)
    queued(store, consumer, ["t1", "t2", "t3"])
    assert delivery.step() == 1  # t1 published; its closes overlap t2's batch
    assert consumer.committed_offsets == {}
    assert delivery.step() == 0  # revoked while t2 was in hand: t2 is the next owner's
    assert consumer.committed_offsets == {0: 1}  # t1 closed and committed on revocation
    assert [key for key, _ in producer.on(OUTPUT)] == [b"t1"]
