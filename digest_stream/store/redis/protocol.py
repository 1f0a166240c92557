"""The store's wire protocol, declared once: every function of the Lua library, its keys, its
arguments (with the packed formats) and its reply.

Python packs and decodes from these declarations (``packing.py``, ``store.py``, ``keys.py``,
``replies.py``); ``library.py`` writes what the Lua needs of them (formats, widths, key
suffixes and layouts, reply positions) as constants at the top of the library, and registers
each command's callback from ``COMMANDS``. Each command's Lua file (``lua/commands/``) opens
with its KEYS, ARGV and Reply, which a unit test compares with ``COMMANDS``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from digest_stream.store.base import CONTROLS

# Keys -------------------------------------------------------------------------------------

#: The suffix of each key of a partition tag T (``T:<suffix>``; a timeline's keys
#: ``T:<suffix>:<timeline>``). One letter keeps key names, and so memory per key, short.
KEY_SUFFIXES = {
    "waiting": "w",  # zset: timeline -> due time
    "ready": "r",  # zset: timeline -> time it became ready
    "fence": "o",  # string: last applied Kafka offset of the partition and its topic id
    "timeline": "t",  # record container (lua/containers.lua): pending records + meta
    "digest": "d",  # record container of the open digest, same encodings
    "scratch": "s",  # zset that exists only inside one call: Redis sorts large digests in it
    # hash library 18 kept leading digests in flight in: only read to be migrated and removed
    # (lua/upgrades.lua; docs/store.md, Upgrades)
    "leading": "l",
    "moved": "m",  # string: the last ds_schedule's nonce and reply, kept for a re-send of it
    # the leading edge's batch form (lua/batches.lua; docs/store.md, The leading edge)
    "index": "i",  # hash: timeline -> its digest id in a batch (current generation)
    "previous_index": "j",  # hash: the same, the previous generation
    "generations": "g",  # hash: when the index generation started, when each one is dead
    "batches": "b",  # zset: the open batches: nonce -> time their add opened them
    "batch": "n",  # string T:n:<nonce>: one add's batch-form digests
    "batch_digests": "x",  # list T:x:<nonce>: that add's digests in the ordinary form
    "snoozes": "z",  # hash: timeline -> its snooze's end, " u" when an urgent record passes it
}
#: Keys that name a timeline (``T:<suffix>:<timeline>``); the others are the partition's.
TIMELINE_KEYS = ("timeline", "digest")

#: The KEYS a command takes, in order, by layout name.
KEY_LAYOUTS = {
    "add": ("fence", "waiting", "ready"),
    "partition": ("waiting", "ready", "fence"),
    "timeline": ("timeline", "digest", "waiting", "ready"),
    "many": ("waiting", "ready"),
    "fence": ("fence",),
    "none": (),
}

# Packed arguments -------------------------------------------------------------------------

#: The struct letter of each field kind, in Lua's ``struct`` (Redis's) and in Python's.
#: ``str16`` and ``str32`` are a byte string after its length (2 or 4 bytes).
_LUA_KIND = {
    "u8": "B",
    "u16": "H",
    "u32": "I4",
    "u64": "I8",
    "f64": "d",
    "str16": "Hc0",
    "str32": "I4c0",
}
_PY_KIND = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "f64": "d", "str16": "H", "str32": "I"}


@dataclass(frozen=True)
class Packed:
    """One argument packing a run of entries, each these fields (name, kind), big-endian."""

    name: str
    fields: tuple[tuple[str, str], ...]

    @property
    def lua_format(self) -> str:
        """Its ``struct.unpack`` format for one entry, as the Lua reads it."""
        return ">" + "".join(_LUA_KIND[kind] for _, kind in self.fields)

    @property
    def heads(self) -> tuple[struct.Struct, ...]:
        """Python's structs of an entry: each fixed run up to a string's length (the string's
        bytes follow it), then the run after the last string (if any)."""
        runs, current = [], ">"
        for _, kind in self.fields:
            current += _PY_KIND[kind]
            if kind.startswith("str"):
                runs.append(current)
                current = ">"
        if current != ">":
            runs.append(current)
        return tuple(struct.Struct(run) for run in runs)

    def pack(self, *values: object) -> bytes:
        """One entry (the hot paths use ``heads`` directly; this serves tests and tools)."""
        if len(values) != len(self.fields):
            raise ValueError(f"{self.name} takes {len(self.fields)} fields")
        heads = iter(self.heads)
        out: list[bytes] = []
        run: list[object] = []
        for value, (_, kind) in zip(values, self.fields, strict=True):
            if kind.startswith("str"):
                data = value.encode() if isinstance(value, str) else bytes(cast(bytes, value))
                out += [next(heads).pack(*run, len(data)), data]
                run = []
            else:
                run.append(value)
        if run:
            out.append(next(heads).pack(*run))
        return b"".join(out)


#: A timeline of an add: the policy it follows (index from 1 among the call's policies), name.
TIMELINE = Packed("TIMELINE", (("policy", "u32"), ("timeline", "str16")))
#: A record of an add: its timeline (index from 1), id, timestamp, offset (a double: exact up to
#: MAX_OFFSET; an 8-byte integer measured no cheaper to read), payload.
RECORD = Packed(
    "RECORD",
    (
        ("timeline", "u32"),
        ("id", "str16"),
        ("timestamp", "f64"),
        ("offset", "f64"),
        ("payload", "str32"),
    ),
)
#: A control operation of an add: how many of the call's records come before it, its offset,
#: its operation (CONTROL_CODES, from 1), its timeline's policy (index from 1, as a TIMELINE's:
#: a cancel may put back the cool-down a flush cut short), its timeline, its argument (as
#: ``NewRecord.id`` carries it: a cancel's record id; the Lua reads it by CONTROL_ARGUMENTS).
CONTROL = Packed(
    "CONTROL",
    (
        ("before", "u32"),
        ("offset", "f64"),
        ("operation", "u8"),
        ("policy", "u32"),
        ("timeline", "str16"),
        ("argument", "str16"),
    ),
)
#: A target of ds_open_many and ds_close_many: the policy it follows (index from 1 among the
#: call's policies), its timeline, its digest id. One packed argument for all of a call's
#: targets: three arguments per target cost the client about 2.4 us a target (bench.hotpath).
TARGET = Packed("TARGET", (("policy", "u32"), ("timeline", "str16"), ("digest_id", "str16")))

#: Operation codes of CONTROL: each control's position in CONTROLS, from 1 (the Lua's
#: CONTROL_ARGUMENTS and CONTROL_HANDLERS are written in the same order, library.py).
CONTROL_CODES: dict[str, int] = {control: code for code, control in enumerate(CONTROLS, start=1)}

# Commands ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """A command's reply: an array of these fields by position (``fields``), or one value
    (``value``); ``each``: one such reply per target of the call."""

    name: str = ""
    fields: tuple[str, ...] = ()
    value: str = ""
    each: bool = False

    @property
    def at(self) -> dict[str, int]:
        """Each field's position from 0 (Python's index)."""
        return {name: index for index, name in enumerate(self.fields)}

    def render(self) -> str:
        """As a command file's header lists it."""
        shape = ", ".join(self.fields) if self.fields else self.value
        return f"per target: {shape}" if self.each else shape


