"""Where a store command goes: the one Redis, or the cluster node that owns its slot.

Every FCALL of the store touches the keys of one input partition (one hash tag, so one
slot). In a cluster it is routed by that tag here: redis-py would otherwise ask the
server for the keys of every FCALL (COMMAND GETKEYS), doubling the traffic. MOVED/ASK
redirections are still followed by redis-py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from redis import Redis
from redis.cluster import ClusterNode, RedisCluster

from digest_stream.store.redis.replies import Reply

RedisClient = Redis | RedisCluster
#: One FCALL's keys and arguments.
Call = tuple[list[str], list[str | bytes]]


def primaries(client: RedisClient) -> list[ClusterNode | None]:
    """Every primary of a cluster; [None] (the one node) for a single Redis."""
    if isinstance(client, RedisCluster):
        return list(client.get_primaries())
    return [None]


def on_node(client: RedisClient, node: ClusterNode | None, *args: object) -> Reply:
    """Run one command on ``node`` (None: the single Redis)."""
    if isinstance(client, RedisCluster):
        return cast(Reply, client.execute_command(*args, target_nodes=node))
    return cast(Reply, client.execute_command(*args))


def node_name(node: ClusterNode | None) -> str:
    """How errors and health name a node."""
    return "redis" if node is None else str(node.name)


def fcall(
    client: RedisClient, command: str, function: str, call_keys: list[str], args: Sequence[object]
) -> Reply:
    """FCALL or FCALL_RO on the node that owns ``call_keys[0]``."""
    node = client.get_node_from_key(call_keys[0]) if isinstance(client, RedisCluster) else None
    return on_node(client, node, command, function, len(call_keys), *call_keys, *args)


def fcall_pipelined(client: RedisClient, function: str, calls: Sequence[Call]) -> list[Reply]:
    """FCALLs in one pipelined round trip per node, replies in call order.

    Errors come back in place as exception objects (``raise_on_error=False``).
    """
    groups: dict[str, list[int]] = {}
    nodes: dict[str, ClusterNode] = {}  # empty for a single node: one group, ""
    for index, (call_keys, _) in enumerate(calls):
        name = ""
        if isinstance(client, RedisCluster):
            node = client.get_node_from_key(call_keys[0])
            name = node.name
            nodes[name] = node
        groups.setdefault(name, []).append(index)
    replies: list[Reply] = [None] * len(calls)
    for name, indexes in groups.items():
        connection = (
            client.get_redis_connection(nodes[name]) if isinstance(client, RedisCluster) else client
        )
        pipe = connection.pipeline(transaction=False)
        for index in indexes:
            call_keys, args = calls[index]
            pipe.execute_command("FCALL", function, len(call_keys), *call_keys, *args)
        for index, reply in zip(indexes, pipe.execute(raise_on_error=False), strict=True):
            replies[index] = reply
    return replies
