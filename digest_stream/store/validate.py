"""Argument checks shared by both stores (the Lua guards apply the same rules)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from digest_stream.store.base import (
    CONTROLS,
    DIGEST_ID_PATTERN,
    NAMESPACE_PATTERN,
    OPEN_NONCE_PATTERN,
    DigestTarget,
    NewRecord,
)
from digest_stream.store.errors import InvalidArgument
from digest_stream.store.limits import (
    DIGEST_ID_LENGTH,
    MAX_NAME_BYTES,
    MAX_OFFSET,
    MAX_SLICE,
    MAX_TOPIC_ID_BYTES,
    OPEN_NONCE_LENGTH,
)
from digest_stream.store.policy import PolicyResolver, TimelinePolicy
from digest_stream.vocabulary import CONTROL_SPECS, Argument, Control

#: Partitions are Kafka partition numbers (int32).
MAX_PARTITION = 2**31 - 1


def namespace(value: object) -> str:
    """A namespace (NAMESPACE_PATTERN)."""
    if not isinstance(value, str) or not NAMESPACE_PATTERN.match(value):
        raise InvalidArgument(f"namespace must match {NAMESPACE_PATTERN.pattern}, got {value!r}")
    return value


def partition(value: object) -> int:
    """A Kafka partition number."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PARTITION:
        raise InvalidArgument(f"partition must be an int in [0, {MAX_PARTITION}], got {value!r}")
    return value


def time_value(value: object, name: str) -> float:
    """A finite, non-negative time in seconds."""
    if type(value) is float and 0.0 <= value < math.inf:
        return value  # the common case, checked per record on the ingest hot path
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{name} must be a number of seconds, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise InvalidArgument(f"{name} must be finite and >= 0, got {value!r}")
    return number


def name(value: object, what: str) -> str:
    """A timeline name or record id: 1..MAX_NAME_BYTES bytes of UTF-8."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, got {value!r}")
    if value.isascii():  # one byte per character, and no surrogate can be ASCII
        if not 1 <= len(value) <= MAX_NAME_BYTES:
            raise InvalidArgument(f"{what} must be 1..{MAX_NAME_BYTES} bytes, got {len(value)}")
        return value
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as error:  # lone surrogates cannot reach Redis as UTF-8
        raise InvalidArgument(f"{what} is not valid UTF-8 text: {value!r}") from error
    if not 1 <= size <= MAX_NAME_BYTES:
        raise InvalidArgument(f"{what} must be 1..{MAX_NAME_BYTES} bytes, got {size}")
    return value


def plain_name(value: object) -> bool:
    """A name ``name`` accepts without encoding it (the common timeline and record id): the
    hot paths check this inline and call ``name`` only for the others."""
    return type(value) is str and value.isascii() and 0 < len(value) <= MAX_NAME_BYTES


def digest_id(value: object) -> str:
    """A digest id: DIGEST_ID_LENGTH lowercase hex characters."""
    if not isinstance(value, str) or not DIGEST_ID_PATTERN.match(value):
        raise InvalidArgument(
            f"digest id must be {DIGEST_ID_LENGTH} lowercase hex characters, got {value!r}"
        )
    return value


def open_nonce(value: object, what: str = "open nonce") -> str | None:
    """An add's leading-edge nonce, or a schedule call's (``what``): OPEN_NONCE_LENGTH
    lowercase hex characters, or None."""
    if value is not None and (not isinstance(value, str) or not OPEN_NONCE_PATTERN.match(value)):
        raise InvalidArgument(
            f"{what} must be {OPEN_NONCE_LENGTH} lowercase hex characters, got {value!r}"
        )
    return value


def leading_targets(nonce: object, targets: Sequence[DigestTarget]) -> str:
    """close_leading's nonce (the add's open nonce, required) and its targets: one add's
    digests, so of one partition."""
    checked = open_nonce(nonce, "nonce")
    if checked is None:
        raise InvalidArgument("close_leading needs the nonce of the add that led them")
    if any(target[0] != targets[0][0] for target in targets):
        raise InvalidArgument("close_leading closes the digests of one add: one partition")
    return checked


def offset(value: object) -> int:
    """A Kafka offset."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_OFFSET:
        raise InvalidArgument(f"offset must be an int in [0, 2**53], got {value!r}")
    return value


