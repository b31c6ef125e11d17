"""Roles and the admin's user page: who may look, who may manage users and tokens."""

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from rest_framework.authtoken.models import Token

from webapp.roles import has_role, require_role, user_role

pytestmark = pytest.mark.django_db


@pytest.fixture
def make_user(django_user_model, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

    def make(username: str, role: str | None):
        user = django_user_model.objects.create_user(username=username, password="pw-123456789")
        if role:
            user.groups.add(Group.objects.get(name=role))
        return user

    return make


def test_it_creates_the_three_role_groups_by_migration():
    assert set(Group.objects.values_list("name", flat=True)) >= {"viewer", "editor", "admin"}


def test_it_orders_roles_so_that_higher_roles_include_lower(make_user, django_user_model):
    viewer, editor, admin = (
        make_user("v", "viewer"),
        make_user("e", "editor"),
        make_user("a", "admin"),
    )
    nobody = make_user("n", None)
    root = django_user_model.objects.create_superuser(username="root", password="pw-123456789")
    assert [user_role(u) for u in (nobody, viewer, editor, admin, root)] == [
        "viewer",
        "viewer",
        "editor",
        "admin",
        "admin",
    ]
    assert has_role(editor, "viewer") and has_role(editor, "editor")
    assert not has_role(editor, "admin")
    with pytest.raises(PermissionDenied, match="editor"):
        require_role(viewer, "editor")
    require_role(admin, "editor")


def test_it_refuses_anonymous_users_every_role():
    from django.contrib.auth.models import AnonymousUser

    assert user_role(AnonymousUser()) is None
    with pytest.raises(PermissionDenied):
        require_role(AnonymousUser(), "viewer")


def test_it_rejects_an_unknown_role_name(make_user):
    with pytest.raises(ValueError, match="unknown role"):
        has_role(make_user("v", "viewer"), "owner")


def test_it_shows_the_user_page_to_admins_only(client, make_user):
    make_user("ed", "editor")
    client.login(username="ed", password="pw-123456789")
    assert client.get("/users/").status_code == 403
    make_user("boss", "admin")
    client.login(username="boss", password="pw-123456789")
    resp = client.get("/users/")
    assert resp.status_code == 200
    assert b"ed" in resp.content and b"New user" in resp.content


def test_it_lets_an_admin_create_a_user_with_a_role(client, make_user, django_user_model):
    make_user("boss", "admin")
    client.login(username="boss", password="pw-123456789")
    resp = client.post(
        "/users/create/", {"username": "trainer", "password": "long-enough-pw", "role": "editor"}
    )
    assert resp.status_code == 302
    trainer = django_user_model.objects.get(username="trainer")
    assert user_role(trainer) == "editor"
    assert trainer.check_password("long-enough-pw")


def test_it_refuses_a_duplicate_username_with_a_message(client, make_user, django_user_model):
    make_user("boss", "admin")
    client.login(username="boss", password="pw-123456789")
    resp = client.post(
        "/users/create/",
        {"username": "boss", "password": "long-enough-pw", "role": "viewer"},
        follow=True,
    )
    assert b"exists already" in resp.content
    assert django_user_model.objects.filter(username="boss").count() == 1


def test_it_changes_a_role(client, make_user):
    make_user("boss", "admin")
    viewer = make_user("v", "viewer")
    client.login(username="boss", password="pw-123456789")
    client.post(f"/users/{viewer.pk}/role/", {"role": "editor"})
    viewer.refresh_from_db()
    assert list(viewer.groups.values_list("name", flat=True)) == ["editor"]


def test_it_issues_a_token_once_and_revokes_it(client, make_user):
    make_user("boss", "admin")
    trainer = make_user("trainer", "editor")
    client.login(username="boss", password="pw-123456789")
    resp = client.post(f"/users/{trainer.pk}/token/", follow=True)
    key = Token.objects.get(user=trainer).key
    assert key.encode() in resp.content
    # The list does not print keys again.
    assert key.encode() not in client.get("/users/").content
    client.post(f"/users/{trainer.pk}/token/")
    assert Token.objects.get(user=trainer).key != key
    client.post(f"/users/{trainer.pk}/token/revoke/")
    assert not Token.objects.filter(user=trainer).exists()


@pytest.mark.parametrize(
    "path", ["/users/create/", "/users/1/role/", "/users/1/token/", "/users/1/token/revoke/"]
)
def test_it_refuses_user_management_to_editors(client, make_user, path):
    make_user("ed", "editor")
    client.login(username="ed", password="pw-123456789")
    resp = client.post(path, {"username": "x", "password": "long-enough-pw", "role": "admin"})
    assert resp.status_code == 403
    assert not Token.objects.exists()


def test_it_serves_plotly_js_locally(client, make_user):
    make_user("v", "viewer")
    client.login(username="v", password="pw-123456789")
    resp = client.get("/static/plotly/plotly.min.js")
    assert resp.status_code == 200
    body = b"".join(resp.streaming_content) if resp.streaming else resp.content
    assert b"plotly.js" in body[:2000]
