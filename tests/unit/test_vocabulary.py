"""One enum per vocabulary: the store's letters, the Avro symbols, the controls and the timeline
states follow it."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from digest_stream.ops.metrics import SCHEDULE_REASONS
from digest_stream.store.base import CONTROLS, REASONS
from digest_stream.store.limits import CAUSES
from digest_stream.store.memory.controls import HANDLERS
from digest_stream.store.redis.library import LUA_CONSTANTS, SOURCE
from digest_stream.vocabulary import CONTROL_SPECS, Argument, Control, DigestReason, State
from digest_stream.wire import control
from digest_stream.wire.models import ScheduleReason
from digest_stream.wire.symbols import REASON_INDEX, enum_symbols


def test_the_store_causes_are_the_reasons_with_a_letter_each_distinct() -> None:
    assert list(CAUSES) == [r.value for r in DigestReason if r is not DigestReason.RECOVERED]
    assert tuple(CAUSES) == REASONS
    assert len(set(CAUSES.values())) == len(CAUSES)
    assert all(len(letter) == 1 for letter in CAUSES.values())
    # the Lua library reads the same letters, by the reason's name in lower case
    assert LUA_CONSTANTS["CAUSES"] == {r.lower(): letter for r, letter in CAUSES.items()}
    assert "local CAUSES = {immediate = 'i'," in SOURCE


def test_the_avro_index_is_the_schemas_symbol_order() -> None:
    text = resources.files("digest_stream.wire").joinpath("schemas", "digest.avsc").read_text()
    symbols = enum_symbols(json.loads(text), "DigestReason")
    assert [REASON_INDEX[DigestReason(symbol)] for symbol in symbols] == list(range(len(symbols)))
    assert set(REASON_INDEX) == set(DigestReason)
    assert enum_symbols({"fields": [{"type": ["null", "int"]}]}, "DigestReason") == []


def test_controls_are_one_declaration_on_the_wire_in_the_store_and_in_lua() -> None:
    assert tuple(Control) == CONTROLS == tuple(CONTROL_SPECS)
    assert tuple(dict.fromkeys(s.sent_as for s in CONTROL_SPECS.values())) == control.OPERATIONS
    # the Lua reads each code's argument and calls its handler in the declaration's order
    assert [kind for kind, _ in LUA_CONSTANTS["CONTROL_ARGUMENTS"]] == [  # type: ignore[attr-defined]
        s.argument for s in CONTROL_SPECS.values()
    ]
    handlers = ", ".join(f"controls.{c}" for c in Control)
    assert f"local CONTROL_HANDLERS = {{{handlers}}}" in SOURCE
    assert set(HANDLERS) == set(Control)  # the model's dispatch


def test_each_control_message_is_the_control_it_declares() -> None:
    for spec in CONTROL_SPECS.values():
        argument = {Argument.NONE: None, Argument.NAME: "r-1", Argument.TIME: 1.5}[spec.argument]
        message = control.Control(spec.sent_as, argument)
        assert control.decode(control.encode(message)) == message
        assert message.spec is spec
        assert spec.parsed(spec.carried(argument) or "control") == argument
    assert control.encode(control.Control("cancel", "r-1")) == control.MAGIC + (
        b'{"op":"cancel","record":"r-1"}'
    )  # the bytes of before the declaration
    with pytest.raises(ValueError, match="takes no"):
        control.decode(control.MAGIC + b'{"op":"flush","record":"r-1"}')


def test_timeline_states_are_one_enum_in_python_and_lua() -> None:
    assert LUA_CONSTANTS["STATES"] == {s.name.lower(): s.value for s in State}
    assert [s.value for s in State] == ["absent", "waiting", "ready", "cooling"]


def test_metrics_label_every_schedule_reason() -> None:
    assert tuple(r.value for r in ScheduleReason) == SCHEDULE_REASONS
