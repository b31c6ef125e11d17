"""An anonymous user is sent to the login page from every page."""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

# The probes, the icon and the single sign-on flow are public; /metrics and /api/storage/ answer 401
# like the API.
PUBLIC = {
    "login",
    "logout",
    "healthz",
    "readyz",
    "favicon",
    "metrics",
    "api-storage",
    "oidc_authentication_init",
    "oidc_authentication_callback",
}  # single sign-on


def _page_paths():
    """Every URL pattern of the project with its arguments filled in, outside the admin
    (which has its own login) and the API (which answers 401/403 instead of redirecting)."""
    out = []

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                route = str(p.pattern)
                if route.startswith(("admin/", "api/")):
                    continue
                walk(p.url_patterns, prefix + route)
            elif isinstance(p, URLPattern) and p.name not in PUBLIC:
                route = prefix + str(p.pattern)
                for conv in ("<int:", "<slug:", "<str:", "<uuid:"):
                    while conv in route:
                        start = route.index(conv)
                        end = route.index(">", start)
                        fill = "00000000-0000-0000-0000-000000000001" if conv == "<uuid:" else "1"
                        route = route[:start] + fill + route[end + 1 :]
                out.append("/" + route.lstrip("^").rstrip("$"))

    walk(get_resolver().url_patterns)
    return out


def test_it_knows_some_pages():
    assert "/" in _page_paths()


@pytest.mark.django_db
@pytest.mark.parametrize("path", _page_paths())
def test_it_redirects_anonymous_users_to_login(client, path):
    resp = client.get(path)
    assert resp.status_code == 302, path
    assert resp["Location"].startswith("/accounts/login/"), path


@pytest.mark.django_db
def test_it_shows_the_overview_after_login(client, django_user_model):
    django_user_model.objects.create_user(username="viewer", password="pw-123456789")
    client.login(username="viewer", password="pw-123456789")
    resp = client.get("/")
    assert resp.status_code == 200
    assert b"Overview" in resp.content
