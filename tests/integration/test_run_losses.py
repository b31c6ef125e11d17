# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""Losses in the books: a trainer's token reports validation loss per pool (and per source)
at checkpoints and training loss per step over HTTP, against Postgres; bad input is a 400
naming the entry and field and writes nothing; the run page charts what was recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore.manifest import write_manifest
from tests.integration.dashboard_fixtures import catalog, role_users  # noqa: F401
from webapp.catalog.models import (
    ArtifactStatus,
    Pool,
    RunLoss,
    RunProgress,
    Source,
    TokenizedSource,
    TrainingRun,
)


@pytest.fixture(autouse=True)
def _postgres(postgres):
    return postgres


@pytest.fixture
def users(django_user_model, settings):
    return role_users(django_user_model, settings, ("viewer", "trainer", "editor", "admin"))


@pytest.fixture
def api(users):
    def as_user(who: str) -> APIClient:
        c = APIClient()
        c.credentials(
            HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=users[who])[0].key}"
        )
        return c

    return as_user


@pytest.fixture
def books(catalog, users, tmp_path):
    """The catalog's pool built from two sources, with its held-out validation pool, and a
    trainer's run on the version with two progress reports."""
    pool = catalog["pool"]
    tok = TokenizedSource.objects.get(source__name="wiki")
    code = Source.objects.create(name="code", uri=str(tmp_path), status=Source.Status.SCANNED)
    pool.parents.add(
        TokenizedSource.objects.create(
            source=code, tokenizer=tok.tokenizer, status=ArtifactStatus.READY, path=str(tmp_path)
        )
    )
    val = Pool.objects.create(
        name=f"{pool.name} val", split="val", train_pool=pool, status=ArtifactStatus.READY,
        path=str(tmp_path / "pool" / "val"), seq_len=pool.seq_len,
    )  # fmt: skip
    run = TrainingRun.objects.create(
        name="tiny-gpt", mixture_version=catalog["version"], created_by=users["trainer"]
    )
    for step in (10, 20):
        RunProgress.objects.create(
            run=run, step=step, consumed_samples=step * 4, consumed_tokens=step * 4 * 2048
        )
    return {"pool": pool, "val": val, "run": run, "version": catalog["version"]}


def _post(c, run, body):
    return c.post(f"/api/runs/{run.pk}/losses/", body, format="json")


def test_it_records_validation_loss_per_pool_and_source_and_training_loss(api, books):
    c, run, pool = api("trainer"), books["run"], books["pool"]
    body = {
        "step": 20,
        "val": [
            {"pool": pool.pk, "loss": 3.5},
            # The validation pool's id names the same pool.
            {"pool": books["val"].pk, "source": "code", "loss": 2.25},
            {"pool": pool.pk, "source": "wiki", "loss": 4.0},
        ],
        "train": [{"step": 19, "loss": 3.9}, {"step": 20, "loss": 3.7}],
    }
    r = _post(c, run, body)
    assert r.status_code == 201, r.content
    assert r.json() == {"recorded": 5, "already_recorded": 0}
    # A retry after a lost answer records nothing twice; the first report wins.
    body["val"][0]["loss"] = 9.9
    assert _post(c, run, body).json() == {"recorded": 0, "already_recorded": 5}
    rows = c.get(f"/api/runs/{run.pk}/losses/").json()["results"]
    val = {(x["pool"], x["source"]): x for x in rows if x["split"] == "val"}
    assert {k: v["loss"] for k, v in val.items()} == {
        (pool.pk, ""): 3.5,
        (pool.pk, "code"): 2.25,
        (pool.pk, "wiki"): 4.0,
    }
    # Tokens come from the run's progress report at that step (none at step 19).
    assert {v["consumed_tokens"] for v in val.values()} == {20 * 4 * 2048}
    train = [(x["step"], x["loss"], x["consumed_tokens"]) for x in rows if x["split"] == "train"]
    assert train == [(19, 3.9, None), (20, 3.7, 20 * 4 * 2048)]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"val": [{"pool": 1, "loss": 1.0}]}, "step"),
        ({"step": 5}, "non_field_errors"),
        ({"step": 5, "val": [{"pool": 999999, "loss": 1.0}]}, "val[0].pool: 999999 is not read"),
        ({"step": 5, "val": [{"pool": "POOL", "source": "nope", "loss": 1.0}]},
         "val[0].source: 'nope' is not a source of pool wiki-2048; its sources: code, wiki"),
        ({"step": 5, "val": [{"pool": "POOL", "loss": -1}]},
         '{"val": {"0": {"loss": ["Ensure this value is greater than or equal to 0.0."]}}}'),
        ({"step": 5, "val": [{"pool": "POOL", "loss": "low"}]},
         '{"val": {"0": {"loss": ["A valid number is required."]}}}'),
        ({"step": 5, "val": [{"pool": True, "loss": 1.0}]}, '{"val": {"0": {"pool": ['),
        ({"step": 5, "val": [{"pool": "POOL", "loss": 1}, {"pool": "POOL", "loss": 2}]},
         "val[1]: pool wiki-2048 is given twice at step 5"),
        ({"step": 401, "val": [{"pool": "POOL", "loss": 1}]}, "step: 401 is beyond mixture version"),
        ({"train": [{"step": 3, "loss": 1}, {"step": -1, "loss": 1}]},
         '{"train": {"1": {"step": ["Ensure this value is greater than or equal to 0."]}}}'),
        ({"train": [{"step": 3}]}, '{"train": {"0": {"loss": ["This field is required."]}}}'),
        ({"train": [7]},
         '{"train": {"0": {"non_field_errors": ["Invalid data. Expected a dictionary, but got int."]}}}'),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(api, books, body, field):
    body = json.loads(json.dumps(body).replace('"POOL"', str(books["pool"].pk)))
    r = _post(api("trainer"), books["run"], body)
    assert r.status_code == 400, r.content
    assert field in json.dumps(r.json())
    assert not RunLoss.objects.exists()


