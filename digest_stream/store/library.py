"""The Lua Functions library this code ships: its name, source and version."""

from __future__ import annotations

import re
from importlib import resources

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