def limit(value: object) -> int:
    """How many timelines one schedule or maintenance call may move."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLICE:
        raise InvalidArgument(f"limit must be an int in [1, {MAX_SLICE}], got {value!r}")
    return value


def policy(value: object, timeline: str) -> TimelinePolicy:
    """A policy as returned by a resolver: a TimelinePolicy, whose construction checked each
    option (type, bounds, finite) and the rules across them."""
    if not isinstance(value, TimelinePolicy):
        raise InvalidArgument(f"policy for {timeline!r} is not a TimelinePolicy: {value!r}")
    return value


def policies(
    default: TimelinePolicy | None, resolver: PolicyResolver | None
) -> tuple[TimelinePolicy, PolicyResolver]:
    """A store's default policy, checked (``TimelinePolicy()`` when None), and its resolver
    (the default for every timeline when None)."""
    checked = policy(TimelinePolicy() if default is None else default, "<default>")
    return checked, (resolver if resolver is not None else (lambda _timeline: checked))


def records(values: Sequence[NewRecord], through: int | None = None) -> bool:
    """Every record of an add batch, before anything is written; ``through`` (already
    checked by add_arguments) must cover every record's offset. Returns whether the batch
    holds control operations.

    One pass over the batch (the ingest hot path), in the order the Lua guard checks.
    """
    controls = False
    for record in values:
        if not isinstance(record, NewRecord):
            raise InvalidArgument(f"expected NewRecord, got {record!r}")
        name(record.timeline, "timeline")
        name(record.id, "record id")
        time_value(record.timestamp, "record timestamp")
        offset(record.offset)
        if not isinstance(record.payload, bytes):
            raise InvalidArgument(f"payload must be bytes, got {type(record.payload).__name__}")
        if through is not None and record.offset > through:
            raise InvalidArgument(f"record offset {record.offset} is past through_offset {through}")
        if type(record.urgent) is not bool:
            raise InvalidArgument(f"urgent must be a bool, got {record.urgent!r}")
        if record.control is not None:
            if record.control not in CONTROLS:
                raise InvalidArgument(f"control must be one of {CONTROLS}, got {record.control!r}")
            if CONTROL_SPECS[Control(record.control)].argument is Argument.TIME:
                _carried_time(record.id)
            controls = True
    return controls


def _carried_time(carried: str) -> float:
    """A time control's argument as it is carried (``NewRecord.id``: the time's text)."""
    try:
        number = float(carried)
    except ValueError:
        raise InvalidArgument(f"a time control's id must be its time, got {carried!r}") from None
    return time_value(number, "control time")


#: A Kafka topic id is a UUID in base64 (22 characters); the library accepts these
#: characters only, so an id never holds the "|" that separates it from the offset.
_TOPIC_ID = re.compile(rf"^[A-Za-z0-9+/=_-]{{1,{MAX_TOPIC_ID_BYTES}}}$")


def topic_id(value: object) -> str | None:
    """A topic id, or None when not known."""
    if value is None:
        return None
    if not isinstance(value, str) or not _TOPIC_ID.match(value):
        raise InvalidArgument(
            f"topic id must be 1..{MAX_TOPIC_ID_BYTES} base64 characters, got {value!r}"
        )
    return value


def add_arguments(
    now: object,
    expected_fence: object,
    through_offset: object,
    topic: object,
    nonce: object,
) -> tuple[float, int | None, int | None, str | None, str | None]:
    """An add's arguments besides its partition and records, checked: now, the optional fence
    (expected, through; records() then checks ``through`` per record), topic id, open nonce."""
    checked_now = time_value(now, "now")
    expected = None if expected_fence is None else offset(expected_fence)
    through = None if through_offset is None else offset(through_offset)
    return checked_now, expected, through, topic_id(topic), open_nonce(nonce)