@dataclass(frozen=True)
class Command:
    """One function of the library: its name, the layout of its KEYS, its ARGV by name and its
    reply. ARGV names: ``policy`` one packed policy (POLICY_WIDTH arguments, policy_wire.py),
    ``policies`` a call's table of them (their count, then each one's), ``name?`` optional and
    last; a packed argument (``timelines``, ``targets``, ...) one run of ``Packed`` entries."""

    function: str
    keys: str
    args: tuple[str, ...]
    reply: Reply
    read_only: bool = False

    @property
    def callback(self) -> str:
        """The Lua function that serves it (declared in ``lua/commands/<function>.lua``)."""
        return self.function.removeprefix("ds_")

    @property
    def key_names(self) -> tuple[str, ...]:
        """Its KEYS, in order."""
        return KEY_LAYOUTS[self.keys]

    def arguments(self, **values: str | bytes) -> list[str | bytes]:
        """Its ARGV from values by name, in the declared order (commands of fixed ARGV)."""
        if set(values) != set(self.args):
            raise TypeError(f"{self.function} takes {', '.join(self.args)}")
        return [values[name] for name in self.args]

    def render_args(self) -> str:
        """Its ARGV as a command file's header lists it."""
        return ", ".join(self.args) or "none"


ADD_REPLY = Reply(
    "ADD_REPLY",
    (
        "ready", "added", "skipped", "dropped", "fence_before", "fence_after", "fence_topic",
        "cancelled", "led",
    ),
)  # fmt: skip
#: An opened digest: its records flat (id, timestamp, payload, ...) newest first, ``expired``
#: 1 when earlier records had expired, ``cause`` the letter saying why it was due.
OPEN_REPLY = Reply("OPEN_REPLY", ("id", "opened_at", "dropped", "records", "expired", "cause"))
#: Timelines moved (flat: timeline, score, ...) and ``more`` (1: more remain for the next call).
DUE_REPLY = Reply("DUE_REPLY", ("moved", "more"))
INSPECT_REPLY = Reply(
    "INSPECT_REPLY",
    (
        "state",
        "due",
        "last_delivery",
        "pending",
        "digest_id",
        "open_records",
        "dropped",
        "cause",
        "snoozed",
    ),
)
STATS_REPLY = Reply("STATS_REPLY", ("waiting", "ready", "oldest_due", "fence"))
FENCE_REPLY = Reply("FENCE_REPLY", ("offset", "topic_id"))


