"""Journey: an editor retires a mixture version and then its pool from the Storage page.
Each Retire first shows what would be removed (or why it is refused, naming the reader)
and removes nothing until confirmed; afterwards the version's page says it is retired,
with no build card, no Retry and no export buttons, an export address answers why in
plain text, and the pool's page no longer offers its path."""

from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_confirms_and_says_what_is_retired(page, live_server, login, jobs_inline, code_pools):
    from webapp.catalog.models import MixtureVersion, Pool
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    pool = code_pools["early"]
    mixture = mixture_get_or_create(name="old-mix")
    with jobs_inline():  # built in this process
        version = mixture_version_create(
            mixture_id=mixture.pk, token_budget=64 * 500, seed=1,
            components=[{"pool": pool.pk, "weight": 1.0}],
        )  # fmt: skip
    version.refresh_from_db()
    assert version.status == "ready" and Path(version.path).exists()
    login("ada", superuser=True)
    url = live_server.url

    # The pool is read by the version: its Retire page says so and offers no button.
    page.goto(url + "/storage/")
    page.locator(f"a[href='/storage/retire/pool/{pool.pk}/']").click()
    refused = page.locator("#retire-refused").inner_text()
    assert f"mixture version old-mix v1 (id {version.pk})" in refused
    assert page.locator("#retire button").count() == 0

    # The version: the first click only asks, naming the files; nothing is removed yet.
    page.goto(url + "/storage/")
    page.locator(f"a[href='/storage/retire/version/{version.pk}/']").click()
    asked = page.locator("#retire").inner_text()
    assert "Retire version old-mix v1?" in asked and version.path in asked
    assert "cannot be undone" in asked
    assert MixtureVersion.objects.get(pk=version.pk).status == "ready"
    assert Path(version.path).exists()
    page.click("#retire button[type=submit]")
    assert "Retired version" in page.locator(".msg.success").inner_text()
    assert MixtureVersion.objects.get(pk=version.pk).status == "retired"
    assert not Path(version.path).exists()

    # The version's page says it is retired, and nothing else.
    page.goto(f"{url}/mixtures/versions/{version.pk}/")
    main = page.inner_text("main")
    assert "retired" in page.locator("h1").inner_text()
    assert "This version is retired" in page.locator("#retired").inner_text()
    assert "The build succeeded" not in main and "Retry" not in main
    assert page.locator("#job").count() == 0
    assert "the version is retired" in page.locator("#exports-retired").inner_text()
    assert page.locator("a[href*='/export/'], form[action*='/export/']").count() == 0
    assert page.locator("#materialize").count() == 0
    # An export address typed in answers why, in plain text (no list of the site's URLs).
    answer = page.request.get(f"{url}/mixtures/versions/{version.pk}/export/megatron/")
    assert answer.status == 404 and answer.headers["content-type"].startswith("text/plain")
    assert "is retired" in answer.text() and "urlpatterns" not in answer.text().lower()

    # Now the pool may go, after the same confirmation; its page has no path to copy.
    page.goto(f"{url}/storage/retire/pool/{pool.pk}/")
    page.click("#retire button[type=submit]")
    assert Pool.objects.get(pk=pool.pk).status == "retired"
    page.goto(f"{url}/pools/{pool.pk}/")
    assert page.locator("#pool-location").count() == 0
    assert "retired" in page.locator("#pool-retired").inner_text()
    assert pool.path not in page.inner_text("main")


def test_it_removes_nothing_on_a_post_without_the_confirmation(
    client, django_user_model, code_pools
):
    from webapp.catalog.models import Pool

    pool = code_pools["late"]
    django_user_model.objects.create_superuser(username="ed", password="pw-for-ed-1")
    client.login(username="ed", password="pw-for-ed-1")
    answer = client.post(f"/storage/retire/pool/{pool.pk}/")
    assert answer.status_code == 302 and answer.url == f"/storage/retire/pool/{pool.pk}/"
    assert Pool.objects.get(pk=pool.pk).status == "ready" and Path(pool.path).exists()
    client.post(f"/storage/retire/pool/{pool.pk}/", {"confirm": "yes"})
    assert Pool.objects.get(pk=pool.pk).status == "retired" and not Path(pool.path).exists()
