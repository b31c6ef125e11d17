"""Journey: two versions of one mixture, the second with other weights and an anneal
stage; from the mixture's page, "diff" shows them side by side with the shares, the built
tokens and epochs of each, and what changed."""

import pytest

from shardcore.manifest import read_manifest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_it_compares_two_versions_side_by_side(
    page, live_server, login, screenshot, jobs_inline, code_pools
):
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create

    pools = code_pools
    mixture = mixture_get_or_create(name="code-mix")
    with jobs_inline():  # built in this process
        v1 = mixture_version_create(
            mixture_id=mixture.pk, token_budget=64 * 2000, seed=1,
            components=[{"pool": pools["early"].pk, "weight": 0.5},
                        {"pool": pools["late"].pk, "weight": 0.5}],
        )  # fmt: skip
        v2 = mixture_version_create(
            mixture_id=mixture.pk, token_budget=64 * 2000, seed=1,
            components=[{"pool": pools["early"].pk, "weight": 0.25},
                        {"pool": pools["late"].pk, "weight": 0.75},
                        {"pool": pools["middle"].pk, "weight": 1.0, "stage": "anneal"}],
            stages=[{"name": "anneal", "tokens": 64 * 200}],
        )  # fmt: skip
    login("ada", superuser=True)
    page.goto(f"{live_server.url}/mixtures/{mixture.pk}/")
    page.click("a.diff")
    page.wait_for_selector("#diff-components")
    assert "code-mix: v1 vs v2" in page.inner_text("h1")
    rows = {}
    for tr in page.locator("#diff-components tr[data-change]").all():
        cells = tr.locator("td").all_inner_texts()
        rows[(cells[0], cells[1])] = cells[2:]
    tokens = {v: {p["path"]: p["tokens"] for p in read_manifest(v.path)["pools"]} for v in (v1, v2)}
    early, late = pools["early"].path, pools["late"].path
    assert rows[("main", "code-early")] == [
        "50.0%", "25.0%", f"{tokens[v1][early]:,}", f"{tokens[v2][early]:,}",
        rows[("main", "code-early")][4], rows[("main", "code-early")][5], "changed",
    ]  # fmt: skip
    assert rows[("main", "code-late")][:2] == ["50.0%", "75.0%"]
    assert rows[("main", "code-late")][3] == f"{tokens[v2][late]:,}"
    assert rows[("anneal", "code-middle")][:2] == ["–", "100.0%"]
    assert rows[("anneal", "code-middle")][-1] == "added"
    assert list(rows)[-1] == ("anneal", "code-middle")  # stages in schedule order
    screenshot("version-diff")
