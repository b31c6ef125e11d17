# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""shardcore.client reports losses to a live server: validation loss per pool at a
checkpoint and training loss per step land in the books; a refusal raises at once with
the server's message."""

import pytest
from rest_framework.authtoken.models import Token

from shardcore.client import ShardyardClient, ShardyardHTTPError
from tests.integration.dashboard_fixtures import catalog, users  # noqa: F401
from webapp.catalog.models import RunLoss

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_reports_losses_like_a_training_loop(live_server, users, catalog):
    token = Token.objects.get_or_create(user=users["editor"])[0].key
    client = ShardyardClient(live_server.url, token, sleep=lambda s: None)
    run = client.register_run(mixture_version=catalog["version"].pk, name="loss-run")
    pool = catalog["pool"].pk
    client.report_progress(run["id"], step=2, consumed_samples=8)
    answer = client.report_losses(run["id"], step=2, val={pool: 4.25}, train=[(1, 5.5), (2, 5.0)])
    assert answer == {"recorded": 3, "already_recorded": 0}
    client.report_losses(run["id"], step=2, val=[{"pool": pool, "source": "wiki", "loss": 4.0}])
    rows = client.request("GET", f"api/runs/{run['id']}/losses/")["results"]
    assert [(r["split"], r["step"], r["source"], r["loss"]) for r in rows] == [
        ("train", 1, "", 5.5),
        ("train", 2, "", 5.0),
        ("val", 2, "", 4.25),
        ("val", 2, "wiki", 4.0),
    ]
    assert RunLoss.objects.get(split="val", source="").consumed_tokens == 8 * 2048
    with pytest.raises(ShardyardHTTPError, match=r"val\[0\].source: 'code' is not a source") as e:
        client.report_losses(run["id"], step=3, val=[{"pool": pool, "source": "code", "loss": 1}])
    assert e.value.status == 400
    with pytest.raises(ValueError, match="give val"):
        client.report_losses(run["id"], step=3)
