"""Item: throttled logins; CSP, HSTS and secure cookies behind environment switches; a
placeholder SECRET_KEY refused when DEBUG is off; the configuration table of docs/ lists
exactly the variables the code reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from tests.integration.dashboard_fixtures import PASSWORD
from tests.support.docs import docs_text, page
from webapp.dashboard.models import LoginFailure

ROOT = Path(__file__).resolve().parents[2]
README = docs_text()  # README.md and every page of docs/


@pytest.fixture
def limits(settings):
    settings.LOGIN_ATTEMPTS = 5
    settings.LOGIN_WINDOW = 900
    return settings


def _login(username, password, address="10.0.0.1", path="/accounts/login/"):
    c = Client(REMOTE_ADDR=address)
    resp = c.post(path, {"username": username, "password": password})
    return c, resp


def test_logins_are_throttled_per_client_and_user_name(users, limits):
    """Five wrong passwords for a name from one address throttle that address for that
    name; the real user from another address signs in (before, the name was locked out
    from everywhere for 15 minutes, the admin's included)."""
    for _ in range(5):
        _c, resp = _login("editor", "wrong", address="10.0.1.1")
        assert resp.status_code == 200  # the form again, with its error
    c, resp = _login("editor", PASSWORD, address="10.0.1.1")
    assert resp.status_code == 429
    assert resp["Retry-After"] == "900"
    assert "Too many failed logins" in resp.content.decode()
    assert "_auth_user_id" not in c.session
    # The admin's login form goes through the same backend: refused too, from there.
    c, resp = _login("editor", PASSWORD, address="10.0.1.1", path="/admin/login/")
    assert "_auth_user_id" not in c.session
    # The real user, from their own address: signed in.
    c, resp = _login("editor", PASSWORD, address="10.0.1.99")
    assert resp.status_code == 302 and "_auth_user_id" in c.session
    # Another user from the throttled address is not affected.
    c, resp = _login("viewer", PASSWORD, address="10.0.1.1")
    assert resp.status_code == 302 and "_auth_user_id" in c.session


def test_wrong_passwords_from_many_addresses_never_lock_a_name_out(users, limits):
    for i in range(40):
        _login("admin", "wrong", address=f"10.0.4.{i}")
    c, resp = _login("admin", PASSWORD, address="10.0.4.200")
    assert resp.status_code == 302 and "_auth_user_id" in c.session


def test_logins_are_throttled_per_address(users, limits):
    limits.LOGIN_ADDRESS_ATTEMPTS = 20
    for i in range(20):  # a spray over many names from one address
        _login(f"nobody{i}", "wrong", address="10.0.2.1")
    c, resp = _login("viewer", PASSWORD, address="10.0.2.1")
    assert resp.status_code == 429
    c, resp = _login("viewer", PASSWORD, address="10.0.2.2")
    assert resp.status_code == 302


def test_a_successful_login_clears_its_failures(users, limits):
    for _ in range(4):
        _login("editor", "wrong", address="10.0.3.1")
    assert _login("editor", PASSWORD, address="10.0.3.1")[1].status_code == 302
    assert not LoginFailure.objects.filter(username="editor", address="10.0.3.1").exists()
    for _ in range(4):
        _login("editor", "wrong", address="10.0.3.1")
    assert _login("editor", PASSWORD, address="10.0.3.1")[1].status_code == 302


def test_headers_follow_the_switches(client, users, settings):
    settings.CSP_POLICY = settings.DEFAULT_CSP
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    resp = client.get("/accounts/login/", secure=True)
    assert resp["Content-Security-Policy"].startswith("default-src 'self'; script-src 'self'")
    assert resp["Strict-Transport-Security"] == "max-age=31536000"
    assert resp.cookies["csrftoken"]["secure"]
    resp = client.post(
        "/accounts/login/", {"username": "viewer", "password": PASSWORD}, secure=True
    )
    assert resp.cookies["sessionid"]["secure"] and resp.cookies["sessionid"]["httponly"]
    assert resp["X-Frame-Options"] == "DENY"


def test_headers_are_off_by_default(client, users):
    resp = client.get("/accounts/login/")
    assert "Content-Security-Policy" not in resp
    assert "Strict-Transport-Security" not in resp
    assert not resp.cookies["csrftoken"]["secure"]


def test_pages_need_no_inline_script_under_the_policy(client, users, catalog, settings):
    """The default policy allows no inline script: no page may carry one."""
    settings.CSP_POLICY = settings.DEFAULT_CSP
    client.force_login(users["admin"])
    for path in ("/", "/sources/", "/pools/", f"/pools/{catalog['pool'].pk}/", "/mixtures/",
                 "/mixtures/new/", f"/mixtures/versions/{catalog['version'].pk}/", "/runs/",
                 f"/runs/{catalog['run'].pk}/", "/jobs/", f"/jobs/{catalog['job'].pk}/",
                 "/audit/", "/users/"):  # fmt: skip
        body = client.get(path).content.decode()
        for tag in re.findall(r"<script\b[^>]*>", body):
            assert "src=" in tag or "application/json" in tag, (path, tag)
        assert not re.search(r"\son[a-z]+=", body), path


def _settings_process(**env):
    full = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY"}}
    full.update(env)
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='webapp.settings'; "
        "django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, "
        "bool(s.CSP_POLICY), s.LOGIN_ATTEMPTS)"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_the_environment_switches_set_the_settings(tmp_path):
    out = _settings_process(SHARDYARD_DATA=str(tmp_path), SECRET_KEY="k" * 40,
                            SHARDYARD_SECURE_COOKIES="1", SHARDYARD_HSTS_SECONDS="600",
                            SHARDYARD_CSP="on", SHARDYARD_LOGIN_ATTEMPTS="3")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "600", "True", "3"]
    out = _settings_process(SHARDYARD_DATA=str(tmp_path), SECRET_KEY="k" * 40)
    assert out.stdout.split() == ["False", "False", "0", "False", "5"]


