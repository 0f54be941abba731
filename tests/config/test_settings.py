"""Settings: parsing and refusal, environment defaults, snapshots for cached plans, database-wide sharing."""
from __future__ import annotations

import pytest

import trdb
from trdb.config.settings import DATABASE_WIDE, SETTINGS, Settings


def test_sizes_counts_and_choices_are_parsed_and_bad_values_refused():
    settings = Settings()
    settings.set("memory_limit", "2GB")
    assert settings.memory_limit == 2 << 30  # as DuckDB reads '2GB': GiB
    settings.set("max_tuples", 1000)
    assert settings.get("MAX_TUPLES") == 1000  # names are case-insensitive
    for name, value in (("memory_limit", "lots"), ("workers", 0), ("device", "tpu"), ("max_tuples", -1)):
        with pytest.raises(trdb.ProgrammingError, match=f"invalid value .* for setting {name}"):
            settings.set(name, value)
    assert settings.max_tuples == 1000  # a refused value changes nothing


def test_an_unknown_setting_suggests_the_close_one():
    with pytest.raises(trdb.ProgrammingError, match='unknown setting "memory_limt"') as failed:
        Settings().set("memory_limt", "1GB")
    assert failed.value.hint == 'did you mean "memory_limit"?'


def test_reset_takes_the_environment_default(monkeypatch):
    settings = Settings()
    monkeypatch.setenv("TRDB_MAX_TUPLES", "77")
    settings.set("max_tuples", 5)
    settings.reset("max_tuples")
    assert settings.max_tuples == 77
    monkeypatch.setenv("TRDB_MAX_TUPLES", "many")
    with pytest.raises(trdb.ProgrammingError, match="invalid TRDB_MAX_TUPLES='many'"):
        settings.reset("max_tuples")


def test_a_snapshot_changes_exactly_when_a_value_does():
    settings = Settings()
    before = settings.snapshot()
    assert settings.snapshot() == before
    settings.set("max_tuples", settings.max_tuples)
    assert settings.snapshot() == before
    settings.set("max_tuples", settings.max_tuples + 1)
    assert settings.snapshot() != before


def test_a_failed_change_puts_the_value_back():
    settings, applied = Settings(), []
    settings.set("max_tuples", 10)
    with pytest.raises(RuntimeError):
        with settings.restored_on_failure("max_tuples", lambda: applied.append(settings.max_tuples)):
            settings.set("max_tuples", 20)
            raise RuntimeError("the new value could not be put in force")
    assert settings.max_tuples == 10 and applied == [10]


def test_database_wide_settings_are_shared_by_the_connections_of_one_database(tmp_path):
    path = str(tmp_path / "db.trdb")
    assert "memory_limit" in DATABASE_WIDE and "workers" not in DATABASE_WIDE
    with trdb.connect(path) as first, trdb.connect(path) as second:
        workers = second.execute("SHOW workers").fetchall()
        first.execute("SET memory_limit = '1GB'")
        first.execute(f"SET workers = {SETTINGS['workers'].default() + 1}")
        assert second.execute("SHOW memory_limit").fetchall() == [(str(1 << 30),)]  # the database's one budget
        assert second.execute("SHOW workers").fetchall() == workers  # a connection's own
