"""Journey: single sign-on through a real OpenID Connect provider (django-oidc-provider in
its own server process). Ada's provider group ``data-eng`` maps to editor: she signs in
there, lands on the overview as an editor (the editor's buttons show, the admin's do not);
when the provider moves her to a group that maps to viewer, her next sign-in makes her a
viewer and the buttons go."""

import pytest

from tests.support.oidc import OidcProvider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def provider(live_server, tmp_path, settings):
    users = [{"username": "ada", "password": "idp-password-1843", "email": "ada@example.org",
              "groups": ["data-eng", "everyone"]}]  # fmt: skip
    idp = OidcProvider.start(tmp=tmp_path, redirect_uri=f"{live_server.url}/oidc/callback/",
                             users=users)  # fmt: skip
    try:
        idp.configure(settings, role_map={"data-eng": "editor", "analysts": "viewer"})
        yield idp
    finally:
        idp.stop()


def sign_in(page, live_server, idp):
    page.goto(live_server.url + "/mixtures/")
    assert "/accounts/login/" in page.url
    page.click("#sso")
    page.wait_for_url(idp.url.rsplit("/openid", 1)[0] + "/accounts/login/**")
    assert "Company sign-in" in page.content()
    page.fill("#id_username", "ada")
    page.fill("#id_password", "idp-password-1843")
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + "/mixtures/")


def test_a_provider_group_mapped_to_editor_gives_the_editor_pages_and_buttons(
    page, live_server, provider, django_user_model, screenshot
):
    from django.contrib.auth.models import Group

    sign_in(page, live_server, provider)

    assert "ada" in page.locator("header.top").inner_text().split()
    assert page.get_by_role("link", name="New mixture").is_visible()  # an editor's button
    assert page.locator("nav").get_by_role("link", name="Users").count() == 0  # admin's
    ada = django_user_model.objects.get(username="ada")
    assert ada.email == "ada@example.org" and not ada.has_usable_password()
    assert sorted(ada.groups.values_list("name", flat=True)) == ["editor"]
    screenshot("sso-editor")
    assert page.goto(live_server.url + "/users/").status == 403
    assert page.goto(live_server.url + "/mixtures/new/").status == 200

    # The provider moves her to a group that maps to viewer; the next sign-in follows it.
    page.context.clear_cookies()
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", (
        "import django; django.setup(); from django.contrib.auth.models import User, Group;"
        "u = User.objects.get(username='ada'); u.groups.clear();"
        "u.groups.add(Group.objects.get_or_create(name='analysts')[0])"
    )], env={**__import__("os").environ, "DJANGO_SETTINGS_MODULE":
             "tests.support.oidc_provider.settings",
             "OIDC_TEST_DB": str(provider.log_path.parent / "idp.sqlite3")},
       check=True)  # fmt: skip
    sign_in(page, live_server, provider)
    assert page.get_by_role("link", name="New mixture").count() == 0
    assert sorted(ada.groups.values_list("name", flat=True)) == ["viewer"]
    assert Group.objects.filter(name="editor").exists()  # the role group stays, without her
    assert page.goto(live_server.url + "/mixtures/new/").status == 403