def test_one_variable_turns_the_content_security_policy_on_or_gives_it(tmp_path):
    """SHARDYARD_CSP: 0 sends no header, 1 the built-in policy, any other value is the
    policy itself (no second variable for it)."""
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='webapp.settings'; "
        "django.setup(); from django.conf import settings as s; "
        "print(repr(s.CSP_POLICY == s.DEFAULT_CSP), repr(s.CSP_POLICY))"
    )
    answers = {}
    for value in ("0", "1", "default-src 'none'"):
        env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY"}}
        env.update(SHARDYARD_DATA=str(tmp_path), SECRET_KEY="k" * 40, SHARDYARD_CSP=value)
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        answers[value] = out.stdout.split(" ", 1)
    assert answers["0"] == ["False", "''\n"]
    assert answers["1"][0] == "True"
    assert answers["default-src 'none'"] == ["False", "\"default-src 'none'\"\n"]


def test_short_or_repetitive_secret_keys_are_refused_in_production(tmp_path):
    """A one-character SECRET_KEY was accepted with DEBUG=0. Outside the test suite
    (no SHARDYARD_TESTING), a key under 32 characters or with under 10 distinct ones stops
    the process with a message naming SECRET_KEY; DEBUG=1 and a generated key start."""
    import secrets

    for key in ("x", "shardyard-ci-key", "k" * 40, "abababababababababababababababab"):
        out = _settings_process(SHARDYARD_DATA=str(tmp_path), SECRET_KEY=key,
                                SHARDYARD_TESTING="0")  # fmt: skip
        assert out.returncode != 0, key
        assert "SECRET_KEY is too weak" in out.stderr, out.stderr[-500:]
        assert _settings_process(SHARDYARD_DATA=str(tmp_path), SECRET_KEY=key, DEBUG="1",
                                 SHARDYARD_TESTING="0").returncode == 0  # fmt: skip
    good = secrets.token_urlsafe(50)
    out = _settings_process(SHARDYARD_DATA=str(tmp_path), SECRET_KEY=good, SHARDYARD_TESTING="0")
    assert out.returncode == 0, out.stderr
    # The test suite's own processes keep their short throwaway key (CI's included).
    out = _settings_process(SHARDYARD_DATA=str(tmp_path), SECRET_KEY="shardyard-ci-key",
                            SHARDYARD_TESTING="1")  # fmt: skip
    assert out.returncode == 0, out.stderr


def test_example_secret_keys_are_refused_in_production(tmp_path):
    compose = (ROOT / "docker-compose.yml").read_text()
    example = re.search(r"SECRET_KEY: \$\{SECRET_KEY:-([^}]+)\}", compose).group(1)
    assert "SECRET_KEY=change-me" not in README  # the docs generate one
    for key in (example, "change-me", "django-insecure-abc"):
        out = _settings_process(SHARDYARD_DATA=str(tmp_path), SECRET_KEY=key)
        assert out.returncode != 0
        assert "is a placeholder" in out.stderr
    assert _settings_process(SHARDYARD_DATA=str(tmp_path), SECRET_KEY=example,
                             DEBUG="1").returncode == 0  # fmt: skip


# Read from the environment but not settings: the Django module path, and a former name the
# code refuses
# (SHARDYARD_CACHE_LIMIT, named in its successor's row). shardcore/config.py's readers
# (env_*, _raw, _number) are what the rest of the code calls.
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE", "SHARDYARD_CACHE_LIMIT"}
_READ = re.compile(
    r"""(?:env_(?:str|bool|int|list|paths|roots)\(|_raw\(|_number\(|os\.environ\.get\(|os\.getenv\("""
    r"""|os\.environ\[)"""
    r"""\s*["']([A-Z][A-Z0-9_]+)["']"""
)


def test_the_configuration_table_lists_every_variable_the_code_reads():
    read = set()
    # The loader reads its rank and world size as pairs: _env_rank("RANK", "WORLD_SIZE").
    pairs = re.compile(r'_env_rank\(\s*"([A-Z][A-Z0-9_]*)",\s*"([A-Z][A-Z0-9_]*)"')
    for top in ("webapp", "shardcore", "workers"):
        for path in (ROOT / top).rglob("*.py"):
            text = path.read_text()
            read |= set(_READ.findall(text))
            read |= {name for pair in pairs.findall(text) for name in pair}
    read -= NOT_SETTINGS
    section = page("reference/configuration.md")
    table = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            table |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    assert read - table == set(), "read by the code but missing from the configuration table"
    assert table - read == set(), "in the configuration table but read by no code"
