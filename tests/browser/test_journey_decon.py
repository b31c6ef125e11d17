"""Journey: annotate the demo corpus's docstrings source against a benchmark file built
from standard-library text (items cut from some of its documents, and docstrings it does
not hold), from the source's page; follow the annotation to the benchmark's audit page;
see the overlapping documents and flag them; the run that trained on them is listed with
the step at which it first read one; its page lists the benchmark items it could have
seen. The expected numbers are computed here apart from the pages: the overlapping
documents by a brute-force reference, the first sample that reads one sample by sample
from the schedule."""

import csv
import json
import re

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

GBS = 4  # samples per step the run reports


def _benchmark(root, texts: list[str]) -> tuple[str, list[dict]]:
    """Six items cut from documents of the corpus (their first 30 words) and six
    docstrings of modules the corpus does not hold, as a CSV benchmark with its spec."""
    from tests.support import decon_plants

    long = [i for i, t in enumerate(texts) if len(t.split()) >= 40]
    chosen = long[:: max(1, len(long) // 6)][:6]
    items = [{"qid": f"in{n}", "question": " ".join(texts[i].split()[:30])}
             for n, i in enumerate(chosen)]  # fmt: skip
    corpus = "\n".join(texts)
    paths = sorted(decon_plants.STDLIB.glob("*.py"))[-40:]
    for doc in decon_plants.docstrings(paths):
        if len(items) == 12:
            break
        if len(doc.split()) >= 25 and doc[:60] not in corpus:
            items.append({"qid": f"out{len(items)}", "question": doc})
    (root / "bench").mkdir()
    with open(root / "bench" / "qa.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["qid", "question"])
        w.writeheader()
        w.writerows(items)
    spec = root / "bench" / "spec.json"
    spec.write_text(json.dumps({"benchmarks": [
        {"name": "stdlib_qa", "files": ["qa.csv"], "fields": ["question"], "id": "qid"}
    ]}))  # fmt: skip
    return str(spec), [{"id": it["qid"], "text": it["question"]} for it in items]


def test_a_decon_annotation_audits_the_run_that_read_benchmark_items(
    page, live_server, login, screenshot, stack
):
    from tests.integration.dashboard_fixtures import first_sample_by_doc
    from tests.support import decon_plants
    from webapp.catalog.models import Annotation
    from webapp.catalog.services.mixtures import mixture_get_or_create, mixture_version_create
    from webapp.catalog.services.runs import run_progress_record, run_register

    corpus = stack.corpus(max_bytes_per_source=60_000)
    stack.start_worker()
    ts = stack.tokenized("docstrings", corpus["docstrings"].parent)
    lines = corpus["docstrings"].read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    spec, items = _benchmark(stack.root, texts)
    want, _ = decon_plants.reference(texts, items)
    overlapping = [i for i, w in enumerate(want) if w]
    seen_items = sorted(set().union(*want))
    assert len(overlapping) >= 6 and all(i.startswith("in") for i in seen_items)

    pool = stack.pool("doc-pool", ts, 64)
    mixture = mixture_get_or_create(name="doc-mix")
    version = mixture_version_create(
        mixture_id=mixture.pk, token_budget=64 * pool.num_records,
        components=[{"pool": pool.pk, "weight": 1.0}],
    )  # fmt: skip
    stack.wait_job(version.job_id)
    version.refresh_from_db()
    run = run_register(name="doc-lm", mixture_version_id=version.pk)
    last = version.num_samples // GBS
    run_progress_record(run_id=run.pk, step=last, consumed_samples=last * GBS)
    first = first_sample_by_doc(version.path, pool.path)
    sample = min(first[d] for d in overlapping if d in first)
    step = sample // GBS + 1
    held = {d for d in overlapping if d in first}
    run_items = sorted(set().union(*(want[d] for d in held)))

    login("ada", superuser=True)
    # Annotate from the source page with the benchmark spec.
    page.goto(f"{live_server.url}/sources/{ts.source_id}/")
    page.select_option(f"#annotator-{ts.pk}", "decon")
    page.fill(f"#params-{ts.pk}", f"benchmarks={spec}")
    page.click(f"#annotate-{ts.pk} button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    page.wait_for_selector('[data-field="state"]:has-text("succeeded")', timeout=120_000)
    ann = Annotation.objects.get(tokenized_source=ts, annotator="decon")
    page.click("#job-annotation")
    page.wait_for_selector("#decon")
    (row,) = page.locator("#decon tr.decon-benchmark").all()
    name, indexed, documents, hit = row.locator("td").all_inner_texts()
    assert (name, indexed, int(documents), int(hit)) == (
        "stdlib_qa", str(len(items)), len(overlapping), len(set().union(*want))
    )  # fmt: skip
    screenshot("annotation-decon")

    # The benchmark's audit: the overlapping documents, then flag them.
    row.locator("a").click()
    page.wait_for_selector("#decon-documents")
    assert page.inner_text("#decon-documents").startswith(f"{len(overlapping)} documents")
    assert page.locator("#decon-unflagged").count() == 1
    page.click("#decon-sources button[type=submit]")
    page.wait_for_selector(".msg")
    assert re.fullmatch(
        r"Flag \d+ recorded; the pools, versions and runs holding these documents are being "
        r"found by a worker\.",
        page.inner_text(".msg"),
    )
    assert page.inner_text(".decon-document-ids") == ", ".join(map(str, overlapping))
    # The worker finds the lineage and the run's first read; the page shows it once reloaded.
    for _ in range(240):
        if page.locator("#decon-runs").count() and page.locator("#decon-computing").count() == 0:
            break
        page.wait_for_timeout(500)
        page.reload()
    (runrow,) = page.locator("#decon-runs tr.tainted").all()
    label, documents, read = runrow.locator("td").all_inner_texts()
    assert (label, int(documents)) == ("doc-lm", len(held))
    assert read == f"first read at step {step} (sample {sample})"
    assert page.inner_text("#decon-pools").split("\t")[0].strip() == "pool doc-pool"
    screenshot("decon-benchmark")

    # The run's page: the benchmark items it could have seen, with that step.
    runrow.locator("a").click()
    page.wait_for_selector("#decon-run")
    for _ in range(240):
        if page.locator("#decon-run-computing").count() == 0:
            break
        page.wait_for_timeout(500)
        page.reload()
    (brow,) = page.locator("#decon-run tr.decon-run-benchmark").all()
    cells = brow.locator("td").all_inner_texts()
    assert cells[0] == "stdlib_qa"
    assert cells[1] == f"{len(run_items)}: " + ", ".join(run_items)
    assert cells[3] == f"first read at step {step} (sample {sample})"
    screenshot("run-decon")
    assert ann.flags.get().benchmark == "stdlib_qa"
