"""Journey: a tokenize job over a file with bad lines, watched on its page from before a
worker runs it: when it ends, the page (never reloaded) shows what its end changed, the
bad input it met (file, reason, count, a sample) and the timeline of its units, as a
reload would, not the "no unit has started yet" it was opened with."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_a_watched_job_page_shows_its_bad_input_and_timeline_when_it_ends(
    page, live_server, login, stack
):
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build
    from webapp.jobs.models import Job

    (stack.root / "notes").mkdir()
    lines = [f'{{"text": "note {i} " }}' for i in range(40)]
    lines[7] = '{"text": "unterminated'
    lines[21] = '{"title": "no text field"}'
    (stack.root / "notes" / "a.jsonl").write_text("\n".join(lines) + "\n")
    source = source_register(name="notes", uri=str(stack.root / "notes"))
    assert source.bad_lines == 2
    ts = tokenized_source_build(source_id=source.pk)  # queued: no worker runs yet
    login("ada", superuser=True)

    page.goto(f"{live_server.url}/jobs/{ts.job_id}/")
    assert page.locator("[data-field=state]").inner_text() == "queued"
    assert page.locator("#bad-input").count() == 0
    timeline = page.locator("#timeline .js-plotly-plot")
    timeline.wait_for()
    assert timeline.evaluate("(el) => el.data.length") == 0  # no unit has started yet
    page.evaluate("window.notReloaded = true")
    stack.start_worker()

    page.wait_for_function(
        "document.querySelector('[data-field=state]').textContent === 'succeeded'",
        timeout=120_000,
    )
    page.locator("#bad-input").wait_for()
    assert page.evaluate("window.notReloaded") is True
    job = Job.objects.get(pk=ts.job_id)
    rows = [r.locator("td").all_inner_texts() for r in page.locator("#bad-input tr").all()[1:]]
    shown = {(f, reason): int(n) for f, reason, n, _samples in rows}
    assert shown == {
        (f, reason): r["count"] for f, reasons in job.bad_input.items() for reason, r in reasons.items()
    }  # fmt: skip
    assert sum(shown.values()) == 2 and all(f.endswith("a.jsonl") for f, _ in shown)
    assert "unterminated" in page.inner_text("#bad-input")
    # Every unit's bar, as it ran, on the row of the worker that ran it.
    timeline = page.locator("#timeline .js-plotly-plot")
    timeline.wait_for()
    bars = timeline.evaluate("(el) => el.data.map((t) => [t.name, t.customdata.length])")
    assert bars and {name for name, _ in bars} == {"succeeded"}
    assert sum(n for _, n in bars) == job.units.exclude(started_at=None).count() > 0
