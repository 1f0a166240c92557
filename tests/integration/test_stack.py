"""Smoke tests that prove the stack is real: a Kafka broker and Redis 7 servers answering."""

from __future__ import annotations

import redis
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from redis.cluster import RedisCluster

from tests.support import unique, wait_until
from tests.support.kafka import TopicFactory

SMOKE_LIBRARY = """#!lua name={name}
local function put(keys, args)
  redis.call('SET', keys[1], args[1])
  return redis.call('GET', keys[1])
end
redis.register_function('{name}_put', put)
"""


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def test_kafka_round_trip_commits_offset_seen_by_second_consumer(
    kafka_bootstrap: str, topic_factory: TopicFactory, group_id: str
) -> None:
    topic = topic_factory(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(3):
        producer.produce(topic, key=b"k", value=f"v{i}".encode())
    assert producer.flush(30) == 0

    first = _consumer(kafka_bootstrap, group_id)
    first.subscribe([topic])
    got: list[bytes] = []

    def consumed_two() -> bool:
        msg = first.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value() or b"")
        return len(got) >= 2

    wait_until(consumed_two, 30, "first consumer did not receive two messages")
    assert got[:2] == [b"v0", b"v1"]
    # Commit "next offset to read" = 2: the third message is not yet processed.
    first.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    first.close()

    second = _consumer(kafka_bootstrap, group_id)
    committed = second.committed([TopicPartition(topic, 0)], timeout=10)
    assert committed[0].offset == 2
    second.subscribe([topic])
    seen: list[bytes] = []

    def consumed_rest() -> bool:
        msg = second.poll(0.2)
        if msg is not None:
            error = msg.error()
            if error is None:
                seen.append(msg.value() or b"")
            else:
                assert error.code() == KafkaError._PARTITION_EOF
        return bool(seen)

    wait_until(consumed_rest, 30, "second consumer did not resume from the committed offset")
    second.close()
    assert seen == [b"v2"]


def test_redis_function_library_loads_and_answers(
    redis_client: redis.Redis, namespace: str
) -> None:
    name = unique("smoke").replace("-", "_")
    redis_client.function_load(SMOKE_LIBRARY.format(name=name), replace=True)
    try:
        info = redis_client.info("server")
        assert int(str(info["redis_version"]).split(".")[0]) >= 7
        key = f"{{{namespace}:0}}:smoke"
        assert redis_client.fcall(f"{name}_put", 1, key, "hello") == b"hello"
        assert redis_client.get(key) == b"hello"
    finally:
        redis_client.function_delete(name)


def test_redis_cluster_routes_function_calls_by_hash_tag(
    redis_cluster: RedisCluster, namespace: str
) -> None:
    name = unique("smoke").replace("-", "_")
    primaries = redis_cluster.get_primaries()
    assert len(primaries) == 3
    # redis-py's function_load has no target_nodes: send the raw command to every primary.
    redis_cluster.execute_command(
        "FUNCTION", "LOAD", "REPLACE", SMOKE_LIBRARY.format(name=name),
        target_nodes=RedisCluster.PRIMARIES,
    )  # fmt: skip
    try:
        # Find two partition tags whose slots live on different masters.
        owners: dict[str, str] = {}
        for partition in range(64):
            key = f"{{{namespace}:{partition}}}:smoke"
            node = redis_cluster.get_node_from_key(key)
            owners.setdefault(node.name, key)
            if len(owners) >= 2:
                break
        assert len(owners) >= 2, "64 partition tags all landed on one master"
        for key in owners.values():
            assert redis_cluster.fcall(f"{name}_put", 1, key, key) == key.encode()
        # Ask each master directly (no cluster routing) which of the keys it holds.
        for node_name, key in owners.items():
            host, port = node_name.rsplit(":", 1)
            direct = redis.Redis(host=host, port=int(port))
            try:
                assert direct.execute_command("EXISTS", key) == 1
                others = [k for n, k in owners.items() if n != node_name]
                for other in others:
                    slot = redis_cluster.keyslot(other)
                    assert direct.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
            finally:
                direct.close()
    finally:
        redis_cluster.execute_command(
            "FUNCTION", "DELETE", name, target_nodes=RedisCluster.PRIMARIES
        )
