"""A CDC backfill's compared position (a key PostgreSQL orders) held in integer splits: any key texts
round-trip, whatever their length or characters; a shorter position after a longer one ignores the
older splits past its length; an earlier release's offsets mean no key read."""

from __future__ import annotations

import pytest

from sparkwave.connectors.postgres_cdc_position import BACKFILL, is_text, span, text_position, text_splits

KEYS = [(), ("",), ("a",), ("12345678",), ("123456789",), ("zoë", "-1.50"), ('quote " and \\ back', "x\ny\tz"),
        ("\x00\x7f\u2028😀",), ("k" * 2700,), ("2026-01-01 00:00:00+00", "red", "NaN")]


@pytest.mark.parametrize("key", KEYS, ids=range(len(KEYS)))
def test_any_key_texts_round_trip_through_signed_64_bit_splits(key):
    splits = text_splits(key)
    assert is_text(splits) and splits[BACKFILL] == 0
    assert all(-(1 << 63) <= v < (1 << 63) for v in splits.values())
    assert text_position(splits) == key


def test_a_shorter_position_ignores_the_splits_a_longer_one_left():
    long, short = text_splits(("a-much-longer-key-than-the-next",)), text_splits(("b",))
    committed = {**long, **short}  # the catalog keeps splits an epoch's ranges no longer name
    assert len(committed) > len(short) and text_position(committed) == ("b",)
    ranges = span(long, short)
    assert set(ranges) == set(long) and text_position({s: b for s, (_, b) in ranges.items()}) == ("b",)
    assert text_position({s: a for s, (a, _) in ranges.items()}) == ("a-much-longer-key-than-the-next",)


def test_offsets_without_the_layout_hold_no_key_and_garbage_is_named():
    assert not is_text({BACKFILL: 0}) and text_position({BACKFILL: 0, f"{BACKFILL}.1": 0}) == ()
    with pytest.raises(ValueError, match="do not hold a key"):
        text_position({f"{BACKFILL}.t0": 4, f"{BACKFILL}.t1": 12345})
    with pytest.raises(ValueError, match="do not hold a key"):
        text_position(text_splits(("a",)) | {f"{BACKFILL}.t0": 2})
