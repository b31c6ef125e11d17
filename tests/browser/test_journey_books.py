"""Journey: the books say what happened. A flag on a document id the source does not have
is refused, naming the id and the valid range (it was recorded and tainted nothing); a
mixture's page counts, for each version, the runs that read it, those that switched away
included, and the mixture's runs over all versions; it diffs any two versions, not only a
version and the one before; a version being built says its recipe is not measured yet
(it said it "was built before the build measured it")."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_refuses_a_flag_on_a_document_that_does_not_exist(
    page, live_server, login, settings, tmp_path, django_user_model
):
    from rest_framework.authtoken.models import Token

    from webapp.catalog.models import Flag
    from webapp.catalog.services.sources import source_register

    corpus = tmp_path / "sources" / "notes"
    corpus.mkdir(parents=True)
    (corpus / "a.jsonl").write_text("".join(f'{{"text": "note {i}"}}\n' for i in range(12)))
    settings.SOURCE_ROOTS = [tmp_path / "sources"]
    source = source_register(name="notes", uri=str(corpus))
    assert source.num_documents == 12
    login("ada", superuser=True)
    url = live_server.url

    # From the audit page: document 4000 of a source of 12 documents.
    page.goto(f"{url}/audit/?source=notes&document_id=4000")
    page.fill("#reason", "PII")
    page.click("text=Flag and taint downstream")
    refused = page.locator(".msg.error").inner_text()
    assert "document ids: source notes has no document 4000; its 12 documents are " \
        "numbered 0 to 11" in refused, refused  # fmt: skip
    assert Flag.objects.count() == 0

    # The API refuses the same, in the same words; ids in range are recorded.
    token = Token.objects.create(user=django_user_model.objects.get(username="ada"))
    headers = {"Authorization": f"Token {token.key}"}
    answer = page.request.post(url + "/api/flags/", headers=headers, data={
        "source": source.pk, "reason": "PII", "document_ids": [11, 12, 4000]})  # fmt: skip
    assert answer.status == 400, answer.text()
    assert "source notes has no document 12, 4000; its 12 documents" in answer.text()
    answer = page.request.post(url + "/api/flags/", headers=headers, data={
        "source": source.pk, "reason": "PII", "document_ids": [0, 11]})  # fmt: skip
    assert answer.status == 201, answer.text()


def test_the_mixture_page_counts_every_run_that_read_a_version_and_diffs_any_two(
    page, live_server, login, jobs_inline, code_pools
):
    from webapp.catalog.models import MixtureVersion
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.runs import run_progress_record, run_register, run_switch

    early, late = code_pools["early"], code_pools["late"]
    mixture = mixture_get_or_create(name="books-mix")
    with jobs_inline():  # built in this process
        v1, v2 = (
            mixture_version_create(
                mixture_id=mixture.pk,
                token_budget=64 * 600,
                seed=1,
                components=[{"pool": early.pk, "weight": w}, {"pool": late.pk, "weight": 1 - w}],
            )  # fmt: skip
            for w in (0.5, 0.25)
        )
    switched = run_register(name="switched", mixture_version_id=v1.pk)
    run_register(name="stays", mixture_version_id=v2.pk)
    run_progress_record(run_id=switched.pk, step=10, consumed_samples=80)
    with jobs_inline():
        v3 = run_switch(run_id=switched.pk, weights={early.pk: 0.9, late.pk: 0.1})["version"]
    assert MixtureVersion.objects.get(pk=v3.pk).status == "ready"

    login("ada", superuser=True)
    page.goto(f"{live_server.url}/mixtures/{mixture.pk}/")
    runs = {}
    for tr in page.locator("table tr").all()[1:]:
        cells = tr.locator("td").all_inner_texts()
        runs[cells[1]] = cells[5]
    # v1 was read by the run that switched away from it; v2 by the run that stays.
    assert runs == {"v1": "1", "v2": "1", "v3": "1"}, runs
    assert "Runs that read it" in page.inner_text("table tr >> nth=0")
    assert page.inner_text("#mixture-runs").startswith("2 runs read this mixture (any version)")

    # Any two versions, not only each one and the one before it.
    page.select_option("#diff-pick [name=a]", label="v1")
    page.select_option("#diff-pick [name=b]", label="v3")
    page.click("#diff-pick button")
    page.wait_for_selector("#diff-components")
    assert "books-mix: v1 vs v3" in page.inner_text("h1")
    page.goto(f"{live_server.url}/mixtures/{mixture.pk}/diff/?a={v1.pk}&b={v1.pk}")
    assert "choose two different versions" in page.locator(".msg.error").inner_text()


def test_a_version_being_built_says_its_recipe_is_not_measured_yet(
    page, live_server, login, code_pools
):
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    mixture = mixture_get_or_create(name="building-mix")
    # Queued to the broker with no worker to take it: the version stays building.
    version = mixture_version_create(
        mixture_id=mixture.pk, token_budget=64 * 600, seed=1,
        components=[{"pool": code_pools["early"].pk, "weight": 1.0}],
    )  # fmt: skip
    version.refresh_from_db()
    assert version.status == "building"
    login("ada", superuser=True)
    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/")
    said = page.inner_text("#recipe-missing")
    assert said.startswith("Not measured yet: it is being built")
    assert "was built before" not in said
