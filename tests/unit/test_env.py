"""Typed environment reads fail loudly and name the variable."""

import pytest

from shardcore import config
from shardcore.config import ConfigError, env_bool, env_int, env_list, env_paths, env_str
from shardcore.errors import InputError


def test_it_parses_booleans(monkeypatch):
    monkeypatch.setenv("X_FLAG", "Yes")
    assert env_bool("X_FLAG") is True
    monkeypatch.setenv("X_FLAG", "off")
    assert env_bool("X_FLAG", True) is False


def test_it_refuses_a_misspelt_boolean(monkeypatch):
    monkeypatch.setenv("X_FLAG", "ture")
    with pytest.raises(ConfigError, match="X_FLAG='ture' is not a boolean"):
        env_bool("X_FLAG")


def test_it_refuses_a_non_integer_and_a_too_small_one(monkeypatch):
    monkeypatch.setenv("X_INT", "12k")
    with pytest.raises(ConfigError, match="X_INT='12k' is not an integer"):
        env_int("X_INT", 1)
    monkeypatch.setenv("X_INT", "-3")
    with pytest.raises(ConfigError, match="X_INT=-3 must be >= 0"):
        env_int("X_INT", 1, minimum=0)


def test_it_requires_a_required_string(monkeypatch):
    monkeypatch.delenv("X_STR", raising=False)
    with pytest.raises(ConfigError, match="X_STR must be set"):
        env_str("X_STR", required=True)


def test_it_splits_lists_and_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("X_LIST", " a, b ,,c ")
    assert env_list("X_LIST") == ["a", "b", "c"]
    monkeypatch.setenv("X_PATHS", f"{tmp_path}/a:{tmp_path}/b")
    assert env_paths("X_PATHS", []) == [tmp_path / "a", tmp_path / "b"]
    monkeypatch.setenv("X_PATHS", "relative/dir")
    with pytest.raises(ConfigError, match="not an absolute path"):
        env_paths("X_PATHS", [])


def test_the_library_readers_name_their_variable(monkeypatch):
    monkeypatch.setenv("SHARDYARD_FILTER_SECONDS", "soon")
    with pytest.raises(config.ConfigError, match="SHARDYARD_FILTER_SECONDS='soon' is not a number"):
        config.filter_seconds()
    monkeypatch.setenv("SHARDYARD_FILTER_MEMORY", "lots")
    with pytest.raises(InputError, match="SHARDYARD_FILTER_MEMORY: not a size"):
        config.filter_memory()
    monkeypatch.setenv("SHARDYARD_CACHE_LIMIT", "1GiB")
    with pytest.raises(config.ConfigError, match="now SHARDYARD_STREAM_CACHE_LIMIT"):
        config.stream_cache_limit()
    monkeypatch.delenv("SHARDYARD_CACHE_LIMIT")
    monkeypatch.setenv("SHARDYARD_STREAM_CACHE_LIMIT", "1GiB")
    assert config.stream_cache_limit() == 1 << 30
    monkeypatch.setenv("SHARDYARD_PREFETCH", "two")
    with pytest.raises(config.ConfigError, match="SHARDYARD_PREFETCH"):
        config.prefetch()
    monkeypatch.setenv("SHARDYARD_MAX_SCHEDULE_SAMPLES", "0")
    with pytest.raises(config.ConfigError, match="SHARDYARD_MAX_SCHEDULE_SAMPLES='0' must be"):
        config.max_schedule_samples()
