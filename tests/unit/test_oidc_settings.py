"""Single sign-on settings: the exports of the operations page (docs/) turn it on (the provider's endpoints, the
role map, the backend beside the local accounts'); a missing endpoint or a bad map entry
stops the process with a message naming the variable; without a client id nothing of it
is on."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.docs import page

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = page("operations.md")


def readme_exports() -> dict[str, str]:
    section = OPERATIONS.split("## Single sign-on", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    env = {}
    for line in block.splitlines():
        for word in shlex.split(line)[1:]:  # after "export"
            name, _, value = word.partition("=")
            env[name] = value
    return env


def settings_of(env: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SHARDYARD_OIDC_")}
    full.update(SHARDYARD_DATA=str(tmp_path), SECRET_KEY="k" * 40, **env)
    code = (
        "import django, json, os; os.environ['DJANGO_SETTINGS_MODULE']='webapp.settings'; "
        "django.setup(); from django.conf import settings as s; print(json.dumps({"
        "'on': s.SHARDYARD_OIDC_ENABLED, 'map': s.SHARDYARD_OIDC_ROLE_MAP, "
        "'backends': s.AUTHENTICATION_BACKENDS, 'client': getattr(s, 'OIDC_RP_CLIENT_ID', None),"
        "'jwks': getattr(s, 'OIDC_OP_JWKS_ENDPOINT', None)}))"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_the_readme_exports_turn_single_sign_on_on(tmp_path):
    import json

    out = settings_of(readme_exports(), tmp_path)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["on"] is True and got["client"] == "shardyard"
    assert got["jwks"] == "https://idp.example.org/jwks"
    assert got["map"] == {"data-eng": "editor", "ml-research": "trainer", "platform": "admin"}
    assert got["backends"][-1] == "webapp.ops.oidc.RoleMappingBackend"
    assert len(got["backends"]) == 2  # the local accounts' backend stays

    off = json.loads(settings_of({}, tmp_path).stdout)
    assert off["on"] is False and off["client"] is None and len(off["backends"]) == 1


def test_a_missing_endpoint_or_a_bad_role_map_is_named(tmp_path):
    env = readme_exports()
    del env["SHARDYARD_OIDC_TOKEN_ENDPOINT"]
    out = settings_of(env, tmp_path)
    assert out.returncode != 0 and "SHARDYARD_OIDC_TOKEN_ENDPOINT must be set" in out.stderr
    out = settings_of({**readme_exports(), "SHARDYARD_OIDC_ROLE_MAP": "data-eng=boss"}, tmp_path)
    assert out.returncode != 0
    assert "SHARDYARD_OIDC_ROLE_MAP: 'data-eng=boss'" in out.stderr, out.stderr
