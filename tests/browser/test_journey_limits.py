"""Journey: the numbers a person types, on the pages and on the command line, are read and
bounded by one source, ``shardcore.limits``. The builder takes ``1e6`` as a budget (it
answered with Python's int() message), refuses ``max_repetitions -1`` as an error (it gave
warnings) in the words the ``shardyard mix`` command prints, opens with a budget of one
epoch that warns of no repeat, and offers every ordering; the pool form refuses
``val_fraction 0.7`` as ``shardyard pool`` does (the command took it while the form
stopped at 0.5) and shows its help texts' ``<annotator>.<column>`` placeholders."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardcore import limits
from tests.unit import pool_fixtures as pf

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def _shardyard(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "shardcore.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _prediction(page) -> dict:
    """The builder's prediction once it is painted: error, warnings and rows."""
    page.wait_for_function(
        "() => document.getElementById('error').textContent"
        " || document.querySelectorAll('#prediction tr').length > 1"
    )
    rows = [tr.locator("td").all_inner_texts() for tr in page.locator("#prediction tr").all()[1:]]
    return {
        "error": page.inner_text("#error"),
        "warnings": page.locator("#warnings li").all_inner_texts(),
        "rows": rows,
    }


def _type(page, selector: str, value: str) -> None:
    """Type into a builder field and wait for the prediction that answers it."""
    page.evaluate("document.getElementById('prediction').innerHTML = ''")
    page.evaluate("document.getElementById('error').textContent = ''")
    page.fill(selector, value)


def test_the_builder_reads_numbers_as_the_command_line_does(
    page, live_server, login, code_pools, tmp_path
):
    late = code_pools["late"]  # the newest pool: the builder's first row
    login("ada", superuser=True)
    page.goto(live_server.url + "/mixtures/new/")

    # Every ordering a spec takes is offered.
    orders = page.locator("[name=order] option").all_inner_texts()
    assert orders == ["blend", "diversity", "greedy_block", "random"]

    # The default budget reads the first pool once: one epoch, no repeat warning.
    first = _prediction(page)
    assert page.input_value("[name=tokens]") == str(late.num_records * late.seq_len)
    assert first["error"] == "" and first["warnings"] == [], first
    assert first["rows"][0][0] == "code-late" and first["rows"][0][3] == "1.00"

    # 1e6 is a budget of 1,000,000 tokens: ceil(10^6 / 64) = 15,625 samples.
    _type(page, "[name=tokens]", "1e6")
    typed = _prediction(page)
    assert typed["error"] == "" and typed["rows"][0][1] == "15,625", typed
    _type(page, "[name=tokens]", "1_000_000")
    assert _prediction(page)["rows"][0][1] == "15,625"
    _type(page, "[name=tokens]", "1M")
    assert _prediction(page)["rows"][0][1] == "15,625"
    _type(page, "[name=tokens]", "1e6x")
    bad = _prediction(page)["error"]
    assert bad == "tokens: '1e6x' is not a number (write e.g. 1000000, 1_000_000, 1e6 or 1M)"
    assert "int()" not in bad and "base 10" not in bad
    _type(page, "[name=tokens]", "1.5")
    assert _prediction(page)["error"].startswith("tokens: 1.5 is not an integer")

    # max_repetitions -1 is an error, not warnings, in the command line's words.
    _type(page, "[name=tokens]", "1e6")
    _prediction(page)
    _type(page, "[name=max_repetitions]", "-1")
    refused = _prediction(page)
    assert refused["error"] == "max_repetitions: -1 is outside the allowed range (0, 1e+12]"
    assert refused["rows"] == [] and refused["warnings"] == []
    assert page.locator("#save").is_disabled()

    out = tmp_path / "mix"
    command = ["mix", "--component", f"{late.path}:1", "--out", str(out)]
    done = _shardyard(*command, "--tokens", "1e6", "--max-repetitions", "-1", cwd=tmp_path)
    assert done.returncode == 2 and refused["error"] in done.stderr, done.stderr
    done = _shardyard(*command, "--tokens", "1e6", "--max-repetitions", "1e3", "--plan-only",
                      cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0 and "15,625 samples" in done.stdout, done.stderr
    done = _shardyard(*command, "--tokens", "1e6x", "--plan-only", cwd=tmp_path)
    assert done.returncode == 2 and bad in done.stderr, done.stderr


def test_the_pool_form_and_the_pool_command_agree(page, live_server, login, tmp_path):
    from webapp.catalog.models import ArtifactStatus, Pool, Source, TokenizedSource, Tokenizer

    path = pf.write_tokenized(tmp_path / "tok", pf.corpus("prose", 40), shard_docs=20)
    source = Source.objects.create(name="prose", uri=str(tmp_path), num_documents=40)
    TokenizedSource.objects.create(
        source=source, tokenizer=Tokenizer.objects.create(spec="tiktoken:test"),
        path=str(path), status=ArtifactStatus.READY, num_documents=40,
    )  # fmt: skip
    login("ada", superuser=True)
    page.goto(live_server.url + "/pools/")

    # The help texts show their placeholders (they were taken for HTML tags).
    assert "read as <annotator>.<column> in the filter" in page.inner_text("#pool-build")
    assert f"0 to {limits.MAX_VAL_FRACTION:g}" in page.inner_text("#pool-build")

    page.fill("#id_name", "held-out")
    page.locator("#id_tokenized_ids option").first.click()
    page.fill("#id_seq_len", "64")
    page.fill("#id_val_fraction", "0.7")
    page.click("text=Build pool")
    at_field = page.locator("#id_val_fraction_error").inner_text()
    assert at_field == "val_fraction: 0.7 is outside the allowed range [0, 0.5]"

    out = tmp_path / "pool"
    done = _shardyard("pool", str(path), "--out", str(out), "--seq-len", "64",
                      "--val-fraction", "0.7", "--quiet", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and at_field in done.stderr, done.stderr
    assert not out.exists()

    # The same numbers typed another way are the same numbers, on both sides.
    page.fill("#id_seq_len", "6.4e1")
    page.fill("#id_val_fraction", "1e-1")
    page.fill("#id_seed", "1_000")
    page.click("text=Build pool")
    page.wait_for_url("**/jobs/*/")
    pool = Pool.objects.get(name="held-out")
    assert (pool.seq_len, pool.params["seed"], pool.params["val_fraction"]) == (64, 1000, 0.1)
    done = _shardyard("pool", str(path), "--out", str(out), "--seq-len", "6.4e1",
                      "--val-fraction", "1e-1", "--seed", "1_000", "--quiet", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
