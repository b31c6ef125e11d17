"""The request-latency series of ``/metrics`` stay bounded whatever anonymous clients send:
made-up HTTP methods count as ``other``, unknown paths as ``unmatched``, the route is the
URL pattern (never the raw path) and the status its class."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

SERIES = "shardyard_request_duration_seconds"


def _request_series(client) -> set[tuple[str, str, str]]:
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert response.status_code == 200, response.content
    out = set()
    for family in text_string_to_metric_families(response.content.decode()):
        if family.name == SERIES:
            for s in family.samples:
                if s.name == f"{SERIES}_count":
                    out.add((s.labels["method"], s.labels["route"], s.labels["status"]))
    return out


def test_made_up_methods_and_paths_add_no_series(client, db, settings):
    settings.SHARDYARD_METRICS_TOKEN = "scrape-secret"
    client.get("/healthz")
    client.get("/no/such/page/at-all")
    before = _request_series(client)
    for i in range(300):
        client.generic(f"M{i:03d}", "/healthz")
        client.generic(f"PROPFIND{i}", f"/no/such/page/{i}")
        client.get(f"/api/pools/{i}/")  # one route, whatever the id
    after = _request_series(client)
    methods = {m for m, _, _ in after}
    http = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
    assert methods <= http | {"other"}, sorted(methods)
    assert ("other", "healthz", "4xx") in after, sorted(after)
    assert ("other", "unmatched", "4xx") in after, sorted(after)
    assert not any(r.startswith("no/such") or "/0/" in r for _, r, _ in after), sorted(after)
    assert {s for _, _, s in after} <= {"1xx", "2xx", "3xx", "4xx", "5xx", "other"}
    # 900 requests of 601 different methods and 600 paths: at most a handful of new series.
    assert len(after - before) <= 4, sorted(after - before)
