"""Opening and closing digests over Redis: one FCALL per partition per batch."""

from __future__ import annotations

from collections.abc import Sequence

from redis.exceptions import ResponseError

from digest_stream.store import validate
from digest_stream.store.base import DigestTarget, OpenDigest
from digest_stream.store.due import next_due
from digest_stream.store.errors import InvalidArgument, InvalidState
from digest_stream.store.limits import DIGEST_ID_LENGTH
from digest_stream.store.policy import TimelinePolicy
from digest_stream.store.redis import keys, protocol, replies, routing
from digest_stream.store.redis.calls import RedisCalls
from digest_stream.store.redis.policy_wire import PolicyTable, pack
from digest_stream.store.redis.replies import Reply, arg, array, integer, map_error
from digest_stream.store.redis.routing import Call
from digest_stream.store.validate import plain_name

#: A packed target (protocol.TARGET): its policy index and timeline length, then (after the
#: timeline) its digest id's length: always DIGEST_ID_LENGTH once validate.digest_id passed it.
_TARGET_HEAD, _ID_LENGTH = (head.pack for head in protocol.TARGET.heads)
_ID = _ID_LENGTH(DIGEST_ID_LENGTH)

#: Targets per ds_open_many / ds_close_many call: one partition's share of a delivery batch
#: in one call, yet a bound on how long one call (with large digests) holds Redis.
MANY_CHUNK = 256

#: ds_close_leading's reply positions (from 0).
_CLOSE_LEADING = {name: i for i, name in enumerate(protocol.CLOSE_LEADING_REPLY.fields)}