def test_nan_and_infinity_are_refused_before_they_reach_the_books(api, books):
    c = api("trainer")
    for loss in ("NaN", "1e999"):  # 1e999 parses as an infinite float
        raw = '{"step": 5, "val": [{"pool": ' + str(books["pool"].pk) + ', "loss": ' + loss + "}]}"
        r = c.post(f"/api/runs/{books['run'].pk}/losses/", raw, content_type="application/json")
        assert r.status_code == 400, loss
    assert "A valid number is required." in json.dumps(r.json())
    assert not RunLoss.objects.exists()


def test_only_who_may_report_progress_may_report_losses(api, books):
    body = {"step": 5, "val": [{"pool": books["pool"].pk, "loss": 1.0}]}
    # The catalog's run belongs to the editor, not to the trainer.
    other = TrainingRun.objects.get(name="olmo-tiny-a")
    assert _post(api("trainer"), other, body).status_code == 403
    assert _post(api("viewer"), books["run"], body).status_code == 403
    assert (
        APIClient().post(f"/api/runs/{books['run'].pk}/losses/", body, format="json").status_code
        == 401
    )
    assert _post(api("trainer"), TrainingRun(pk=987654), body).status_code == 404
    assert not RunLoss.objects.exists()
    assert _post(api("admin"), other, body).status_code == 201


def test_the_run_page_plots_losses_with_stage_starts_and_overlays_runs_of_the_mixture(
    api, books, client, users
):
    c, run, pool = api("trainer"), books["run"], books["pool"]
    for step, loss in ((10, 4.0), (20, 3.0)):
        _post(c, run, {"step": step, "val": [{"pool": pool.pk, "source": "code", "loss": loss}]})
    other = TrainingRun.objects.create(
        name="tiny-gpt-b", mixture_version=books["version"], created_by=users["trainer"]
    )
    _post(c, other, {"step": 10, "val": [{"pool": pool.pk, "source": "code", "loss": 4.5}]})
    # A stage after "main" starting at sample 60: at 4 samples a step (step 20 = 80 samples),
    # step 16 reads samples 60-63, so the marker stands at step 16, not at the next report.
    manifest = {"kind": "mixture", "seq_len": 2048, "num_samples": 400,
                "stages": [{"name": "main", "first_sample": 0, "num_samples": 60},
                           {"name": "anneal", "first_sample": 60, "num_samples": 340}]}  # fmt: skip
    Path(books["version"].path).mkdir(parents=True, exist_ok=True)
    write_manifest(books["version"].path, manifest)
    client.force_login(users["viewer"])
    page = client.get(f"/runs/{run.pk}/")
    assert page.status_code == 200
    figures = {f["layout"]["title"]["text"]: f for f in _figures(page.content.decode())}
    by_step = figures["Validation loss per pool / source, by step"]
    lines = {d["name"]: (d["x"], d["y"], d["line"]["dash"]) for d in by_step["data"]}
    assert lines == {
        "wiki-2048 / code": ([10, 20], [4.0, 3.0], "solid"),
        "tiny-gpt-b: wiki-2048 / code": ([10], [4.5], "dash"),
    }
    assert [s["x0"] for s in by_step["layout"]["shapes"]] == [16]
    by_tokens = figures["Validation loss per pool / source, by tokens consumed"]
    assert by_tokens["data"][0]["x"] == [10 * 4 * 2048, 20 * 4 * 2048]
    assert [s["x0"] for s in by_tokens["layout"]["shapes"]] == [60 * 2048]
    assert "stage anneal" in json.dumps(by_tokens["layout"]["annotations"])


