# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""A run switches mixture version mid-training, through HTTP against Postgres: new weights
are saved as a version that continues from the run's resume position; the run's segments
record which samples came from which version; resume stays exact across the switch (the
server's segments read exactly what an uninterrupted run reads); a report that read the
old version past the switch is refused; and taint is exact across it: a flag on a source
only the first version reads taints exactly the samples read before the switch (and the
run), a flag on a source only the second reads taints only what came after, and flagged
documents the first version would have reached only after the switch taint nothing the
run read. Expected counts are computed here sample by sample from the schedules."""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from shardcore.loader import Segments, resume_state
from shardcore.mixture import Mixture, _records_for
from shardcore.pool import Pool as PoolReader
from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from tests.support.flags import taint_computed
from webapp.catalog.models import ArtifactStatus, RunSegment, Taint, TrainingRun
from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
from webapp.catalog.services.pools import pool_build
from webapp.catalog.services.sources import source_register
from webapp.catalog.services.tokenized import tokenized_source_build
from workers.celery import app

STDLIB = Path(sysconfig.get_paths()["stdlib"])
GBS = 4  # samples per step
SWITCH_STEP = 30
C = SWITCH_STEP * GBS  # the run's sample where it switches


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """Three sources of stdlib modules (alpha, beta, gamma), each tokenized and pooled by
    the real services (jobs eager)."""
    from django.conf import settings

    tmp = tmp_path_factory.mktemp("switch")
    old = settings.SOURCE_ROOTS, settings.DATA_ROOT
    settings.SOURCE_ROOTS, settings.DATA_ROOT = [tmp], tmp / "data"
    app.conf.task_always_eager = True
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 3000)[:36]
    out = {}
    with django_db_blocker.unblock():
        for k, name in enumerate(("alpha", "beta", "gamma")):
            (tmp / name).mkdir()
            (tmp / name / "mods.jsonl").write_text(
                "".join(
                    json.dumps({"text": p.read_text(errors="replace")}) + "\n"
                    for p in files[k * 12 : (k + 1) * 12]
                )
            )
            source = source_register(name=name, uri=str(tmp / name))
            ts = tokenized_source_build(source_id=source.pk, shard_size=64 << 10)
            ts.refresh_from_db()
            assert ts.status == ArtifactStatus.READY
            pool = pool_build(
                name=f"p-{name}", tokenized_ids=[ts.pk], seq_len=64, memory=1 << 20,
                shard_size=40 << 10,
            )  # fmt: skip
            pool.refresh_from_db()
            assert pool.status == ArtifactStatus.READY
            out[name] = {"source": source, "ts": ts, "pool": pool}
    yield out
    app.conf.task_always_eager = False
    settings.SOURCE_ROOTS, settings.DATA_ROOT = old
    with django_db_blocker.unblock():
        from tests.support.services import flush_database

        flush_database()


def _api(user) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return c


def _version1(world, name, inline, samples: int = 600):
    """A mixture whose first version reads alpha and beta half and half (kept in
    ``world["v1"]``; a version per test: each test's database is rolled back, its files
    are not)."""
    with inline():  # built by its job, in this process
        v1 = mixture_version_create(
            mixture_id=mixture_get_or_create(name=f"mix-{name}").pk,
            components=[{"pool": world["alpha"]["pool"].pk, "weight": 0.5},
                        {"pool": world["beta"]["pool"].pk, "weight": 0.5}],
            token_budget=64 * samples, max_repetitions=20,
        )  # fmt: skip
    v1.refresh_from_db()
    world["v1"] = v1
    return v1


def _switched_run(world, api, name, inline):
    """A run on a new first version reported up to the switch step, then switched: beta
    0.3, gamma 0.7."""
    v1 = _version1(world, name, inline)
    resp = api.post("/api/runs/", {"name": name, "mixture_version": v1.pk}, "json")
    assert resp.status_code == 201, resp.content
    run_id = resp.json()["id"]
    for step in (10, 20, SWITCH_STEP):
        resp = api.post(f"/api/runs/{run_id}/progress/",
                        {"step": step, "consumed_samples": step * GBS}, "json")  # fmt: skip
        assert resp.status_code == 201, resp.content
    weights = [{"pool": world["beta"]["pool"].pk, "weight": 0.3},
               {"pool": world["gamma"]["pool"].pk, "weight": 0.7}]  # fmt: skip
    with inline():  # the continuing version is built by its job
        resp = api.post(f"/api/runs/{run_id}/switch/",
                        {"weights": weights, "add": [world["gamma"]["pool"].pk]}, "json")  # fmt: skip
    assert resp.status_code == 201, resp.content
    return TrainingRun.objects.get(pk=run_id), resp.json()


def _pool_index(mix: Mixture, pool) -> int:
    return [p["fingerprint"] for p in mix.pools].index(pool.fingerprint)


def test_the_switch_saves_a_continuing_version_and_records_the_segments(
    world, users, db, jobs_inline
):
    editor = _api(users["editor"])
    run, answer = _switched_run(world, editor, "adaptive", jobs_inline)
    v1 = world["v1"]
    v2 = run.mixture_version
    assert answer["version"] == v2.pk and v2.mixture_id == v1.mixture_id
    assert v2.number == v1.number + 1 and v2.num_samples == v1.num_samples - C
    assert answer["continues"] == {"version": v1.pk, "sample": C}
    # The lineage: which of the run's samples came from which version, from which step.
    segs = [(s["mixture_version"], s["first_sample"], s["end_sample"], s["first_step"])
            for s in answer["segments"]]  # fmt: skip
    assert segs == [(v1.pk, 0, C, 1), (v2.pk, C, None, SWITCH_STEP + 1)]
    # The answer came as the new version's job was queued; once built, it has a fingerprint.
    now = editor.get(f"/api/runs/{run.pk}/").json()["segments"]
    assert answer["segments"][1]["fingerprint"] == "" and now[1]["fingerprint"] == v2.fingerprint
    assert [{**s, "fingerprint": ""} for s in now] == [
        {**s, "fingerprint": ""} for s in answer["segments"]
    ]
    m1, m2 = Mixture(v1.path), Mixture(v2.path)
    assert m2.manifest["continues"] == {"mixture": m1.manifest["fingerprint"], "sample": C}
    # Beta, in both: v2 reads on from the record after the last one the run read in v1.
    beta = world["beta"]["pool"]
    i1, i2 = _pool_index(m1, beta), _pool_index(m2, beta)
    read = int(np.count_nonzero(np.asarray(m1.pool_index[:C]) == i1))
    first_in_v2 = int(np.asarray(m2.record_index)[np.asarray(m2.pool_index) == i2][0])
    assert first_in_v2 == int(_records_for(v1.seed, i1, beta.num_records, np.array([read]))[0])
    # The new weights hold from the switch on: gamma takes 0.7 of v2's samples.
    gamma_share = np.mean(np.asarray(m2.pool_index) == _pool_index(m2, world["gamma"]["pool"]))
    assert gamma_share == pytest.approx(0.7, abs=1 / v2.num_samples + 1e-9)
    # The trainer re-registering the run on v1 after a restart gets the same run.
    again = editor.post("/api/runs/", {"name": "adaptive", "mixture_version": v1.pk}, "json")
    assert again.status_code == 201 and again.json()["id"] == run.pk
    # A trainer's token may not save a version.
    trainer = users["admin"].__class__.objects.create_user(username="trainer-x", password="x")
    from django.contrib.auth.models import Group

    trainer.groups.add(Group.objects.get_or_create(name="trainer")[0])
    refused = _api(trainer).post(f"/api/runs/{run.pk}/switch/", {"weights": [{"pool": beta.pk,
                                 "weight": 1}]}, "json")  # fmt: skip
    assert refused.status_code == 403


def test_a_switch_refuses_what_it_cannot_mean_in_one_voice(world, users, db, jobs_inline):
    """Weights 0 and -1 are refused with one message, the library's range (they got two);
    a pool the run's stage does not hold is refused naming it and the stage's pools unless
    ``add`` lists it (a mistyped id became the whole stage); a run is not its own
    reference for a proposal (it was accepted)."""
    from webapp.catalog.services.runs import run_register

    api = _api(users["editor"])
    v1 = _version1(world, "refusals", jobs_inline)
    run = api.post("/api/runs/", {"name": "refusals", "mixture_version": v1.pk}, "json").json()
    assert api.post(f"/api/runs/{run['id']}/progress/",
                    {"step": SWITCH_STEP, "consumed_samples": C}, "json").status_code == 201  # fmt: skip
    alpha, beta, gamma = (world[n]["pool"].pk for n in ("alpha", "beta", "gamma"))
    url = f"/api/runs/{run['id']}/switch/"
    said = {}
    for weight in (0, -1, 1e13):
        resp = api.post(url, {"weights": [{"pool": alpha, "weight": weight}]}, "json")
        assert resp.status_code == 400, resp.content
        said[weight] = json.dumps(resp.json())
    for weight, text in said.items():
        assert f"weight: {float(weight)!r} is outside the allowed range (0, 1e+12]" in text, said

    resp = api.post(url, {"weights": [{"pool": alpha, "weight": 0.5},
                                      {"pool": gamma, "weight": 0.5}]}, "json")  # fmt: skip
    assert resp.status_code == 400, resp.content
    detail = resp.json()["detail"]
    assert f"pool(s) {gamma} are not in stage 'main'" in detail, detail
    assert f"its pools: {min(alpha, beta)}, {max(alpha, beta)}" in detail and "add" in detail
    assert TrainingRun.objects.get(pk=run["id"]).mixture_version_id == v1.pk
    with jobs_inline():
        resp = api.post(url, {"weights": [{"pool": alpha, "weight": 0.5},
                                          {"pool": gamma, "weight": 0.5}], "add": [gamma]},
                        "json")  # fmt: skip
    assert resp.status_code == 201, resp.content

    # Its own reference: refused on the API's proposal and on the run page.
    other = run_register(name="refusals-self", mixture_version_id=v1.pk)
    resp = api.get(f"/api/runs/{other.pk}/proposal/", {"reference": other.pk})
    assert resp.status_code == 400, resp.content
    assert "cannot be its own reference" in resp.json()["detail"]


def test_a_switch_in_the_anneal_names_the_new_versions_stage_anneal(
    world, users, login, db, jobs_inline, tmp_path
):
    """A run switched inside its anneal gets a version whose only stage is "anneal" (not
    "main"): in its spec, its schedule, its components, the resume box, the version page,
    the diff against the old version (anneal against anneal) and the Megatron export."""
    import re

    from django.urls import reverse

    from shardcore.export.megatron import export_megatron
    from webapp.catalog.selectors.mixtures import mixture_version_diff

    editor = _api(users["editor"])
    alpha, beta, gamma = (world[n]["pool"] for n in ("alpha", "beta", "gamma"))
    with jobs_inline():  # 600 samples: main [0, 400) alpha/beta, anneal [400, 600) beta/gamma
        v1 = mixture_version_create(
            mixture_id=mixture_get_or_create(name="mix-anneal").pk,
            components=[{"pool": alpha.pk, "weight": 0.5}, {"pool": beta.pk, "weight": 0.5},
                        {"pool": beta.pk, "weight": 0.5, "stage": "anneal"},
                        {"pool": gamma.pk, "weight": 0.5, "stage": "anneal"}],
            stages=[{"name": "anneal", "tokens": 64 * 200}], token_budget=64 * 600,
            max_repetitions=20,
        )  # fmt: skip
    v1.refresh_from_db()
    assert [st["name"] for st in Mixture(v1.path).manifest["stages"]] == ["main", "anneal"]
    assert "first_stage" not in v1.params["spec"]  # "main" is never written: fingerprints keep
    run_id = editor.post("/api/runs/", {"name": "annealed", "mixture_version": v1.pk},
                         "json").json()["id"]  # fmt: skip
    for step in (10, 100, 120):  # sample 480: inside the anneal
        resp = editor.post(f"/api/runs/{run_id}/progress/",
                           {"step": step, "consumed_samples": step * GBS}, "json")  # fmt: skip
        assert resp.status_code == 201, resp.content
    with jobs_inline():
        resp = editor.post(f"/api/runs/{run_id}/switch/", {"weights": [
            {"pool": beta.pk, "weight": 0.3}, {"pool": gamma.pk, "weight": 0.7}]}, "json")  # fmt: skip
    assert resp.status_code == 201, resp.content
    v2 = TrainingRun.objects.get(pk=run_id).mixture_version
    assert v2.status == ArtifactStatus.READY and v2.num_samples == 600 - 480
    # The version: its spec, schedule and components name its only stage "anneal".
    assert v2.params["spec"]["first_stage"] == "anneal" and "stages" not in v2.params["spec"]
    m2 = Mixture(v2.path)
    assert [(st["name"], st["num_samples"]) for st in m2.manifest["stages"]] == [("anneal", 120)]
    assert m2.manifest["spec"]["first_stage"] == "anneal"
    comps = {(c.stage, c.pool_id): c.weight for c in v2.components.all()}
    assert comps == {
        ("anneal", beta.pk): pytest.approx(0.3),
        ("anneal", gamma.pk): pytest.approx(0.7),
    }
    # The run page's resume box: the run reads on in stage anneal.
    page = login("editor")
    html = page.get(f"/runs/{run_id}/").content.decode()
    box = html[html.index('id="resume"') : html.index('id="segments"')]
    assert "<dt>stage</dt><dd><code>anneal</code></dd>" in box and ">main<" not in box
    # The version page lists the components in stage anneal.
    html = page.get(reverse("dashboard:mixture_version", args=[v2.pk])).content.decode()
    assert re.findall(r"<tr><td>(\w+)</td><td><a href=\"/pools/", html) == ["anneal", "anneal"]
    # The diff: the old main stage is removed, the anneal compared with the anneal.
    diff = mixture_version_diff(a_id=v1.pk, b_id=v2.pk)
    rows = [(r["stage"], r["pool"], r["change"]) for r in diff["rows"]]
    assert rows == [("main", "p-alpha", "removed"), ("main", "p-beta", "removed"),
                    ("anneal", "p-beta", "changed"), ("anneal", "p-gamma", "changed")]  # fmt: skip
    shares = {r["pool"]: (r["a"]["share"], r["b"]["share"]) for r in diff["rows"][2:]}
    assert shares == {"p-beta": (0.5, pytest.approx(0.3)), "p-gamma": (0.5, pytest.approx(0.7))}
    html = page.get(reverse("dashboard:mixture_version_diff", args=[v1.pk, v2.pk])).content.decode()
    assert re.findall(r'<tr data-change="(\w+)"><td>(\w+)</td>', html) == [
        ("removed", "main"),
        ("removed", "main"),
        ("changed", "anneal"),
        ("changed", "anneal"),
    ]
    # Megatron's export: one data-args file, named for the stage.
    export_megatron(v2.path, tmp_path / "megatron")
    assert sorted(p.name for p in (tmp_path / "megatron").glob("data-args-*")) == [
        "data-args-anneal.txt"
    ]


def test_the_runs_owner_with_the_trainer_role_switches_it(world, users, db, jobs_inline):
    """A training job's token (the trainer role) switches the run it registered; an editor
    who does not own the run may not (the owner got 403 and any editor 201 before)."""
    from django.contrib.auth.models import Group

    trainer = users["admin"].__class__.objects.create_user(username="trainer-own", password="x")
    trainer.groups.add(Group.objects.get_or_create(name="trainer")[0])
    run, answer = _switched_run(world, _api(trainer), "trainer-owned", jobs_inline)
    assert run.created_by_id == trainer.pk and run.mixture_version_id == answer["version"]
    assert [s["first_sample"] for s in answer["segments"]] == [0, C]
    weights = [{"pool": world["alpha"]["pool"].pk, "weight": 1}]
    refused = _api(users["editor"]).post(f"/api/runs/{run.pk}/switch/", {"weights": weights},
                                         "json")  # fmt: skip
    assert refused.status_code == 403
    assert "belongs to another user" in refused.json()["detail"]
    assert TrainingRun.objects.get(pk=run.pk).mixture_version_id == answer["version"]


def test_resume_is_exact_across_the_switch(world, users, db, jobs_inline):
    editor = _api(users["editor"])
    run, answer = _switched_run(world, editor, "resumed", jobs_inline)
    v1, v2 = world["v1"], run.mixture_version
    resume = editor.get(f"/api/runs/{run.pk}/resume/").json()
    assert (resume["sample"], resume["mixture_version"], resume["version_sample"]) == (C, v2.pk, 0)
    assert resume["segment"] == 1
    # What the server answers is what the loader reads: the run's sample k is v1's k
    # before the switch and v2's k - C after it, whichever way it is opened.
    run_samples = Segments(answer["segments"])
    m1, m2 = Mixture(v1.path), Mixture(v2.path)
    for k in (0, C - 1, C, C + 1, len(run_samples) - 1):
        want = m1.tokens(k) if k < C else m2.tokens(k - C)
        assert np.array_equal(run_samples[k], want)
    assert len(run_samples) == v1.num_samples
    state = resume_state(answer["segments"], resume["sample"])
    from shardcore.loader import ShardyardIterableDataset

    straight = ShardyardIterableDataset(answer["segments"])
    resumed = ShardyardIterableDataset(answer["segments"])
    resumed.load_state_dict(state)
    tail = [k for k in straight.samples() if k >= C]
    assert list(resumed.samples()) == tail
    # Reports go on counting the run's samples: bounded by the switch plus v2's size.
    ok = editor.post(f"/api/runs/{run.pk}/progress/", {"step": SWITCH_STEP + 5,
                     "consumed_samples": C + 5 * GBS, "mixture_version": v2.pk}, "json")  # fmt: skip
    assert ok.status_code == 201, ok.content
    beyond = editor.post(f"/api/runs/{run.pk}/progress/", {"step": SWITCH_STEP + 6,
                         "consumed_samples": v1.num_samples + 1}, "json")  # fmt: skip
    assert beyond.status_code == 400
    assert beyond.json()["detail"] == (
        f"consumed_samples: {v1.num_samples + 1} is beyond the run's {v1.num_samples} samples "
        f"({C} before it switched to mixture version {v2.pk}, then its {v2.num_samples})"
    )
    # A trainer that kept reading v1 past the switch is told to go back to the switch.
    stale = editor.post(f"/api/runs/{run.pk}/progress/", {"step": SWITCH_STEP + 10,
                        "consumed_samples": C + 10 * GBS, "mixture_version": v1.pk}, "json")  # fmt: skip
    assert stale.status_code == 409
    assert f"switched to mixture version {v2.pk} at sample {C}" in stale.json()["detail"]
    assert f"checkpoint at step {SWITCH_STEP}" in stale.json()["detail"]
    assert TrainingRun.objects.get(pk=run.pk).last_step == SWITCH_STEP + 5


def _flag(api, world, name, **target) -> int:
    resp = api.post("/api/flags/", {"source": world[name]["source"].pk, "reason": "pii",
                                    **target}, "json")  # fmt: skip
    assert resp.status_code == 201, resp.content
    taint_computed(resp.json()["id"])  # what a worker does once the flag is recorded
    return resp.json()["id"]


def _read(api, run, flag) -> dict:
    """The run's answer for ``flag``; while it says it is being computed, the task that
    stores it (``workers.flag_reads``) runs first, as a worker would."""
    from workers.tasks import flag_reads

    row = next(r for r in api.get(f"/api/runs/{run.pk}/flags/").json() if r["flag"] == flag)
    if "computing" in row:
        assert row["text"].startswith("being computed: ")
        flag_reads.apply(kwargs={"flag_id": flag})
        row = next(r for r in api.get(f"/api/runs/{run.pk}/flags/").json() if r["flag"] == flag)
    return row


def _flagged_in(mix: Mixture, index: int, start: int, stop: int) -> np.ndarray:
    """The samples in [start, stop) read from pool ``index`` (every record flagged)."""
    return start + np.flatnonzero(np.asarray(mix.pool_index[start:stop]) == index)


def test_taint_is_exact_across_the_switch(world, users, login, db, jobs_inline):
    editor = _api(users["editor"])
    run, _ = _switched_run(world, editor, "tainted", jobs_inline)
    v1, v2 = world["v1"], run.mixture_version
    m1, m2 = Mixture(v1.path), Mixture(v2.path)

    # alpha is read only by v1: the run is tainted by what it read before the switch.
    flag = _flag(editor, world, "alpha")
    taints = Taint.objects.filter(flag_id=flag)
    assert set(taints.exclude(run=None).values_list("run_id", flat=True)) >= {run.pk}
    assert set(taints.exclude(mixture_version=None).values_list("mixture_version", flat=True)) == {
        v1.pk
    }
    row = _read(editor, run, flag)
    before = _flagged_in(m1, _pool_index(m1, world["alpha"]["pool"]), 0, C)
    assert row["first_sample"] == int(before[0]) and row["read"]
    seg = {s["segment"]: s for s in row["segments"]}
    assert seg[0]["flagged_samples"] == before.size and seg[1]["flagged_samples"] == 0
    assert seg[1]["first_sample"] is None

    # gamma is read only by v2: only what came after the switch is flagged.
    flag = _flag(editor, world, "gamma")
    assert set(
        Taint.objects.filter(flag_id=flag)
        .exclude(mixture_version=None)
        .values_list("mixture_version", flat=True)
    ) == {v2.pk}
    assert Taint.objects.filter(flag_id=flag, run=run).exists()
    row = _read(editor, run, flag)
    after = _flagged_in(m2, _pool_index(m2, world["gamma"]["pool"]), 0, m2.num_samples)
    assert row["first_sample"] == C + int(after[0]) >= C
    assert not row["read"] and row["consumed_samples"] == C  # not yet: the run is at C
    seg = {s["segment"]: s for s in row["segments"]}
    assert seg[0]["flagged_samples"] == 0 and seg[1]["flagged_samples"] == after.size
    page = login("viewer").get(f"/runs/{run.pk}/").content.decode()
    assert f"not yet: the first flagged sample is {C + int(after[0])}" in page

    # Documents of alpha that v1 would have reached only after the switch: v1 holds them,
    # the run never read them, so the run is not tainted by them.
    alpha = world["alpha"]["pool"]
    ia = _pool_index(m1, alpha)
    reader = PoolReader(alpha.path)
    doc_ids = reader.documents.column("doc_id").to_numpy()
    seen = set()
    for r in np.asarray(m1.record_index[:C])[np.asarray(m1.pool_index[:C]) == ia].tolist():
        seen |= {int(doc_ids[d]) for d in reader.boundaries(r)["doc"] if d >= 0}
    later = []
    for k in range(C, m1.num_samples):
        p, r = m1.sample(k)
        if p == ia:
            later += [int(doc_ids[d]) for d in reader.boundaries(r)["doc"] if d >= 0]
    unread = [d for d in dict.fromkeys(later) if d not in seen]
    assert unread
    flag = _flag(editor, world, "alpha", document_ids=unread[:1])
    assert Taint.objects.filter(flag_id=flag, mixture_version=v1).exists()
    assert not Taint.objects.filter(flag_id=flag, run=run).exists()
    # A run that stayed on v1 reads them later: it is tainted.
    stayed = editor.post("/api/runs/", {"name": "static", "mixture_version": v1.pk}, "json")
    assert Taint.objects.filter(flag_id=flag, run_id=stayed.json()["id"]).exists()
    assert RunSegment.objects.filter(run=run).count() == 2


def test_a_switch_asks_for_the_taint_of_its_flags_again_without_computing_it(
    world, users, db, jobs_inline, celery_queue, django_capture_on_commit_callbacks
):
    from webapp.catalog.models import Flag

    editor = _api(users["editor"])
    v1 = _version1(world, "reflag", jobs_inline)
    run = editor.post("/api/runs/", {"name": "reflag", "mixture_version": v1.pk}, "json").json()
    resp = editor.post(f"/api/runs/{run['id']}/progress/",
                       {"step": SWITCH_STEP, "consumed_samples": C}, "json")  # fmt: skip
    assert resp.status_code == 201, resp.content
    flag = _flag(editor, world, "gamma")  # gamma: in no version yet
    assert not Taint.objects.filter(flag_id=flag, run_id=run["id"]).exists()
    weights = [{"pool": world["beta"]["pool"].pk, "weight": 0.3},
               {"pool": world["gamma"]["pool"].pk, "weight": 0.7}]  # fmt: skip
    app.conf.task_always_eager = False  # the taint is asked for, for a worker
    with django_capture_on_commit_callbacks(execute=True):  # the request's commit
        resp = editor.post(f"/api/runs/{run['id']}/switch/",
                           {"weights": weights, "add": [world["gamma"]["pool"].pk]}, "json")  # fmt: skip
    assert resp.status_code == 201, resp.content
    # The request asked for the flag's taint again once it committed; a worker computes it.
    assert Flag.objects.get(pk=flag).taint_state == Flag.TaintState.QUEUED
    assert not Taint.objects.filter(flag_id=flag, run_id=run["id"]).exists()
    taint_computed(flag)
    v2 = resp.json()["version"]
    assert Taint.objects.filter(flag_id=flag, run_id=run["id"]).exists()
    assert Taint.objects.filter(flag_id=flag, mixture_version_id=v2).exists()


def test_the_run_page_saves_the_proposal_as_a_version_and_marks_epochs(
    world, users, login, db, jobs_inline
):
    import re

    editor = _api(users["editor"])
    # Long enough that alpha is read twice: its second epoch is marked.
    v1 = _version1(world, "page", jobs_inline, samples=4 * world["alpha"]["pool"].num_records)
    # A reference run and a run on v1, both reporting validation loss per pool.
    ref = editor.post("/api/runs/", {"name": "page-ref", "mixture_version": v1.pk}, "json")
    ref_id = ref.json()["id"]
    alpha, beta = world["alpha"]["pool"], world["beta"]["pool"]
    for step, consumed in ((10, 40), (40, 160)):
        editor.post(f"/api/runs/{ref_id}/progress/", {"step": step, "consumed_samples": consumed},
                    "json")  # fmt: skip
        editor.post(f"/api/runs/{ref_id}/losses/", {"step": step, "val": [
            {"pool": alpha.pk, "loss": 3.0}, {"pool": beta.pk, "loss": 3.0}]}, "json")  # fmt: skip
    fresh = editor.post("/api/runs/", {"name": "page-b", "mixture_version": v1.pk}, "json")
    run_id = fresh.json()["id"]
    for step in (10, 40):
        editor.post(f"/api/runs/{run_id}/progress/", {"step": step,
                    "consumed_samples": step * GBS}, "json")  # fmt: skip
    editor.post(f"/api/runs/{run_id}/losses/", {"step": 40, "val": [
        {"pool": alpha.pk, "loss": 3.5}, {"pool": beta.pk, "loss": 3.0}]}, "json")  # fmt: skip

    page = login("editor")
    html = page.get(f"/runs/{run_id}/?reference={ref_id}").content.decode()
    assert 'id="save-proposal"' in html and "from sample 160" in html
    shown = re.search(r'name="proposal" value="([0-9a-f]{16})"', html)[1]
    with jobs_inline():
        done = page.post(f"/runs/{run_id}/switch/", {"reference": str(ref_id), "proposal": shown})
    assert done.status_code == 302
    run = TrainingRun.objects.get(pk=run_id)
    assert run.mixture_version_id != v1.pk
    comps = {c.pool_id: c.weight for c in run.mixture_version.components.filter(stage="main")}
    # DoReMi's rule: alpha lags the reference by 0.5 nats, so it gains weight.
    e = np.exp(0.5)
    assert comps[alpha.pk] == pytest.approx(0.999 * e / (1 + e) + 0.0005)
    assert comps[beta.pk] == pytest.approx(0.999 / (1 + e) + 0.0005)
    html = page.get(f"/runs/{run_id}/").content.decode()
    assert "[0, 160)" in html and "[160, …)" in html and "Saved" in html
    # The same proposal saved again (a second click, a stale tab) is refused, and so is
    # its save by the service directly: the update is applied once.
    again = page.post(f"/runs/{run_id}/switch/", {"reference": str(ref_id), "proposal": shown},
                      follow=True).content.decode()  # fmt: skip
    assert f"was saved as {run.mixture_version}, which the run reads from step 41" in again
    from webapp.catalog.errors import CatalogError
    from webapp.catalog.selectors.runs import run_mixture_proposal
    from webapp.catalog.services.runs import run_switch

    with pytest.raises(CatalogError, match="was saved already"):
        run_switch(run_id=run_id, weights={alpha.pk: 0.9, beta.pk: 0.1},
                   proposal={"fingerprint": shown, "step": 40, "base_version": run.mixture_version_id,
                             "rule": "", "eta": 1, "smoothing": 0, "reference": ref_id,
                             "reference_step": 40})  # fmt: skip
    with pytest.raises(CatalogError, match="needs its validation losses after step 40"):
        run_mixture_proposal(run_id=run_id, reference_run_id=ref_id)
    assert TrainingRun.objects.get(pk=run_id).mixture_version_id == run.mixture_version_id
    assert run.mixture_version.mixture.versions.count() == 2
    # The page's loader snippet streams the run's versions from its resume position: the
    # next samples are the new version's first ones.
    import html as html_

    snippet = html_.unescape(re.search(r'<pre id="loader-snippet">(.*?)</pre>', html, re.S)[1])
    scope: dict = {}
    exec(compile(snippet[snippet.index("from shardcore.loader") :], "snippet", "exec"), scope)
    batch = next(iter(scope["loader"]))
    assert batch["sample"].tolist() == list(range(160, 168))
    new = Mixture(run.mixture_version.path)
    for k, row in zip(batch["sample"].tolist(), batch["tokens"].numpy(), strict=True):
        np.testing.assert_array_equal(row, new.tokens(k - 160))
    # The loss chart marks the switch and where each pool's next epoch starts.
    m1 = Mixture(v1.path)
    ia = _pool_index(m1, alpha)
    second = int(np.flatnonzero(np.asarray(m1.pool_index) == ia)[alpha.num_records])
    assert second > 160  # after the switch, where the new version reads alpha on
    figs = [json.loads(m) for m in re.findall(
        r'<script id="fig-\d+" type="application/json">(.*?)</script>', html, re.S)]  # fmt: skip
    by_step = next(f for f in figs if "per pool / source, by step" in json.dumps(f["layout"]))
    notes = {(a["text"], a["x"]) for a in by_step["layout"]["annotations"]}
    assert (f"switch to v{run.mixture_version.number}", 40) in notes
    # By tokens: alpha's second epoch where the new version's schedule reaches it.
    m2 = Mixture(run.mixture_version.path)
    i2 = _pool_index(m2, alpha)
    n_before = int(np.count_nonzero(np.asarray(m1.pool_index[:160]) == ia))
    in_v2 = int(np.flatnonzero(np.asarray(m2.pool_index) == i2)[alpha.num_records - n_before])
    by_tokens = next(f for f in figs if "by tokens consumed" in json.dumps(f["layout"]))
    notes = {(a["text"], a["x"]) for a in by_tokens["layout"]["annotations"]}
    assert ("p-alpha epoch 2", (160 + in_v2) * 64) in notes
