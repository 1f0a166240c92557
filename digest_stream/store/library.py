"""The Lua Functions library this code ships: its name, source and version."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from redis.exceptions import ResponseError

from digest_stream.store import routing
from digest_stream.store.replies import text
from digest_stream.store.routing import RedisClient

NAME = "digest_stream"
#: The Lua source, read once; the version constant inside it is the single source of truth.
SOURCE = resources.files("digest_stream.store").joinpath("digests.lua").read_text("utf-8")


def version_of(source: str) -> str:
    """The LIBRARY_VERSION a library source declares."""
    found = re.search(r"^local LIBRARY_VERSION = '([^']+)'", source, re.MULTILINE)
    if found is None:
        raise RuntimeError("digests.lua declares no LIBRARY_VERSION")
    return found.group(1)


#: Version of the library this code expects on the server.
VERSION = version_of(SOURCE)


def library_versions(client: RedisClient) -> dict[str, str | None]:
    """The library version on every primary ("redis" for a single node); None: not loaded.

    Read-only (FCALL_RO ds_version): the one check behind RedisStore.ensure_library and /readyz.
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


def fingerprint(code: str) -> str:
    """A short fingerprint of a library's code, for messages."""
    return hashlib.sha256(code.encode("utf-8")).hexdigest()[:16]


#: Fingerprint of this code's library.
FINGERPRINT = fingerprint(SOURCE)


def code_in(reply: object) -> str | None:
    """The code of library NAME in a ``FUNCTION LIST ... WITHCODE`` reply (RESP2
    flat pairs or RESP3 maps), None when it is not loaded."""
    for entry in reply if isinstance(reply, list) else []:
        fields = entry
        if isinstance(entry, list):
            fields = dict(zip(entry[::2], entry[1::2], strict=True))
        if not isinstance(fields, dict):
            continue
        values = {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in fields.items()}
        name, code = values.get("library_name"), values.get("library_code")
        if isinstance(name, bytes):
            name = name.decode("utf-8")
        if name == NAME and isinstance(code, (bytes, str)):
            return code.decode("utf-8") if isinstance(code, bytes) else code
    return None