def _figures(html: str) -> list[dict]:
    import re

    return [
        json.loads(m)
        for m in re.findall(r'<script id="fig-\d+" type="application/json">(.*?)</script>', html)
    ]


def test_it_proposes_next_stage_weights_from_losses_against_a_reference_run(api, books, users):
    import math

    from webapp.catalog.models import MixtureComponent

    c, run, pool = api("trainer"), books["run"], books["pool"]
    docs = Pool.objects.create(
        name="docs-2048", status=ArtifactStatus.READY, path="/x", seq_len=2048
    )
    MixtureComponent.objects.create(version=books["version"], pool=docs, weight=3.0, stage="main")
    ref = TrainingRun.objects.create(
        name="tiny-ref", mixture_version=books["version"], created_by=users["trainer"]
    )
    url = f"/api/runs/{run.pk}/proposal/?reference={ref.pk}"
    r = api("viewer").get(url)
    assert r.status_code == 400 and "has no step with a validation loss" in r.json()["detail"]
    both = lambda a, b: [{"pool": pool.pk, "loss": a}, {"pool": docs.pk, "loss": b}]  # noqa: E731
    _post(c, run, {"step": 10, "val": both(3.0, 2.5)})
    _post(c, run, {"step": 20, "val": both(2.6, 2.0)})
    _post(c, run, {"step": 30, "val": [{"pool": pool.pk, "loss": 2.5}]})  # docs not scored
    r = api("viewer").get(url)
    assert r.status_code == 400 and "at or before step 20" in r.json()["detail"]
    _post(c, ref, {"step": 10, "val": both(2.0, 2.5)})
    body = api("viewer").get(url + "&eta=2&smoothing=0").json()
    # The latest step scoring every pool (20), against the reference's latest before it (10).
    assert (body["rule"], body["step"], body["reference_step"]) == ("doremi-excess-loss", 20, 10)
    rows = {row["name"]: row for row in body["pools"]}
    assert rows["wiki-2048"]["weight"] == 0.25 and rows["docs-2048"]["weight"] == 0.75
    assert math.isclose(rows["wiki-2048"]["excess"], 0.6) and rows["docs-2048"]["excess"] == 0
    up = 0.25 * math.exp(1.2)
    assert math.isclose(rows["wiki-2048"]["proposed"], up / (up + 0.75))
    assert api("viewer").get(f"/api/runs/{run.pk}/proposal/?reference=x").status_code == 400
    bad = api("viewer").get(f"/api/runs/{run.pk}/proposal/?reference={ref.pk}&eta=-1")
    assert bad.status_code == 400 and "eta" in bad.json()


def test_the_run_page_shows_the_proposal_beside_the_current_weights(api, books, client, users):
    c, run, pool = api("trainer"), books["run"], books["pool"]
    ref = TrainingRun.objects.create(
        name="tiny-ref", mixture_version=books["version"], created_by=users["trainer"]
    )
    _post(c, run, {"step": 20, "val": [{"pool": pool.pk, "loss": 2.6}]})
    _post(c, ref, {"step": 20, "val": [{"pool": pool.pk, "loss": 2.0}]})
    client.force_login(users["viewer"])
    html = client.get(f"/runs/{run.pk}/?reference={ref.pk}").content.decode()
    assert f'<option value="{ref.pk}" selected>tiny-ref</option>' in html
    assert "<td>wiki-2048</td><td>2.6000</td><td>2.0000</td><td>0.6000</td><td>1.0000</td>" in html
    html = client.get(f"/runs/{run.pk}/?reference={run.pk + 999}").content.decode()
    assert f"reference: no run {run.pk + 999}" in html
