"""What journeys wait for on a page that a worker fills in after the request."""

from __future__ import annotations


def flag_taint_shown(page, tries: int = 240) -> None:
    """Reload a flag's page until its taint summary is there: the worker computes what a
    flag taints once it is recorded, and until then the page says "being computed"."""
    for _ in range(tries):
        if page.locator("#flag-summary").count():
            return
        assert page.locator("#flag-taint-computing").count() == 1
        page.wait_for_timeout(500)
        page.reload()
    raise AssertionError("the flag's taint was not shown")
