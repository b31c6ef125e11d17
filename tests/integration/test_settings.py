"""Settings come from the environment and fail loudly on bad values."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_settings(**env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL"}}
    full.update(env)
    code = "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='webapp.settings'; django.setup(); from django.conf import settings; print(settings.DATABASES['default']['ENGINE'], settings.CELERY_BROKER_URL)"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=full, capture_output=True, text=True, timeout=60
    )


def test_it_requires_a_secret_key_unless_debug(tmp_path):
    out = _load_settings(SHARDYARD_DATA=str(tmp_path))
    assert out.returncode != 0
    assert "SECRET_KEY must be set unless DEBUG=1" in out.stderr
    assert _load_settings(SHARDYARD_DATA=str(tmp_path), DEBUG="1").returncode == 0


def test_it_refuses_a_misspelt_debug_flag(tmp_path):
    out = _load_settings(SHARDYARD_DATA=str(tmp_path), DEBUG="ture", SECRET_KEY="x")
    assert out.returncode != 0
    assert "DEBUG='ture' is not a boolean" in out.stderr


def test_it_defaults_to_sqlite_and_the_filesystem_broker(tmp_path):
    env = {k: "" for k in ("CELERY_BROKER_URL",)}
    out = _load_settings(SHARDYARD_DATA=str(tmp_path), SECRET_KEY="x", **env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["django.db.backends.sqlite3", "filesystem://"]


def test_it_refuses_an_unknown_database_scheme(tmp_path):
    out = _load_settings(SHARDYARD_DATA=str(tmp_path), SECRET_KEY="x", DATABASE_URL="mysql://x@y/z")
    assert out.returncode != 0
    assert "DATABASE_URL scheme 'mysql' is not supported" in out.stderr


def test_boto_notes_where_it_found_credentials_only_at_debug(tmp_path):
    code = (
        "import django, logging, os; os.environ['DJANGO_SETTINGS_MODULE']='webapp.settings'; "
        "django.setup(); print(*(logging.getLogger(n).isEnabledFor(logging.INFO) "
        "for n in ('botocore.credentials', 'botocore.configprovider', 'shardcore')))"
    )
    for level, want in (("INFO", "False False True"), ("DEBUG", "True True True")):
        env = {**os.environ, "SHARDYARD_DATA": str(tmp_path), "SECRET_KEY": "x" * 40}
        env["LOG_LEVEL"] = level
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == want.split()
