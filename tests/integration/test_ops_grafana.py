"""The Grafana dashboard in deploy/grafana loads as a dashboard (Grafana's own models read it
without losing a field; unique panel ids, a Prometheus datasource variable, a query per
panel) and every metric its queries name is one that /metrics exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "shardyard.json"
PROMQL_WORDS = {"sum", "by", "rate", "histogram_quantile", "le", "kind", "state", "queue",
                "origin", "route", "status", "without", "avg", "max", "min", "irate"}  # fmt: skip


def test_grafanas_own_dashboard_model_reads_it_without_losing_a_field():
    """grafana-foundation-sdk (Grafana's generated models) parses the file into its typed
    dashboard and writes it back: a misspelt or misplaced field would be dropped."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard, Panel

    data = json.loads(DASHBOARD.read_text())
    dashboard = Dashboard.from_json(data)
    assert all(isinstance(p, Panel) for p in dashboard.panels) and len(dashboard.panels) >= 10
    written = json.loads(json.dumps(dashboard, cls=JSONEncoder))
    assert lost(data, written) == [], "fields Grafana's model does not know"


def lost(original, written, path="") -> list[str]:
    """The fields of ``original`` that ``written`` dropped or changed (it may add defaults)."""
    if isinstance(original, dict):
        if not isinstance(written, dict):
            return [path]
        return [p for k, v in original.items()
                for p in (lost(v, written[k], f"{path}/{k}") if k in written else [f"{path}/{k}"])]  # fmt: skip
    if isinstance(original, list):
        if not isinstance(written, list) or len(written) != len(original):
            return [path]
        return [p for i, (a, b) in enumerate(zip(original, written, strict=True))
                for p in lost(a, b, f"{path}[{i}]")]  # fmt: skip
    return [] if original == written else [path]


def test_every_panel_queries_a_metric_the_endpoint_exports(admin_client, db):
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] == "Shardyard" and isinstance(dash["schemaVersion"], int)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 10

    admin_client.get("/healthz")  # one timed request, so the latency histogram has samples
    body = admin_client.get("/metrics").content.decode()
    exported = set()
    for family in text_string_to_metric_families(body):
        # A family with no rows yet still declares its name and type (HELP/TYPE lines).
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        exported |= {family.name + sfx for sfx in suffixes.get(family.type, [""])}
    named = set()
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            selectors = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", target["expr"])
            words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", selectors)) - PROMQL_WORDS
            assert words, target["expr"]
            named |= words
    missing = named - exported
    # Histograms and counters export their _bucket/_count/_total samples; gauges their name.
    assert missing == set(), f"the dashboard queries metrics /metrics does not export: {missing}"
    assert {"shardyard_units", "shardyard_tokens_processed_total",
            "shardyard_queue_depth", "shardyard_workers_live"} <= named  # fmt: skip
