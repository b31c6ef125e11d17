# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The notifications page: a user adds a webhook for themselves or for a team they are in,
sees it and its deliveries, and removes it; others' webhooks are not theirs to see."""

from __future__ import annotations

from django.contrib.auth.models import Group

from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from webapp.ops.models import WebhookEndpoint


def test_a_user_adds_a_team_webhook_and_removes_it(db, client, users, login):
    login("viewer")
    team = Group.objects.create(name="pretraining")
    users["viewer"].groups.add(team)
    page = client.get("/notifications/")
    assert page.status_code == 200 and b"No webhooks yet" in page.content
    response = client.post("/notifications/", {
        "url": "https://chat.example.org/hook", "events": ["job.failed", "run.tainted"],
        "format": "slack", "team": team.pk,
    }, follow=True)  # fmt: skip
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.team, endpoint.owner, endpoint.format) == (team, users["viewer"], "slack")
    assert endpoint.events == ["job.failed", "run.tainted"] and len(endpoint.secret) > 20
    assert f"Its secret (shown once): {endpoint.secret}".encode() in response.content
    assert b"team pretraining" in response.content

    client.logout()
    login("editor")  # not in the team: neither sees nor removes it
    assert b"chat.example.org" not in client.get("/notifications/").content
    assert client.post(f"/notifications/{endpoint.pk}/remove/").status_code == 404
    client.logout()
    login("viewer")
    client.post(f"/notifications/{endpoint.pk}/remove/")
    assert not WebhookEndpoint.objects.exists()


def test_a_webhook_needs_events_and_a_url(db, client, login):
    login("viewer")
    response = client.post("/notifications/", {"url": "not a url", "format": "json"})
    assert response.status_code == 200
    assert (
        b"Enter a valid URL" in response.content and b"This field is required" in response.content
    )
    assert not WebhookEndpoint.objects.exists()


def test_a_webhook_to_an_internal_address_is_refused_on_the_url_field(db, client, login):
    login("viewer")
    response = client.post("/notifications/", {
        "url": "http://169.254.169.254/latest/meta-data/", "events": ["job.failed"],
        "format": "json",
    })  # fmt: skip
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert list(errors) == ["url"], errors
    assert errors["url"][0].startswith("169.254.169.254 is link-local, not a public address")
    assert b"169.254.169.254 is link-local" in response.content
    response = client.post("/notifications/", {
        "url": "ftp://hooks.example.org/x", "events": ["job.failed"], "format": "json",
    })  # fmt: skip
    assert "only http and https" in str(response.context["form"].errors["url"])
    assert not WebhookEndpoint.objects.exists()
