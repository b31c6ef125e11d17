"""Journey over the demo data (the CPython standard library, tokenized, pooled and mixed
by a real worker), with a run and a flag: every list page writes its numbers for people
(no raw float, thousands separators on every integer from 10,000), and every page of an
object shows the ids the API needs, copyable, and they are the ids the API answers to."""

import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

RAW_FLOAT = re.compile(r"\d\.\d{5,}")  # 0.09999999999999999
BARE_INT = re.compile(r"(?<![\w,.-])\d{5,}(?![\w,])")  # 12345, not 12,345
SEPARATED = re.compile(r"\b\d{1,3}(?:,\d{3})+\b")

# Table cells and facts, with code (paths, fingerprints, ids) left out.
CELLS = """() => Array.from(document.querySelectorAll('main td:not(.id), main dd')).map(td => {
  const c = td.cloneNode(true); c.querySelectorAll('code, pre').forEach(e => e.remove());
  return c.textContent.trim(); })"""


def test_it_writes_numbers_for_people_and_shows_the_ids_the_api_needs(
    page, live_server, login, screenshot, stack
):
    from webapp.catalog.models import Flag, Mixture, Pool, Source
    from webapp.catalog.services.flags import flag_create
    from webapp.catalog.services.runs import run_progress_record, run_register
    from webapp.jobs.models import Job
    from webapp.ops.demo import demo_load

    stack.start_worker()
    demo_load(max_bytes_per_source=150_000, seq_len=128, token_budget=100_000, wait=300,
              log=lambda _m: None)  # fmt: skip
    mixture = Mixture.objects.get(name="demo")
    version = mixture.versions.get()
    run = run_register(name="stdlib-lm", mixture_version_id=version.pk)
    run_progress_record(run_id=run.pk, step=300, consumed_samples=600)
    reference = Source.objects.get(name="demo-reference")
    flag = flag_create(reason="a licence to check", source_id=reference.pk,
                                document_ids=[0, 1, 2])  # fmt: skip
    from tests.support.services import wait_for

    # What it taints is computed by the worker once the flag is recorded.
    wait_for(lambda: Flag.objects.get(pk=flag.pk).taint_state == "ready", timeout=120,
             what="the flag's taint")  # fmt: skip
    login("ada", superuser=True)

    lists = ["/", "/sources/", "/pools/", "/mixtures/", f"/mixtures/{mixture.pk}/", "/runs/",
             "/jobs/", "/audit/", "/audit/?source=demo-reference", f"/audit/flags/{flag.pk}/"]  # fmt: skip
    separated = {}
    for url in lists:
        page.goto(live_server.url + url)
        cells = page.evaluate(CELLS)
        assert cells, url
        raw = [c for c in cells if RAW_FLOAT.search(c)]
        bare = [c for c in cells if BARE_INT.search(c)]
        assert not raw and not bare, (url, raw, bare)
        separated[url] = [m for c in cells for m in SEPARATED.findall(c)]
    pool = Pool.objects.filter(name="demo-code").get()
    tokenize = Job.objects.filter(kind="tokenize").exclude(tokens=0).order_by("-tokens").first()
    details = [f"/sources/{reference.pk}/", f"/pools/{pool.pk}/", f"/runs/{run.pk}/",
               f"/mixtures/versions/{version.pk}/", f"/jobs/{tokenize.pk}/"]  # fmt: skip
    for url in details:  # the pages behind the lists, too
        page.goto(live_server.url + url)
        cells = page.evaluate(CELLS)
        raw = [c for c in cells if RAW_FLOAT.search(c)]
        bare = [c for c in cells if BARE_INT.search(c)]
        assert not raw and not bare, (url, raw, bare)
    assert f"{pool.num_tokens:,}" in separated["/pools/"] and pool.num_tokens >= 10_000
    assert "76,800" in separated["/runs/"]  # 600 samples of 128 tokens
    assert f"{version.token_budget:,}" in separated[f"/mixtures/{mixture.pk}/"]
    assert f"{tokenize.tokens:,}" in separated["/jobs/"]
    page.goto(f"{live_server.url}/pools/")
    screenshot("pools-list")

    # From a page to the API: the id shown is the one the API answers to.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    objects = [
        (f"/sources/{reference.pk}/", "source", reference.pk, "sources"),
        (f"/pools/{pool.pk}/", "pool", pool.pk, "pools"),
        (f"/mixtures/{mixture.pk}/", "mixture", mixture.pk, "mixtures"),
        (f"/mixtures/versions/{version.pk}/", "version", version.pk, "mixture-versions"),
        (f"/runs/{run.pk}/", "run", run.pk, "runs"),
        (f"/jobs/{tokenize.pk}/", "job", tokenize.pk, "jobs"),
        (f"/audit/flags/{flag.pk}/", "flag", flag.pk, "flags"),
    ]
    for url, kind, pk, route in objects:
        page.goto(live_server.url + url)
        ref = page.locator("#api-ref")
        assert ref.inner_text().startswith(f"{kind} id {pk} Copy id · API GET /api/{route}/{pk}/")
        api = page.inner_text("#api-url")
        assert api == f"GET /api/{route}/{pk}/"
        answer = page.request.get(live_server.url + api.split(" ", 1)[1])
        assert answer.ok and answer.json()["id"] == pk, (url, answer.status)
        ref.locator("[data-copy='#api-id']").click()
        page.wait_for_function("() => document.querySelector(\"[data-copy='#api-id']\")"
                               ".textContent === 'Copied'")  # fmt: skip
        assert page.evaluate("() => navigator.clipboard.readText()") == str(pk)
    # Where a training loop needs the id, the client call that uses it.
    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/")
    assert page.inner_text("#api-client") == (
        f'client.register_run(mixture_version={version.pk}, name="my-run")'
    )
    page.goto(f"{live_server.url}/pools/{pool.pk}/")
    assert page.inner_text("#api-client") == (
        f"client.report_losses(run_id, step=step, val={{{pool.pk}: loss}})"
    )
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    assert page.inner_text("#api-client") == f"client.resume_position({run.pk})"
    screenshot("run-api-ids")
