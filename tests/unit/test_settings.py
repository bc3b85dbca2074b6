"""Settings (no Spark): typed reads, checked writes, and a bad stored value that fails only what
reads it, naming it."""

from __future__ import annotations

import pytest

from sparkwave.core.catalog import Catalog
from sparkwave.core.errors import SparkwaveError
from sparkwave.meta.creating_job import Strategy
from sparkwave.meta.settings import Settings


def test_defaults_and_stored_values_read_typed(tmp_path):
    settings = Settings(Catalog(tmp_path / "c.db"))
    assert (settings.retention_seconds, settings.compaction_epochs, settings.backfill_strategy,
            settings.background_ddl, settings.backfill_rate_limit, settings.backfill_chunk_rows) == \
        (3600.0, 50, Strategy.SNAPSHOT, False, None, 10_000_000)
    for key, text in [("retention_seconds", "0.5"), ("compaction_epochs", "3"), ("backfill_strategy", "rearranged"),
                      ("background_ddl", "on"), ("backfill_rate_limit", "0"), ("backfill_chunk_rows", "40")]:
        settings.store(key, text)
    assert (settings.retention_seconds, settings.compaction_epochs, settings.backfill_strategy,
            settings.background_ddl, settings.backfill_rate_limit, settings.backfill_chunk_rows) == \
        (0.5, 3, Strategy.REARRANGED, True, 0, 40)
    settings.store("backfill_rate_limit", "default")
    assert settings.backfill_rate_limit is None
    assert settings.delta_lag_epochs == 10
    settings.store("delta_lag_epochs", "1")
    assert settings.delta_lag_epochs == 1


@pytest.mark.parametrize(("key", "text", "words"), [
    ("retention_seconds", "inf", ["non-negative number"]),
    ("retention_seconds", "-1", ["non-negative number"]),
    ("compaction_epochs", "1e400", ["integer from 0 to 1000000"]),
    ("compaction_epochs", "2.5", ["integer from 0 to 1000000"]),
    ("backfill_chunk_rows", "0", ["integer from 1 to 1000000000"]),
    ("delta_lag_epochs", "0", ["integer from 1 to 1000"]),
    ("background_ddl", "maybe", ["true or false"]),
    ("backfill_rate_limit", "-3", ["DEFAULT"]),
    ("backfill_strategy", "magic", ["unknown backfill strategy", "snapshot"]),
])
def test_a_bad_value_is_refused_naming_what_is_expected_and_nothing_is_stored(tmp_path, key, text, words):
    settings = Settings(Catalog(tmp_path / "c.db"))
    before = getattr(settings, key)
    with pytest.raises(ValueError) as e:
        settings.store(key, text)
    assert all(w in str(e.value) for w in [*words, text]), str(e.value)
    assert getattr(settings, key) == before


def test_a_bad_stored_value_fails_only_its_readers_and_names_itself(tmp_path):
    catalog = Catalog(tmp_path / "c.db")
    catalog.set_setting("config.compaction_epochs", "nan")  # as an older version could store it
    settings = Settings(catalog)
    assert settings.backfill_chunk_rows == 10_000_000  # opening the warehouse reads this one
    with pytest.raises(SparkwaveError, match="compaction_epochs = 'nan'.*SET it again"):
        _ = settings.compaction_epochs
