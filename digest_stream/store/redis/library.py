"""The Lua Functions library this code ships: its name, its version, and its source assembled.

The Lua is kept in files under ``store/redis/lua/``: the shared helpers in parts, one concern
each, and one file per command under ``lua/commands/`` (BullMQ keeps its commands the same
way), every file opening with what it holds and what it needs from the files before it.
``SOURCE`` joins them into ONE library for ONE ``FUNCTION LOAD``: the ``#!lua`` line, the
constants Python defines (``LUA_CONSTANTS``: store/limits.py and the wire protocol of
store/redis/protocol.py), the parts in ``PARTS`` order, the command files in ``COMMANDS``
order, then one ``redis.register_function`` per command. Redis runs each registered function
atomically whatever file its code came from.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from importlib import resources

from digest_stream.store import limits
from digest_stream.store.base import CONTROLS
from digest_stream.store.redis import protocol
from digest_stream.store.redis.policy_wire import POLICY_FIELDS
from digest_stream.vocabulary import CONTROL_SPECS, Argument, State

#: The library's name on the server (``FUNCTION LIST LIBRARYNAME``).
NAME = "digest_stream"
#: Version of the library this code expects on the server (``ds_version`` answers it): bump it
#: with any change of the Lua, so a node running other code is told apart by version first.
VERSION = "34"

#: The parts of ``store/redis/lua/``, in the order they are joined: each uses only names that the
#: constants or the parts before it define (a local not yet declared would be read as a global).
PARTS = (
    "guards",
    "keys",
    "encoding",
    "helpers",
    "snoozes",
    "containers",
    "container_writes",
    "controls",
    "digests",
    "leading",
    "batches",
    "batch_writes",
    "upgrades",
    "add_args",
    "record_rules",
    "add",
    "leading_lane",
    "append_lane",
)
#: The command files (``lua/commands/<function>.lua``), joined after the parts, each declaring
#: its command's callback; the registrations follow them.
COMMANDS = tuple(command.function for command in protocol.COMMANDS)

#: Written at the top of the library as ``local NAME = value``: the Lua parts define none of
#: these themselves, so Python's values are the only ones.
LUA_CONSTANTS: dict[str, object] = {
    "LIBRARY_VERSION": VERSION,
    "MAX_NAME_BYTES": limits.MAX_NAME_BYTES,
    "MAX_OFFSET": limits.MAX_OFFSET,
    "MAX_TOPIC_ID_BYTES": limits.MAX_TOPIC_ID_BYTES,
    "MAX_TTL": limits.MAX_TTL,
    "MAX_SLICE": limits.MAX_SLICE,
    "FLUSH_AT_FLOOR": limits.FLUSH_AT_FLOOR,
    "COOLING_MARGIN": limits.COOLING_MARGIN,
    "INDEX_ROTATE_AFTER": limits.INDEX_ROTATE_AFTER,
    "INLINE_MAX_RECORDS": limits.INLINE_MAX_RECORDS,
    "DIGEST_ID_LENGTH": limits.DIGEST_ID_LENGTH,
    "OPEN_NONCE_LENGTH": limits.OPEN_NONCE_LENGTH,
    "SCHEDULE_REPLY_TTL": limits.SCHEDULE_REPLY_TTL,
    # the letter a meta records, by the reason's name in lower case (CAUSES.flush_at)
    "CAUSES": {reason.lower(): letter for reason, letter in limits.CAUSES.items()},
    # by code, the kind of the control's argument (none, name, time) and what an error calls it
    "CONTROL_ARGUMENTS": tuple(
        (spec.argument.value, f"{spec.field} id" if spec.argument is Argument.NAME else spec.field)
        for spec in CONTROL_SPECS.values()
    ),
    # the timeline states ds_inspect answers, by member name in lower case (STATES.cooling)
    "STATES": {state.name.lower(): state.value for state in State},
    # each packed policy option's name and guard, in the packed order (policy_wire.py)
    "POLICY_FIELDS": POLICY_FIELDS,
    # the wire protocol: formats, widths, key suffixes and layouts, reply positions
    "ADD_NUMBERING": protocol.ADD_NUMBERING,
    **protocol.lua_constants(),
}

_INTRO = """\
--
-- digest-stream store: every timeline/schedule state transition, one atomic
-- function per operation (see docs/store.md for the command table).
-- Assembled by digest_stream/store/redis/library.py: the constants below come from
-- Python (store/limits.py, store/policy.py, store/redis/protocol.py), then the parts of
-- store/redis/lua/ in library.PARTS order, the command files of lua/commands/, and their
-- registrations.
"""

#: Printable ASCII but the quote and the backslash: written between quotes as it is.
_PLAIN_TEXT = re.compile(r"^[ !-&(-\[\]-~]*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def lua_literal(value: object) -> str:
    """A Lua literal of a number, a plain string, a tuple (an array) or a mapping by name."""
    if isinstance(value, bool):
        raise TypeError("no booleans among the library's constants")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)  # repr round-trips a double, and Lua reads it back exactly
    if isinstance(value, str) and _PLAIN_TEXT.match(value):
        return f"'{value}'"
    if isinstance(value, tuple):
        return "{" + ", ".join(lua_literal(item) for item in value) + "}"
    if isinstance(value, Mapping) and all(
        isinstance(key, str) and _IDENTIFIER.match(key) for key in value
    ):
        return "{" + ", ".join(f"{key} = {lua_literal(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"no Lua literal for {value!r}")


#: The part that defines the control handlers; CONTROL_HANDLERS follows it.
HANDLERS_PART = "controls"


def handler(control: str) -> str:
    """The Lua function that applies a control (``controls.<value>``, in ``lua/controls.lua``)."""
    return f"controls.{control}"


def handler_table(part: str) -> str:
    """``CONTROL_HANDLERS``: each control's handler by its code (its position in CONTROLS,
    from 1), written after the part that defines them, which must define every one."""
    missing = [handler(c) for c in CONTROLS if f"function {handler(c)}(" not in part]
    if missing:
        raise ValueError(f"lua/{HANDLERS_PART}.lua defines no {', '.join(missing)}")
    return f"local CONTROL_HANDLERS = {{{', '.join(handler(c) for c in CONTROLS)}}}\n"


def part_source(name: str) -> str:
    """The text of one part of ``store/redis/lua/`` (``commands/<function>``: a command's)."""
    folder = resources.files("digest_stream.store.redis").joinpath("lua")
    return folder.joinpath(f"{name}.lua").read_text("utf-8")


def command_source(function: str) -> str:
    """The text of one command's file, ``lua/commands/<function>.lua``."""
    return part_source(f"commands/{function}")


def registrations() -> str:
    """One ``redis.register_function`` per command of the protocol, read-only ones flagged."""
    return "".join(
        f"redis.register_function{{function_name = '{command.function}', "
        f"callback = {command.callback}"
        + (", flags = {'no-writes'}" if command.read_only else "")
        + "}\n"
        for command in protocol.COMMANDS
    )


def assemble(parts: Mapping[str, str], commands: Mapping[str, str]) -> str:
    """The library: the ``#!lua`` line, the constants, ``parts`` in ``PARTS`` order (the
    control handlers' table after theirs), the ``commands`` in ``COMMANDS`` order, then
    their registrations."""
    constants = "".join(
        f"local {name} = {lua_literal(value)}\n" for name, value in LUA_CONSTANTS.items()
    )
    texts = [
        parts[name] + (handler_table(parts[name]) if name == HANDLERS_PART else "")
        for name in PARTS
    ]
    body = "\n".join([*texts, *(commands[name] for name in COMMANDS)])
    return f"#!lua name={NAME}\n{_INTRO}\n{constants}\n{body}\n{registrations()}"


#: The library's code as loaded on every primary (and compared byte for byte with theirs).
SOURCE = assemble(
    {name: part_source(name) for name in PARTS},
    {name: command_source(name) for name in COMMANDS},
)


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
