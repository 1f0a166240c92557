"""The fence (apply's rules): where a partition starts, what a fence found behind means, and
what a decision does.

The store keeps, per input partition, the last offset it applied (the fence) and the id of the
topic incarnation those offsets belong to. This process remembers the fence it left
(``expected``). Comparing the two tells whether the store lost writes: a fence behind is replayed
from Kafka; a fence gone entirely is a state loss, handled as the ``on_state_loss`` setting
says. A fence of another topic incarnation (the topic was deleted and created again, renamed in
the settings, or is another cluster's: its topic id differs), or one beyond the partition's end
(its offsets were reset), fences nothing: it is a state loss for this topic, handled the same
way, never a reason to skip. A topic id the broker could not confirm just now (the last one
seen) is a guess: it never resets a fence that names another id; the ingest waits until the
broker tells (see ``Decision.wait``). The rules are pure functions, so every branch has a unit
test; ``FenceActions`` carries their decisions out (the store, the read position, the ledger).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID

from digest_stream.ops.metrics import Metrics
from digest_stream.roles.ingest.commit import Commits, Ledger
from digest_stream.roles.ingest.topic import NO_TOPIC_ID, TopicId, TopicProbe
from digest_stream.roles.runner import Runner
from digest_stream.store.base import DigestStore
from digest_stream.store.errors import BackendError, unavailable

log = logging.getLogger(__name__)

StateLoss = Literal["replay", "continue"]
Cause = Literal["fence_behind", "state_loss", "topic_changed", "offset_reset"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a partition: where to read next and which fence to expect."""

    #: Where to read from; None = keep reading where we are (apply the batch in hand).
    offset: int | None
    #: The fence the next store call must find (None: no expectation).
    expected: int | None
    #: A replay to count (metric label), if this is one.
    cause: Cause | None = None
    #: What to log, and how loudly.
    message: str = ""
    level: int = logging.INFO
    #: The store's fence belongs to another topic incarnation: replace it by ``expected``
    #: (with the current topic id) before reading on.
    reset: bool = False
    #: The fence names another topic id than the one last seen, and the broker cannot tell
    #: the current id now: neither reset the fence nor apply past it; ask again later.
    wait: bool = False

    @property
    def apply_now(self) -> bool:
        """The batch in hand is applied without a fence (no seek)."""
        return self.offset is None


def state_lost(
    partition: int,
    on_state_loss: StateLoss,
    *,
    applied_through: int,
    resume_at: int | None,
    where: str,
    store: str,
) -> Decision:
    """The partition's fence is gone from the store: replay everything, or accept the loss.

    ``store`` is the store's name in the line (``DigestStore.label``), as in every decision's.
    """
    if on_state_loss == "replay":
        return Decision(
            OFFSET_BEGINNING,
            None,
            "state_loss",
            f"partition {partition}: {store} lost all state of this partition ({where}; applied "
            f"through {applied_through}); on_state_loss=replay: replaying from the earliest "
            "retained offset",
            logging.ERROR,
        )
    return Decision(
        resume_at,
        None,
        "state_loss",
        f"partition {partition}: {store} lost all state of this partition ({where}; applied "
        f"through {applied_through}); on_state_loss=continue: records before "
        f"{'this batch' if resume_at is None else f'offset {resume_at}'} are LOST",
        logging.ERROR,
    )