class RedisDigests:
    """``open``, ``close`` and their batch forms of ``RedisStore``."""

    def __init__(self, calls: RedisCalls) -> None:
        self.calls = calls

    def _checked(
        self, target: DigestTarget, now: float
    ) -> tuple[str, list[str | bytes], TimelinePolicy]:
        """A digest call's tag, its leading arguments (timeline, id, now) and the policy."""
        partition, timeline, digest_id = target
        tag = self.calls.tag(partition)
        validate.name(timeline, "timeline")
        validate.digest_id(digest_id)
        now = validate.time_value(now, "now")
        return tag, [timeline, digest_id, arg(now)], self.calls.timeline_policy(timeline)

    def open(self, partition: int, timeline: str, digest_id: str, now: float) -> OpenDigest:
        """Open (or reopen) the timeline's digest; ``digest_id`` is used only for a new one."""
        tag, args, policy = self._checked((partition, timeline, digest_id), now)
        reply = self.calls.call(protocol.DS_OPEN, tag, [*args, *pack(policy, now)], timeline)
        return replies.open_digest(timeline, reply, next_due(policy))

    def close(self, partition: int, timeline: str, digest_id: str, now: float) -> bool:
        """Close that digest; False when the id is unknown or already closed."""
        tag, args, policy = self._checked((partition, timeline, digest_id), now)
        args += (self.calls.partition_ttl, *pack(policy, now))
        return integer(self.calls.call(protocol.DS_CLOSE, tag, args, timeline)) == 1

    def open_many(
        self, targets: Sequence[DigestTarget], now: float
    ) -> list[OpenDigest | InvalidState]:
        """open() for several timelines: one FCALL per partition (ds_open_many), pipelined in
        one round trip per Redis node; each open atomic on its own, in order."""
        now = validate.time_value(now, "now")
        policies, packed, resolved = self._targets(targets, now)
        found = self._many(protocol.DS_OPEN_MANY, targets, [arg(now), *policies.args()], packed)
        return [
            InvalidState(f"timeline is not ready: {timeline}")
            if reply == 0
            else replies.open_digest(timeline, reply, next_due(policy))
            for (_, timeline, _), reply, policy in zip(targets, found, resolved, strict=True)
        ]

    def close_many(self, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close() for several digests: one FCALL per partition (ds_close_many), pipelined the
        same way."""
        now = validate.time_value(now, "now")
        policies, packed, _ = self._targets(targets, now)
        head = [arg(now), self.calls.partition_ttl, *policies.args()]
        found = self._many(protocol.DS_CLOSE_MANY, targets, head, packed)
        return [integer(reply) == 1 for reply in found]

    def close_leading(self, nonce: str, targets: Sequence[DigestTarget], now: float) -> list[bool]:
        """close_many() for digests one add led (its ``open_nonce``), all of one partition: ONE
        FCALL (ds_close_leading), which closes those in the batch form in one write."""
        now = validate.time_value(now, "now")
        checked = validate.open_nonce(nonce, "nonce")
        if checked is None:
            raise InvalidArgument("close_leading needs the nonce of the add that led them")
        if not targets:
            return []
        partition = targets[0][0]
        if any(target[0] != partition for target in targets):
            raise InvalidArgument("close_leading closes the digests of one add: one partition")
        policies, packed, _ = self._targets(targets, now)
        head = [arg(now), self.calls.partition_ttl, checked, str(len(targets))]
        args = [*head, *policies.args(), b"".join(packed)]
        tag = self.calls.tag(partition)
        reply = array(self.calls.call(protocol.DS_CLOSE_LEADING, tag, args))
        batch_closed = integer(reply[_CLOSE_LEADING["closed"]]) == 1
        flat = array(reply[_CLOSE_LEADING["ordinary"]])
        ordinary = {
            replies.text(flat[i]): integer(flat[i + 1]) == 1 for i in range(0, len(flat), 2)
        }
        return [ordinary.get(timeline, batch_closed) for _, timeline, _ in targets]

    def _targets(
        self, targets: Sequence[DigestTarget], now: float
    ) -> tuple[PolicyTable, list[bytes], list[TimelinePolicy]]:
        """The policies of a many-target call (each sent once), each target packed
        (protocol.TARGET: the index of its policy, its timeline, its digest id) and each
        target's checked policy."""
        policies = PolicyTable(now)
        packed: list[bytes] = []
        resolved: list[TimelinePolicy] = []
        resolver = self.calls.resolver
        policy, number = None, 0
        for _, timeline, digest_id in targets:
            if not plain_name(timeline):  # judged, with its precise error, by validate.name
                validate.name(timeline, "timeline")
            validate.digest_id(digest_id)
            found = resolver(timeline)
            if found is not policy:  # most targets of a call share one policy object
                policy, number = found, policies.index(found, timeline)  # checks the policy
            name = timeline.encode()
            head = _TARGET_HEAD(number, len(name))
            packed.append(b"".join((head, name, _ID, digest_id.encode())))
            resolved.append(found)
        return policies, packed, resolved

    def _many(
        self,
        command: protocol.Command,
        targets: Sequence[DigestTarget],
        head: list[str | bytes],
        packed: Sequence[bytes],
    ) -> list[Reply]:
        """One FCALL per partition (at most MANY_CHUNK targets each, packed into its last
        argument), pipelined by node; the per-target replies in target order."""
        groups: dict[int, list[int]] = {}
        for index, (partition, _, _) in enumerate(targets):
            groups.setdefault(partition, []).append(index)
        calls: list[Call] = []
        members: list[list[int]] = []
        for partition, indexes in groups.items():
            tag = self.calls.tag(partition)
            call_keys = keys.command_keys(command, tag)
            for first in range(0, len(indexes), MANY_CHUNK):
                chunk = indexes[first : first + MANY_CHUNK]
                calls.append((call_keys, [*head, b"".join([packed[index] for index in chunk])]))
                members.append(chunk)
        out: list[Reply] = [None] * len(targets)
        for chunk, reply in zip(members, self._fcall_many(command.function, calls), strict=True):
            for index, value in zip(chunk, array(reply), strict=True):
                out[index] = value
        return out

    def _fcall_many(self, function: str, calls: Sequence[Call]) -> list[Reply]:
        """Pipelined FCALLs, one round trip per node, replies in call order.

        A reply the pipeline cannot settle (the library missing on a node, a cluster
        redirection while slots move) is redone by RedisCalls.fcall, which handles both.
        """
        found: list[Reply] = []
        for call, reply in zip(
            calls, routing.fcall_pipelined(self.calls.client, function, calls), strict=True
        ):
            if isinstance(reply, ResponseError):
                mapped = map_error(reply)
                if mapped is not reply:
                    raise mapped from reply
                found.append(self.calls.fcall(function, *call))
            elif isinstance(reply, Exception):
                raise reply
            else:
                found.append(reply)
        return found
