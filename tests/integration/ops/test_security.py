"""Redis ACL: the service runs as a user limited to its key pattern and the commands it needs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from redis.exceptions import NoPermissionError

from digest_stream.store import NewRecord, connect
from digest_stream.store.redis.acl import LIBRARY_COMMANDS, acl_rules
from tests.support import REPO_ROOT, free_port, unique, wait_until
from tests.support.http import probe
from tests.support.pipeline import Pipeline
from tests.support.store import library_commands


@pytest.fixture
def acl_user(redis_client: redis.Redis) -> Iterator[Callable[..., str]]:
    """Create ACL users (name, password) and delete them afterwards."""
    made: list[str] = []

    def make(
        namespace: str, redis_url: str, *, load_library: bool = True, without: tuple[str, ...] = ()
    ) -> str:
        name, password = unique("ds-acl"), uuid.uuid4().hex
        rules = [
            "on",
            f">{password}",
            "resetkeys",
            *acl_rules(namespace, load_library=load_library, without=without),
        ]
        redis_client.execute_command("ACL", "SETUSER", name, *rules)
        made.append(name)
        parts = urlsplit(redis_url)
        return urlunsplit(parts._replace(netloc=f"{name}:{password}@{parts.hostname}:{parts.port}"))

    yield make
    for name in made:
        redis_client.acl_deluser(name)


def test_service_runs_as_a_restricted_acl_user(
    pipeline_factory: Callable[..., Pipeline],
    acl_user: Callable[..., str],
    redis_url: str,
    namespace: str,
) -> None:
    url = acl_user(namespace, redis_url)
    password = urlsplit(url).password
    assert password
    pipe = pipeline_factory(partitions=2)
    port = free_port()
    proc = pipe.process(
        DIGEST_STREAM_REDIS_URL=url,
        DIGEST_STREAM_LOG_FORMAT="json",
        DIGEST_STREAM_METRICS_PORT=str(port),
        DIGEST_STREAM_METRICS_HOST="127.0.0.1",
    )
    ready = f"http://127.0.0.1:{port}/readyz"
    wait_until(lambda: probe(ready)[0] == 200, 60, f"ready as the ACL user: {proc.log()}")
    output = pipe.output()
    timelines = [unique("acl") for _ in range(4)]
    with pipe.producer() as producer:
        for timeline in timelines:
            producer.send(timeline, "e1", b"{}")
        producer.flush()
    output.wait_for(lambda: len(output.messages) >= 4, 30, "four digests via the ACL user")
    output.close()
    assert proc.stop() == 0
    log = proc.log()
    assert password not in log
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert any("started roles" in line["message"] for line in lines)

    # The same user is refused everything outside its pattern and command list.
    client = redis.Redis.from_url(url)
    with pytest.raises(NoPermissionError):
        client.get("someone-else")
    with pytest.raises(NoPermissionError):
        client.get(f"{{{namespace}x:0}}:o")
    with pytest.raises(NoPermissionError):
        client.execute_command("KEYS", "*")
    with pytest.raises(NoPermissionError):
        client.execute_command("FLUSHALL")
    with pytest.raises(NoPermissionError):
        client.execute_command("CONFIG", "GET", "*")
    with pytest.raises(NoPermissionError):  # the library's keys of another namespace
        client.execute_command("FCALL", "ds_fence_get", 1, f"{{{namespace}x:0}}:o")
    assert client.ping()
    client.close()


def test_a_command_the_acl_lacks_pauses_the_service_until_granted(
    pipeline_factory: Callable[..., Pipeline],
    acl_user: Callable[..., str],
    redis_client: redis.Redis,
    redis_url: str,
    namespace: str,
) -> None:
    """An upgrade whose library calls a command not granted yet: no exit, no loss, no skip."""
    url = acl_user(namespace, redis_url, without=("zmscore",))  # every add reads the schedule
    pipe = pipeline_factory(partitions=1)
    proc = pipe.process(DIGEST_STREAM_REDIS_URL=url, DIGEST_STREAM_LOG_FORMAT="json")
    output = pipe.output()
    with pipe.producer() as producer:
        producer.send("t-acl", "e1", b"{}")
        producer.flush()
    wait_until(lambda: "can't run this command" in proc.log(), 60, f"the refusal: {proc.log()}")
    assert proc.popen.poll() is None, proc.log()[-3000:]
    output.poll(1.0)
    assert output.messages == [], "a digest went out without its records being stored"
    redis_client.execute_command("ACL", "SETUSER", urlsplit(url).username, "+zmscore")
    output.wait_for(lambda: len(output.messages) >= 1, 60, "the digest once ZMSCORE is granted")
    output.close()
    assert proc.stop() == 0, proc.log()[-3000:]


def test_without_function_load_a_preloaded_library_is_only_checked(
    acl_user: Callable[..., str], redis_url: str, namespace: str
) -> None:
    # Issue 20, item 11: with the administrator's load in place, the default
    # redis_load_library=true starts as well as false under a user without FUNCTION LOAD
    # (loading a missing or different library still needs it: tests/integration/store/test_acl.py).
    from digest_stream.settings import Settings

    connect(Settings(redis_url=redis_url, namespace=namespace)).disconnect()  # admin
    url = acl_user(namespace, redis_url, load_library=False)
    loading = Settings(redis_url=url, namespace=namespace)
    for settings in (loading, loading.model_copy(update={"redis_load_library": False})):
        store = connect(settings)
        store.add(0, [NewRecord("t", "r", 1.0, b"x", offset=0)], 10.0)
        assert store.inspect(0, "t").state == "ready"
        store.disconnect()


def test_acl_lists_match_the_library_and_the_readme() -> None:
    assert library_commands() == set(LIBRARY_COMMANDS)
    readme = (REPO_ROOT / "README.md").read_text()
    line = " ".join(["ACL SETUSER digest-stream on >CHANGE-ME resetkeys",
                     *acl_rules("d", load_library=False)])  # fmt: skip
    assert line in readme, f"README lacks the ACL line:\n{line}"