def foreign(
    partition: int,
    on_state_loss: StateLoss,
    *,
    fence: int | None,
    fence_topic: str | None,
    topic: TopicId,
    end: int | None,
    resume_at: int | None,
) -> Decision | None:
    """The fence belongs to another incarnation of the topic: None when it does not.

    ``topic`` is the topic's id as last seen (value None: never told), ``end`` the partition's
    end offset (high watermark; None: unknown). A fence at or past the end names offsets the
    partition never held: they were reset (a topic recreated where ids are unknown, a cluster
    with fresh offsets, a truncated log). ``resume_at`` is where ``continue`` reads on (None:
    the batch in hand; negative: where auto.offset.reset says). Ids that differ while the
    broker cannot confirm the current one give a ``wait`` decision.
    """
    topic_id = topic.value
    if fence_topic is not None and topic_id is not None and fence_topic != topic_id:
        if not topic.fresh:
            # Either the topic changed, or this process's id is stale and another owner
            # already moved the fence to the new topic: resetting on a guess would throw that
            # owner's work away and replay the whole topic. Unknown stays unknown.
            return Decision(
                None,
                None,
                message=f"partition {partition}: the fence names topic id {fence_topic}, this "
                f"process last saw {topic_id} and the broker cannot tell the current one now; "
                "nothing is reset or applied on this partition until it can",
                level=logging.WARNING,
                wait=True,
            )
        cause: Cause = "topic_changed"
        what = (
            f"topic id changed {fence_topic} -> {topic_id} (the topic was deleted and created "
            "again, renamed, or is another cluster's); the fence "
            f"{'none' if fence is None else fence} was the old topic's"
        )
    elif fence is not None and end is not None and fence >= end:
        cause = "offset_reset"
        what = (
            f"the fence {fence} is at or past the end of the partition ({end}): its offsets "
            "were reset (a recreated topic, another cluster, a truncated log)"
        )
    else:
        return None
    message = f"partition {partition}: {what}; nothing is skipped as already applied; "
    if on_state_loss == "replay":
        return Decision(
            OFFSET_BEGINNING,
            None,
            cause,
            message + "on_state_loss=replay: reading it from the earliest retained offset",
            logging.ERROR,
            reset=True,
        )
    if resume_at is None:
        where = "from this batch on"
    elif resume_at < 0:
        where = "from where auto.offset.reset says"
    else:
        where = f"from the committed offset {resume_at} on (records before it are NOT read)"
    return Decision(
        resume_at,
        None,
        cause,
        message + f"on_state_loss=continue: reading it {where}",
        logging.ERROR,
        reset=True,
    )


def start(
    partition: int,
    committed: int,
    fence: int | None,
    on_state_loss: StateLoss,
    *,
    store: str,
    fence_topic: str | None = None,
    topic: TopicId = NO_TOPIC_ID,
    end: int | None = None,
) -> Decision:
    """Where a newly assigned partition starts, from the group's commit and the store's fence.

    ``committed`` is the next offset to read as committed by the group (negative: none);
    ``fence_topic`` the topic id the fence records, ``topic`` the topic's id as last seen and
    ``end`` the partition's end offset (None: not known, not checked).
    """
    has_commit = committed >= 0
    changed = foreign(
        partition,
        on_state_loss,
        fence=fence,
        fence_topic=fence_topic,
        topic=topic,
        end=end,
        resume_at=committed if has_commit else OFFSET_INVALID,
    )
    if changed is not None and changed.wait:
        # Start as if the fence were ours: the first add carries the id last seen, the store
        # refuses it if the fence names another, and the applier waits for the broker then.
        usual = _start(partition, committed, fence, on_state_loss, fence_topic, store)
        said = "; ".join(m for m in (usual.message, changed.message) if m)
        return replace(usual, message=said, level=max(usual.level, changed.level))
    if changed is not None:
        return changed
    return _start(partition, committed, fence, on_state_loss, fence_topic, store)


def _start(
    partition: int,
    committed: int,
    fence: int | None,
    on_state_loss: StateLoss,
    fence_topic: str | None,
    store: str,
) -> Decision:
    """start() once the fence is known to be this topic's (or cannot be told apart)."""
    has_commit = committed >= 0
    if fence is None and fence_topic is not None:
        # Reset for a new topic, nothing applied yet: read it as that decision said.
        if on_state_loss == "replay" or not has_commit:
            return Decision(OFFSET_BEGINNING, None)
        return Decision(committed, None)
    if fence is None:
        if not has_commit:
            return Decision(OFFSET_INVALID, None)  # a new partition: auto.offset.reset decides
        return state_lost(
            partition,
            on_state_loss,
            applied_through=committed - 1,
            resume_at=committed,
            where="no fence, but a committed offset",
            store=store,
        )
    if not has_commit:
        return Decision(fence + 1, fence)
    if fence + 1 < committed:
        return Decision(
            fence + 1,
            fence,
            "fence_behind",
            f"partition {partition}: {store} fence {fence} is behind the committed offset "
            f"{committed}; replaying",
            logging.WARNING,
        )
    return Decision(min(fence + 1, committed), fence)


