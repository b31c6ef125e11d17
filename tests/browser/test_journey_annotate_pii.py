"""Journey: annotate a source of real CPython text with planted e-mail addresses and phone
numbers for personal data, from its page; watch the job; read the annotation's page; flag
the documents where ``pii.emails > 0``; the run that trained on them is shown tainted, with
the step at which it first read one. The expected numbers are computed here apart from the
pages: the documents with an address by the library's counter, the first sample that reads
one sample by sample from the schedule."""

import json
import re
import sysconfig
from pathlib import Path

import pytest

from tests.browser.waits import flag_taint_shown

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

STDLIB = Path(sysconfig.get_paths()["stdlib"])
GBS = 4  # samples per step the run reports
PLANTED = (
    "Send reports to security.team{i}@python.example.org, or phone +1 415 555 01{i:02d} "
    "during office hours."
)


def _texts() -> tuple[list[str], list[int]]:
    """40 module sources, cut at a paragraph; every seventh gets an address and a number."""
    files = sorted(p for p in STDLIB.glob("*.py") if p.stat().st_size > 4000)[:40]
    texts = [p.read_text(errors="replace")[:3000] for p in files]
    planted = list(range(3, len(texts), 7))
    for i in planted:
        cut = texts[i].find("\n\n", 800)
        texts[i] = texts[i][:cut] + "\n\n" + PLANTED.format(i=i) + texts[i][cut:]
    return texts, planted


def test_a_pii_annotation_flags_documents_and_taints_the_run_that_read_them(
    page, live_server, login, screenshot, stack
):
    from shardcore.annotate import pii
    from tests.integration.dashboard_fixtures import first_sample_by_doc
    from webapp.catalog.models import Annotation
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.runs import run_progress_record, run_register
    from webapp.catalog.services.sources import source_register
    from webapp.catalog.services.tokenized import tokenized_source_build

    texts, planted = _texts()
    (stack.root / "mail").mkdir()
    (stack.root / "mail" / "modules.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in texts)
    )
    stack.start_worker()
    source = source_register(name="mail", uri=str(stack.root / "mail"))
    ts = tokenized_source_build(source_id=source.pk, shard_size=24 << 10)
    stack.wait_job(ts.job_id)
    ts.refresh_from_db()
    pool = stack.pool("mail-pool", ts, 64)
    mixture = mixture_get_or_create(name="mail-mix")
    version = mixture_version_create(
        mixture_id=mixture.pk, token_budget=64 * pool.num_records,
        components=[{"pool": pool.pk, "weight": 1.0}],
    )  # fmt: skip
    stack.wait_job(version.job_id)
    version.refresh_from_db()
    run = run_register(name="mail-lm", mixture_version_id=version.pk)
    last = version.num_samples // GBS
    run_progress_record(run_id=run.pk, step=last, consumed_samples=last * GBS)

    with_email = [i for i, t in enumerate(texts) if pii.counts(t)["emails"] > 0]
    assert set(planted) <= set(with_email)
    with_phone = sum(1 for t in texts if pii.counts(t)["phones"] > 0)
    first = first_sample_by_doc(version.path, pool.path)
    sample = min(first[d] for d in with_email if d in first)
    step = sample // GBS + 1

    login("ada", superuser=True)
    # Annotate from the source page: the job page follows it live.
    page.goto(f"{live_server.url}/sources/{source.pk}/")
    page.select_option(f"#annotator-{ts.pk}", "pii")
    page.click(f"#annotate-{ts.pk} button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    assert page.inner_text(".msg") == f"Annotating mail (#{ts.pk}) with pii."
    page.wait_for_selector('[data-field="state"]:has-text("succeeded")', timeout=120_000)
    assert page.inner_text('[data-field="documents"]') == str(len(texts))
    assert page.inner_text('[data-field="units_total"]') == str(ts.shards.count())

    # The source page lists it; the job page leads to it.
    ann = Annotation.objects.get(tokenized_source=ts, annotator="pii")
    job_url = page.url
    page.goto(f"{live_server.url}/sources/{source.pk}/")
    rows = page.locator("tr.annotation").all_inner_texts()
    assert len(rows) == 1 and rows[0].split("\t")[:2] == [str(ann.pk), "pii v1"]
    page.goto(job_url)
    page.click("#job-annotation")
    page.wait_for_selector("#flag-where")
    assert page.inner_text("#annotation-documents") == str(len(texts))
    assert page.inner_text("#annotation-columns").split() == [
        "pii.emails", "pii.phones", "pii.ipv4", "pii.ipv6", "pii.cards"
    ]  # fmt: skip
    emails = page.inner_text('[data-column="pii.emails"] .column-facts')
    most = max(pii.counts(t)["emails"] for t in texts)
    assert emails.startswith(f"{len(texts)} values, {len(with_email)} non-zero")
    assert emails.endswith(f"min 0, max {most}")
    phones = page.inner_text('[data-column="pii.phones"] .column-facts')
    assert phones.startswith(f"{len(texts)} values, {with_phone} non-zero")
    screenshot("annotation-pii")

    # Flag the documents where pii.emails > 0.
    page.fill("#flag-filter", "pii.emails > 0")
    page.click("#flag-where button[type=submit]")
    page.wait_for_selector(".msg")
    message = page.inner_text(".msg")
    assert re.fullmatch(
        rf"Flag \d+ recorded over {len(with_email)} document\(s\); what it taints is being "
        r"computed by a worker\.",
        message,
    ), message
    # The documents it names, listed a page at a time (all of them fit in the first).
    assert page.inner_text("#flag-document-ids") == ", ".join(str(i) for i in with_email)
    assert page.inner_text("#flag-documents").startswith(f"{len(with_email)} in all:")
    assert page.locator("#flag-documents-next").count() == 0
    flag_taint_shown(page)  # computed by a worker once the flag is recorded
    # When the run first read them is computed by a worker after the flag is recorded: the
    # row says "being computed" until it is stored, and the page shows it once reloaded.
    for _ in range(120):
        labels = {}
        for tr in page.locator("tr.tainted").all():
            label, documents, read = tr.locator("td").all_inner_texts()
            labels[label.split(" ")[0]] = (int(documents.replace(",", "")), read)
        if not labels["run"][1].startswith("being computed: "):
            break
        page.wait_for_timeout(500)
        page.reload()
    assert list(labels) == ["tokenized", "pool", "mixture", "run"]
    assert labels["tokenized"][0] == len(with_email)
    assert labels["run"][1] == f"first read at step {step} (sample {sample})"

    # The run's page: tainted, first read at step k.
    page.click("tr.tainted a:has-text('run mail-lm')")
    page.wait_for_selector("#flag-reads")
    assert page.inner_text("h1 .badge") == "tainted"
    (row,) = page.locator("#flag-reads tr.tainted").all()
    cells = row.locator("td").all_inner_texts()
    assert cells[1] == f"pii.emails > 0 (annotation {ann.pk}, pii)"
    assert cells[2] == str(sample)
    assert cells[3] == f"first read at step {step} (sample {sample})"
    screenshot("run-first-read-pii")
