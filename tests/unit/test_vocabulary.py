"""One enum per vocabulary: the store's letters, the Avro symbols and the controls follow it."""

from __future__ import annotations

import json
from importlib import resources

from digest_stream.ops.metrics import SCHEDULE_REASONS
from digest_stream.store.base import CONTROLS, REASONS
from digest_stream.store.limits import CAUSES
from digest_stream.store.redis.library import LUA_CONSTANTS, SOURCE
from digest_stream.vocabulary import Control, DigestReason
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


def test_controls_are_one_enum_on_the_wire_in_the_store_and_in_lua() -> None:
    assert tuple(Control) == CONTROLS
    assert set(control.OPERATIONS) <= {c.value for c in Control}
    assert LUA_CONSTANTS["CONTROL_CODES"] == CONTROLS
    assert "if operation == CONTROLS.flush then" in SOURCE


def test_metrics_label_every_schedule_reason() -> None:
    assert tuple(r.value for r in ScheduleReason) == SCHEDULE_REASONS