def start_without_store(committed: int) -> Decision:
    """Where to start when the store cannot be asked (unreachable at assignment).

    The group committed through ``committed - 1`` only after the store applied it, so the fence
    must be at least that: the first add checks it (the store may have lost writes meanwhile)
    and rewinds, instead of silently skipping the gap.
    """
    if committed < 0:
        return Decision(OFFSET_INVALID, None)
    return Decision(committed, committed - 1 if committed > 0 else None)


def is_behind(expected: int, fence_before: int | None) -> bool:
    """Whether the fence a store call found is behind the one this process left."""
    return fence_before is None or fence_before < expected


def after_add(
    partition: int,
    expected: int,
    fence_before: int | None,
    on_state_loss: StateLoss,
    *,
    store: str,
) -> Decision | None:
    """A store call found ``fence_before`` where ``expected`` was left: None if all is well."""
    if not is_behind(expected, fence_before):
        return None
    if fence_before is None:
        return state_lost(
            partition,
            on_state_loss,
            applied_through=expected,
            resume_at=None,
            where="fence missing",
            store=store,
        )
    return Decision(
        fence_before + 1,
        fence_before,
        "fence_behind",
        f"partition {partition}: {store} lost writes (fence {fence_before}, this process applied "
        f"through {expected}); replaying offsets {fence_before + 1}..{expected} from Kafka",
        logging.WARNING,
    )


def applied_unbooked(expected: int | None, first: int, fence_before: int | None) -> bool:
    """Whether a store call found offsets of its own batch (from ``first``) already applied
    beyond the fence this process booked: an earlier run of the same call whose reply was lost
    (a store's client may re-send a call whose connection broke, as redis-py does; so does
    the outage retry). That run's READY timelines were never announced."""
    if fence_before is None or fence_before < first:
        return False
    return expected is None or fence_before > expected


class FenceActions:
    """Carries out fence decisions: counted and logged, a fence of another topic replaced, the
    read position moved (role thread; at an assignment and after an add alike)."""

    def __init__(
        self,
        store: DigestStore,
        metrics: Metrics,
        runner: Runner,
        ledger: Ledger,
        commits: Commits,
        topics: TopicProbe,
        restored: Callable[[Iterable[int]], None],
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._runner = runner
        self._ledger = ledger
        #: Moves a read position; the ledger forgets what it had not committed (commit.py).
        self.seek = commits.seek
        self._topics = topics
        # Told when the store turned out to have lost or rolled back a partition's state: READY
        # timelines restored with it may have had their announcements consumed already.
        self.restored = restored

    def note(self, decision: Decision) -> None:
        """Count and log a fence decision."""
        if decision.cause is not None:
            self._metrics.replays.labels(cause=decision.cause).inc()
        if decision.message:
            log.log(decision.level, "%s", decision.message)

    def act(self, partition: int, decision: Decision) -> None:
        """Carry out a fence decision about a running partition: note it, seek if it says so."""
        self.note(decision)
        if decision.cause is not None:
            self.restored([partition])
        if decision.reset:
            self.reset_fence(partition, decision.expected, retry=True)
        if decision.offset is not None:
            self.seek(partition, decision.offset)
        self._ledger.expect(partition, decision.expected)

    def reset_fence(self, partition: int, offset: int | None, *, retry: bool) -> None:
        """Replace a fence of another topic incarnation by one of the current topic.

        ``retry``: wait out a store outage (serving the group); a rebalance handler may not
        poll, so there one attempt is made, and a fence left in place is reported again by
        the partition's first add.
        """
        topic = self._topics.topic.value  # fresh: a reset is decided only on a told id

        def reset() -> None:
            self._store.set_applied_offset(partition, offset, topic_id=topic)

        try:
            if not retry:
                reset()
                return
            self._runner.while_store_down(
                reset, give_up=self.gives_up(partition), errors=self._metrics.store_errors
            )
        except BackendError as exc:
            if not unavailable(exc):
                raise
            log.error("partition %d: the fence could not be reset (%s)", partition, exc)

    def gives_up(self, partition: int) -> Callable[[], bool]:
        """When a wait for the store about this partition ends: stopping, or it left."""
        return lambda: self._runner.stopping() or not self._ledger.owns(partition)
