"""The Redis ACL the service's user needs, declared once (the README prints it for namespace
`d`; the secured local stack and the ACL tests build their users from it)."""

from __future__ import annotations

#: Commands the Functions library runs (checked against the caller's ACL inside FCALL).
LIBRARY_COMMANDS = (
    "append", "del", "exists", "get", "getrange", "hdel", "hexists", "hget", "hgetall",
    "hlen", "hmget", "hscan", "hset", "hsetnx", "lindex", "llen", "lrange", "lset", "pexpire",
    "pttl", "rename", "rpop", "rpush", "rpushx",
    "set", "setrange", "type", "unlink", "zadd", "zcard", "zcount", "zmscore", "zrange",
    "zrangebyscore", "zrem", "zrevrange", "zscore",
)  # fmt: skip
#: What the service itself sends: function calls, the library check (FUNCTION LIST), the
#: library load (optional), PING and TIME (the clock-skew check at start).
SERVICE_COMMANDS = ("fcall", "fcall_ro", "ping", "time", "function|list")


def acl_rules(namespace: str, *, load_library: bool, without: tuple[str, ...] = ()) -> list[str]:
    """The ACL SETUSER rules (after `on >password resetkeys`) for one namespace."""
    commands = [
        *SERVICE_COMMANDS,
        *(["function|load"] if load_library else []),
        *LIBRARY_COMMANDS,
    ]
    commands = [c for c in commands if c not in without]
    return [f"~{{{namespace}:*", "resetchannels", "-@all", *(f"+{c}" for c in commands)]
