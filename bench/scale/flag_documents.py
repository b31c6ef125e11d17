"""What a flag naming many documents costs: recording it, storing its indices, showing its
page and paging its documents through the API, against one JSON list on the flag's row
(how flags stored them before ``FlagDocuments``). Not a test.

    python -m bench.scale.flag_documents [--sizes 100000,1000000,10000000]

Needs the service's settings in the environment (``DATABASE_URL`` on Postgres); it
migrates the database and deletes what it created. Per size n, in a fresh interpreter (its
peak RSS its own): n document indices of a source spread over [0, 20 n) (a filter's
matches), then

- **runs** (now): ``flag_create`` with them (the request, or a taint task storing a
  filter's matches): time, the interpreter's peak RSS, bytes of its ``FlagDocuments`` rows; the flag page
  (first page, and one after the middle index) and ``GET /api/flags/{pk}/documents/``
  a page deep: the median of five requests each through Django's test client; the flags'
  list page.
- **JSON list** (before), in another fresh interpreter: the same indices as one ``jsonb``
  list on a row of a table made for the measurement, written and read back whole (what the flag page and the
  flags' list did, as ``{{ flag.document_ids|length }}`` loaded it), time and bytes.

Growth fitted (``bench.scale.common.fit_power``), extrapolated to 10^9 and 10^10 documents.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench.scale.common import fit_power, machine, markdown_table, peak_rss_mb, run_child

TAG = "bench-flag-documents"


def _django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()


def _median_ms(fn, times: int = 5) -> float:
    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def _indices(n: int) -> np.ndarray:
    """n sorted distinct indices spread over [0, 20 n), the same for a size each time."""
    rng = np.random.default_rng(n)
    a = np.sort(rng.integers(0, 20 * n, n + n // 20))
    return a[np.concatenate(([True], a[1:] != a[:-1]))][:n]


def measure(n: int) -> dict:
    """In this fresh interpreter: one flag over n documents recorded, its runs' bytes, its
    pages. One JSON line."""
    _django()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    from webapp.catalog.models import Flag, FlagDocuments, Source
    from webapp.catalog.services import flags

    flags.flag_taint_request = lambda **k: None  # nothing built to taint: no task queued
    Source.objects.filter(name=TAG).delete()
    source = Source.objects.create(name=TAG, uri="/bench/flag-documents")
    ids = _indices(n)
    out: dict = {"documents": int(ids.size)}
    try:
        t0 = time.perf_counter()
        flag = flags.flag_create(reason="bench", source_id=source.pk, document_ids=ids)
        out["record_s"] = time.perf_counter() - t0
        out["record_rss_mb"] = peak_rss_mb()
        runs = FlagDocuments.objects.filter(flag=flag)
        out["stored_mb"] = sum(len(bytes(r.data)) for r in runs.only("data")) / 1e6
        user = get_user_model().objects.get_or_create(username=f"{TAG}-viewer")[0]
        user.groups.add(Group.objects.get_or_create(name="viewer")[0])
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        client = Client()
        client.force_login(user)
        middle = int(ids[ids.size // 2])
        pages = {
            "page_ms": f"/audit/flags/{flag.pk}/",
            "deep_page_ms": f"/audit/flags/{flag.pk}/?documents_after={middle}",
            "api_page_ms": f"/api/flags/{flag.pk}/documents/?after={middle}&limit=1000",
            "list_ms": "/audit/",
        }
        for key, url in pages.items():

            def get(url=url):
                r = client.get(url)
                assert r.status_code == 200, (url, r.status_code)

            out[key] = _median_ms(get)
        shown = client.get(pages["deep_page_ms"]).content.decode()
        assert str(int(ids[ids.size // 2 + 1])) in shown  # the page after the middle

        Flag.objects.filter(pk=flag.pk).delete()
    finally:
        Source.objects.filter(name=TAG).delete()
        get_user_model().objects.filter(username=f"{TAG}-viewer").delete()
    return out


def measure_json(n: int) -> dict:
    """In this fresh interpreter: the same indices as one ``jsonb`` list on a row (how a
    flag held them before), written and read back whole. One JSON line."""
    _django()
    from django.db import connection

    listed = _indices(n).tolist()
    out: dict = {"documents": len(listed)}
    with connection.cursor() as c:
        c.execute("CREATE TEMP TABLE bench_flag_list (id int primary key, ids jsonb)")
        t0 = time.perf_counter()
        c.execute("INSERT INTO bench_flag_list VALUES (1, %s)", [json.dumps(listed)])
        out["json_record_s"] = time.perf_counter() - t0
        c.execute("SELECT pg_column_size(ids) FROM bench_flag_list WHERE id = 1")
        out["json_mb"] = c.fetchone()[0] / 1e6

        def read_list():
            c.execute("SELECT ids FROM bench_flag_list WHERE id = 1")
            got = c.fetchone()[0]
            assert len(json.loads(got) if isinstance(got, str) else got) == n

        out["json_read_ms"] = _median_ms(read_list, 3)
        out["json_rss_mb"] = peak_rss_mb()
        c.execute("DROP TABLE bench_flag_list")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--child", type=int)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps((measure_json if args.json else measure)(args.child)))
        return
    _django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    print(machine())
    out = []
    for n in [int(s) for s in args.sizes.split(",")]:
        row = run_child(["bench.scale.flag_documents", "--child", str(n)])
        row.update(run_child(["bench.scale.flag_documents", "--child", str(n), "--json"]))
        print(json.dumps(row), flush=True)
        out.append(row)
    print(
        markdown_table(
            [
                "documents",
                "recorded s",
                "peak RSS MB",
                "stored MB",
                "page ms",
                "deep page ms",
                "API page ms",
                "list ms",
                "JSON row MB",
                "JSON read ms",
                "JSON peak RSS MB",
            ],
            [
                [
                    r["documents"],
                    r["record_s"],
                    r["record_rss_mb"],
                    r["stored_mb"],
                    r["page_ms"],
                    r["deep_page_ms"],
                    r["api_page_ms"],
                    r["list_ms"],
                    r["json_mb"],
                    r["json_read_ms"],
                    r["json_rss_mb"],
                ]
                for r in out
            ],
        )  # fmt: skip
    )
    sizes = [r["documents"] for r in out]
    for key, what in [
        ("record_s", "recorded s"), ("record_rss_mb", "peak RSS MB"),
        ("stored_mb", "stored MB"), ("page_ms", "page ms"),
        ("deep_page_ms", "deep page ms"), ("api_page_ms", "API page ms"),
        ("json_read_ms", "JSON list read ms"), ("json_mb", "JSON row MB"),
        ("json_rss_mb", "JSON peak RSS MB"),
    ]:  # fmt: skip
        f = fit_power(sizes, [max(r[key], 1e-9) for r in out])
        print(
            f"growth: {what} ~ documents^{f.slope:.2f}; {f.at(1e9):,.1f} at 10^9, "
            f"{f.at(1e10):,.1f} at 10^10"
        )
    print(machine())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
