"""The docs' production command keeps the web app answering while requests are slow:
gunicorn started exactly as the docs give it (docs/operations.md), two pool launches whose filter takes
seconds to plan at once, and another request (a page) answers while both are still in
flight. With one synchronous worker (the documented command before), it waited for both."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from rest_framework.authtoken.models import Token

from tests.integration.test_readme import BIN, ROOT, all_commands
from tests.support.services import catalog_roots, wait_for, worker_env

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

DOCS = 12_000
# Three chains of 150 nested md5 cost DuckDB about a millisecond per document: seconds for
# the source's sidecar, planned in the web request (in its sandboxed child). Distinct
# chains: DuckDB would compute identical ones once.
SLOW_FILTER = (
    " + ".join(
        "length(" + "md5(" * 150 + inner + ")" * 150 + ")"
        for inner in ("kind", "lower(kind)", "upper(kind)")
    )
    + " = 0"
)


@pytest.fixture
def tokenized(tmp_path, settings, monkeypatch, django_user_model):
    from webapp.catalog.models import ArtifactStatus
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build
    from workers.celery import app

    root, _data = catalog_roots(tmp_path, settings, monkeypatch)
    (root / "tiny").mkdir()
    (root / "tiny" / "docs.jsonl").write_text(
        "".join(json.dumps({"text": f"document {i}", "kind": "prose"}) + "\n" for i in range(DOCS))
    )
    app.conf.task_always_eager = True  # tokenized here, by the real job engine
    try:
        source = source_register(name="tiny", uri=str(root / "tiny"), metadata_fields=["kind"])
        ts = tokenized_source_build(source_id=source.pk)
    finally:
        app.conf.task_always_eager = False
    ts.refresh_from_db()
    assert ts.status == ArtifactStatus.READY and ts.num_documents == DOCS
    editor = django_user_model.objects.create_superuser(username="ed", password="pw-12345678")
    return ts, Token.objects.create(user=editor).key


def test_the_readme_gunicorn_answers_a_page_while_two_slow_filters_plan(tokenized, tmp_path):
    ts, token = tokenized
    (command,) = [c for c in all_commands() if c.startswith("gunicorn webapp.wsgi")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = shlex.split(command.replace("0.0.0.0:8000", f"127.0.0.1:{port}"))
    # Planning may take long on a loaded machine: its limit is not what is tested here.
    env = worker_env(SHARDYARD_PLAN_SECONDS="300")
    proc = subprocess.Popen([BIN / argv[0], *argv[1:]], cwd=ROOT, env=env,
                            stdout=open(tmp_path / "gunicorn.log", "wb"),
                            stderr=subprocess.STDOUT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _status(base + "/accounts/login/") == 200, timeout=60,
                 what="gunicorn to answer")  # fmt: skip
        answers: dict[int, tuple[int, str, float]] = {}

        def launch(i: int) -> None:
            body = {"name": f"slow-{i}", "tokenized_ids": [ts.pk], "seq_len": 64,
                    "filter": SLOW_FILTER}  # fmt: skip
            req = urllib.request.Request(
                base + "/api/pools/", data=json.dumps(body).encode(), method="POST",
                headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=600) as r:
                    answers[i] = (r.status, r.read().decode(), time.monotonic())
            except urllib.error.HTTPError as e:
                answers[i] = (e.code, e.read().decode(), time.monotonic())

        slow = [threading.Thread(target=launch, args=(i,)) for i in (1, 2)]
        for t in slow:
            t.start()
        time.sleep(1.0)  # both are in the server, planning
        assert not answers, answers  # the filters are slow indeed
        assert _status(base + "/accounts/login/") == 200
        answered = time.monotonic()
        in_flight = [t.is_alive() for t in slow]
        for t in slow:
            t.join(timeout=600)
        # The page answered while both slow requests were still being planned.
        assert in_flight == [True, True], (in_flight, answers)
        for status, text, done in answers.values():
            assert done > answered
            # The filter selects nothing: refused, at the filter, once it was evaluated.
            assert status == 400 and "selects none" in text, (status, text)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status
    except OSError:
        return None
