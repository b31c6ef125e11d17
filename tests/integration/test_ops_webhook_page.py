# ruff: noqa: F811 - pytest fixtures are imported by name and used as arguments
"""The notifications page: an editor adds a webhook for themselves or for a team they are
in, sees it and its deliveries, and removes it; others' webhooks are not theirs to see.
Viewers and trainers see their teams' webhooks but neither add nor remove one."""

from __future__ import annotations

from django.contrib.auth.models import Group

from tests.integration.dashboard_fixtures import login, users  # noqa: F401
from webapp.ops.models import WebhookEndpoint


def test_an_editor_adds_a_team_webhook_and_removes_it(db, client, users, login):
    login("editor")
    team = Group.objects.create(name="pretraining")
    users["editor"].groups.add(team)
    page = client.get("/notifications/")
    assert page.status_code == 200 and b"No webhooks yet" in page.content
    response = client.post("/notifications/", {
        "url": "https://chat.example.org/hook", "events": ["job.failed", "run.tainted"],
        "format": "slack", "team": team.pk,
    }, follow=True)  # fmt: skip
    endpoint = WebhookEndpoint.objects.get()
    assert (endpoint.team, endpoint.owner, endpoint.format) == (team, users["editor"], "slack")
    assert endpoint.events == ["job.failed", "run.tainted"] and len(endpoint.secret) > 20
    assert f"Its secret (shown once): {endpoint.secret}".encode() in response.content
    assert b"team pretraining" in response.content

    client.logout()
    login("admin")  # not in the team: neither sees nor removes it
    assert b"chat.example.org" not in client.get("/notifications/").content
    assert client.post(f"/notifications/{endpoint.pk}/remove/").status_code == 404
    client.logout()
    login("editor")
    client.post(f"/notifications/{endpoint.pk}/remove/")
    assert not WebhookEndpoint.objects.exists()


def test_a_webhook_needs_events_and_a_url(db, client, login):
    login("editor")
    response = client.post("/notifications/", {"url": "not a url", "format": "json"})
    assert response.status_code == 200
    assert (
        b"Enter a valid URL" in response.content and b"This field is required" in response.content
    )
    assert not WebhookEndpoint.objects.exists()


def test_a_webhook_to_an_internal_address_is_refused_on_the_url_field(db, client, login):
    login("editor")
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


def test_viewers_and_trainers_see_their_teams_webhooks_but_neither_add_nor_remove_one(
    db, client, django_user_model, settings
):
    from tests.integration.dashboard_fixtures import PASSWORD, role_users

    people = role_users(django_user_model, settings, ("viewer", "trainer", "editor"))
    team = Group.objects.create(name="pretraining")
    for user in people.values():
        user.groups.add(team)
    endpoint = WebhookEndpoint.objects.create(
        url="https://chat.example.org/hook", secret="s", events=["job.failed"],
        owner=people["editor"], team=team,
    )  # fmt: skip
    for role in ("viewer", "trainer"):
        client.login(username=role, password=PASSWORD)
        page = client.get("/notifications/")
        assert page.status_code == 200 and b"chat.example.org" in page.content
        assert b"Editors and admins add and remove webhooks" in page.content
        assert b"Add webhook" not in page.content and b"Remove</button>" not in page.content
        added = client.post("/notifications/", {
            "url": "https://attacker.example.net/x", "events": ["job.failed"], "format": "json",
        })  # fmt: skip
        assert added.status_code == 403, role
        assert client.post(f"/notifications/{endpoint.pk}/remove/").status_code == 403, role
        client.logout()
    assert list(WebhookEndpoint.objects.values_list("url", flat=True)) == [endpoint.url]
