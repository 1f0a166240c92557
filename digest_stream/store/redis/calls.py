"""RedisCalls: the call transport of RedisStore: the client, the library on every primary,
one FCALL of a declared command, and the many-target calls pipelined by node.

Works unchanged over ``redis.Redis`` and ``redis.cluster.RedisCluster``: every call touches
the keys of one input partition (one hash tag, one slot) and is routed by that tag.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.cluster import ClusterNode
from redis.exceptions import NoPermissionError, ResponseError

from digest_stream.store import validate
from digest_stream.store.base import DigestTarget
from digest_stream.store.errors import InvalidArgument, LibraryVersionMismatch
from digest_stream.store.redis import acl, keys, library, protocol, routing
from digest_stream.store.redis.replies import Reply, array, map_error, text
from digest_stream.store.redis.routing import Call, RedisClient

#: Targets per ds_open_many / ds_close_many call: one partition's share of a delivery batch
#: in one call, yet a bound on how long one call (with large digests) holds Redis.
MANY_CHUNK = 256


def library_versions(client: RedisClient) -> dict[str, str | None]:
    """The library version on every primary ("redis" for a single node); None: not loaded.

    Read-only (FCALL_RO ds_version): the one check behind ``ensure_library`` and /readyz.
    """
    found: dict[str, str | None] = {}
    for node in routing.primaries(client):
        try:
            found[routing.node_name(node)] = text(
                routing.on_node(client, node, "FCALL_RO", "ds_version", 0)
            )
        except ResponseError as error:
            if "Function not found" not in str(error):
                raise
            found[routing.node_name(node)] = None
    return found


class RedisCalls:
    """The client and the namespace its calls' keys are in, the library check, one FCALL with
    the library loaded again where a primary lost it, and pipelined FCALLs."""

    def __init__(self, client: RedisClient, *, namespace: str, load_library: bool) -> None:
        if client.get_connection_kwargs().get("decode_responses"):
            raise InvalidArgument("the Redis client must not decode responses: payloads are bytes")
        self.client = client
        self.namespace = validate.namespace(namespace)
        self._load_library = load_library

    def ensure_library(self) -> None:
        """Load (when allowed, and only where it is missing or differs) and verify the library
        on every primary: its version, then its code (any user granted FUNCTION LOAD can
        replace the server-wide library)."""
        nodes = routing.primaries(self.client)
        versions = library_versions(self.client)
        if self._load_library:
            # A node that already runs this very library is only checked: a user without
            # FUNCTION LOAD (the README's ACL) can then start with the default setting.
            stale = [node for node in nodes if not self._current(node, versions)]
            for node in stale:
                routing.on_node(self.client, node, "FUNCTION", "LOAD", "REPLACE", library.SOURCE)
            if stale:
                versions = library_versions(self.client)
        for node in nodes:
            where = routing.node_name(node)
            found = versions.get(where)
            if found is None:
                raise LibraryVersionMismatch(
                    f"Redis Functions library {library.NAME!r} is not loaded on {where}; "
                    f"this code needs version {library.VERSION} "
                    "(construct RedisStore with load_library=True to load it)"
                )
            if found != library.VERSION:
                raise LibraryVersionMismatch(
                    f"Redis Functions library {library.NAME!r} on {where} is version {found}, "
                    f"this code needs version {library.VERSION} "
                    "(construct RedisStore with load_library=True to replace it)"
                )
            code = self._code(node)
            if code != library.SOURCE:
                seen = "none" if code is None else library.fingerprint(code)
                raise LibraryVersionMismatch(
                    f"Redis Functions library {library.NAME!r} on {where} says version {found} "
                    f"but its code is not this version's (sha256 {seen}, expected "
                    f"{library.FINGERPRINT}): replaced by someone; an administrator must reload it"
                )
            self._check_grants(node)

    def _check_grants(self, node: ClusterNode | None) -> None:
        """Refuse to start when the user may not run a command the library calls: refused
        inside a function, it would fail the call after its first writes (not rolled back)."""
        probe = keys.fence_key(self.tag(0))  # any key of the namespace: not read
        refused = routing.on_node(
            self.client, node, "FCALL_RO", protocol.DS_GRANTS.function, 0, probe,
            *acl.LIBRARY_COMMANDS,
        )  # fmt: skip
        if not isinstance(refused, list) or not refused:
            return
        names = [text(name) for name in refused]
        where = routing.node_name(node)
        # worded as Redis words each refusal, so it is explained as one (store/redis/errors.py)
        if len(names) == len(acl.LIBRARY_COMMANDS):
            # every command refused on a key of the namespace: its key pattern
            raise NoPermissionError(
                "NOPERM this user has no permissions to access one of the keys used as "
                f"arguments (the namespace's, on {where})"
            )
        raise NoPermissionError(
            "NOPERM the user executing the script can't run this command or subcommand: no "
            f"permissions to run the '{names[0]}' command, which the Functions library calls "
            f"on {where} (refused: {', '.join(names)})"
        )

    def _code(self, node: ClusterNode | None) -> str | None:
        """The code of the library loaded on one primary (None: not loaded)."""
        listed = routing.on_node(
            self.client, node, "FUNCTION", "LIST", "LIBRARYNAME", library.NAME, "WITHCODE"
        )
        return library.code_in(listed)

    def _current(self, node: ClusterNode | None, versions: dict[str, str | None]) -> bool:
        """This node runs this code's library: same version and the very same code."""
        if versions.get(routing.node_name(node)) != library.VERSION:
            return False
        return self._code(node) == library.SOURCE

    def fcall(
        self,
        function: str,
        call_keys: list[str],
        args: Sequence[str | bytes],
        *,
        read_only: bool = False,
    ) -> Reply:
        """One FCALL (FCALL_RO when ``read_only``) on the node of ``call_keys``; a library
        gone from a primary is loaded again (when allowed) and the call made once more."""
        command = "FCALL_RO" if read_only else "FCALL"
        try:
            return routing.fcall(self.client, command, function, call_keys, args)
        except ResponseError as error:
            if "Function not found" in str(error) and self._load_library:
                # A primary that restarted empty or joined the cluster: load, retry once.
                self.ensure_library()
                try:
                    return routing.fcall(self.client, command, function, call_keys, args)
                except ResponseError as retry_error:
                    raise map_error(retry_error) from retry_error
            raise map_error(error) from error

    def call(
        self,
        command: protocol.Command,
        tag: str,
        args: Sequence[str | bytes],
        timeline: str = "",
    ) -> Reply:
        """One call of a declared command: its keys for the tag (and timeline), FCALL_RO when
        it is read-only."""
        call_keys = keys.command_keys(command, tag, timeline)
        return self.fcall(command.function, call_keys, args, read_only=command.read_only)

    def tag(self, partition: int) -> str:
        """The hash tag of a partition's keys in this namespace."""
        return keys.partition_tag(self.namespace, validate.partition(partition))

    def many(
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
            call_keys = keys.command_keys(command, self.tag(partition))
            for first in range(0, len(indexes), MANY_CHUNK):
                chunk = indexes[first : first + MANY_CHUNK]
                calls.append((call_keys, [*head, b"".join([packed[index] for index in chunk])]))
                members.append(chunk)
        out: list[Reply] = [None] * len(targets)
        for chunk, reply in zip(members, self._pipelined(command.function, calls), strict=True):
            for index, value in zip(chunk, array(reply), strict=True):
                out[index] = value
        return out

    def _pipelined(self, function: str, calls: Sequence[Call]) -> list[Reply]:
        """Pipelined FCALLs, one round trip per node, replies in call order.

        A reply the pipeline cannot settle (the library missing on a node, a cluster
        redirection while slots move) is redone by ``fcall``, which handles both.
        """
        found: list[Reply] = []
        for call, reply in zip(
            calls, routing.fcall_pipelined(self.client, function, calls), strict=True
        ):
            if isinstance(reply, ResponseError):
                mapped = map_error(reply)
                if mapped is not reply:
                    raise mapped from reply
                found.append(self.fcall(function, *call))
            elif isinstance(reply, Exception):
                raise reply
            else:
                found.append(reply)
        return found