DS_VERSION = Command("ds_version", "none", (), Reply(value="version"), read_only=True)
#: Which of the commands named (acl.LIBRARY_COMMANDS, one argument each) the caller may not
#: run on a key of its namespace: checked at start.
DS_GRANTS = Command(
    "ds_grants", "none", ("key", "commands"), Reply(value="refused"), read_only=True
)
DS_ADD = Command(
    "ds_add",
    "add",
    (
        "now", "partition_ttl", "inline_records", "expected_fence", "through_offset", "topic_id",
        "open_nonce", "numbering", "policies", "timelines", "records", "controls?", "urgent?",
    ),
    ADD_REPLY,
)  # fmt: skip
#: ds_add's ``urgent?`` (sent only by a batch holding an urgent record, after its controls or
#: ""): one byte per record of the call, in order, URGENT_MARK for an urgent one (NewRecord.urgent)
#: and "0" for the others. Bytes, not a packed list: no format to declare in the library.
URGENT_MARK = b"1"
#: ds_add's ``numbering``: how a led digest's id is numbered (the timeline's place in the call,
#: library 30). Sent on every add, so the add of a caller older than the library (whose ARGV has
#: no such field) is refused before anything is written instead of misreading its reply.
ADD_NUMBERING = "timelines"
#: ds_add's ARGV before its policy blocks (the policies and the packed arguments follow).
ADD_HEAD = DS_ADD.args[: DS_ADD.args.index("policies")]
DS_SCHEDULE = Command(
    "ds_schedule", "partition", ("now", "partition_ttl", "limit", "nonce"), DUE_REPLY
)
DS_MAINTENANCE = Command(
    "ds_maintenance", "partition", ("deadline", "now", "partition_ttl", "limit"), DUE_REPLY
)
DS_OPEN = Command("ds_open", "timeline", ("timeline", "digest_id", "now", "policy"), OPEN_REPLY)
DS_CLOSE = Command(
    "ds_close",
    "timeline",
    ("timeline", "digest_id", "now", "partition_ttl", "policy"),
    Reply(value="closed"),
)
DS_OPEN_MANY = Command(
    "ds_open_many",
    "many",
    ("now", "policies", "targets"),
    Reply("OPEN_REPLY", OPEN_REPLY.fields, each=True),
)
DS_CLOSE_MANY = Command(
    "ds_close_many",
    "many",
    ("now", "partition_ttl", "policies", "targets"),
    Reply(value="closed", each=True),
)
#: ``closed`` 1 when the batch was open and is closed now, ``ordinary`` {timeline, closed, ...}
#: of the targets closed as ordinary digests.
CLOSE_LEADING_REPLY = Reply("CLOSE_LEADING_REPLY", ("closed", "ordinary"))
DS_CLOSE_LEADING = Command(
    "ds_close_leading",
    "many",
    ("now", "partition_ttl", "nonce", "count", "policies", "targets"),
    CLOSE_LEADING_REPLY,
)
DS_DELETE = Command("ds_delete", "timeline", ("timeline",), Reply(value="removed"))
DS_INSPECT = Command("ds_inspect", "timeline", ("timeline",), INSPECT_REPLY, read_only=True)
DS_STATS = Command("ds_stats", "partition", (), STATS_REPLY, read_only=True)
DS_FENCE_GET = Command("ds_fence_get", "fence", (), FENCE_REPLY, read_only=True)
DS_FENCE_SET = Command("ds_fence_set", "fence", ("offset", "topic_id"), Reply(value="1"))

#: Every function the library registers, in the order it registers them.
COMMANDS = (
    DS_VERSION, DS_GRANTS, DS_ADD, DS_SCHEDULE, DS_MAINTENANCE, DS_OPEN, DS_CLOSE, DS_OPEN_MANY,
    DS_CLOSE_MANY, DS_CLOSE_LEADING, DS_DELETE, DS_INSPECT, DS_STATS, DS_FENCE_GET, DS_FENCE_SET,
)  # fmt: skip


def lua_constants() -> dict[str, object]:
    """What the Lua reads of the protocol, by name (written as ``local NAME = value``)."""
    replies: Mapping[str, Reply] = {
        reply.name: reply for command in COMMANDS if (reply := command.reply).fields
    }
    return {
        "KEY_SUFFIXES": dict(KEY_SUFFIXES),
        "KEY_LAYOUTS": {name: layout for name, layout in KEY_LAYOUTS.items() if layout},
        **{
            f"{packed.name}_FORMAT": packed.lua_format
            for packed in (TIMELINE, RECORD, CONTROL, TARGET)
        },
        # ds_add's ARGV by name, up to its policies (the packed arguments follow them)
        "ADD_ARGS": {name: index for index, name in enumerate((*ADD_HEAD, "policies"), 1)},
        # each reply's positions from 1, by field name
        **{name: {f: i for i, f in enumerate(r.fields, start=1)} for name, r in replies.items()},
    }
