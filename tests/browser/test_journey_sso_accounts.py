"""Journey: single sign-on never takes over a local account. A real OpenID Connect provider
(django-oidc-provider in its own server process) sends the claims an attacker controls at
their own provider account: a user name, an e-mail address and whether it is verified.

- The provider's user ``admin`` signs in and gets an account of its own, not the local
  superuser ``admin``.
- An unverified e-mail claim equal to a local user's address links nothing, even with
  linking by verified e-mail on; a verified one links to that account.
- An admin links an existing account to a provider identity on the users page; that
  identity's sign-in then reaches it; a superuser cannot be linked."""

from __future__ import annotations

import pytest

from tests.support.oidc import OidcProvider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def start_provider(live_server, tmp_path, settings):
    started: list[OidcProvider] = []

    def start(users: list[dict]) -> OidcProvider:
        idp = OidcProvider.start(
            tmp=tmp_path, redirect_uri=f"{live_server.url}/oidc/callback/", users=users
        )
        started.append(idp)
        idp.configure(settings, role_map={"platform": "admin", "data-eng": "editor"})
        return idp

    yield start
    for idp in started:
        idp.stop()


def sso_sign_in(page, live_server, idp, username: str, password: str) -> None:
    page.context.clear_cookies()
    page.goto(live_server.url + "/mixtures/")
    assert "/accounts/login/" in page.url
    page.click("#sso")
    page.wait_for_url(idp.url.rsplit("/openid", 1)[0] + "/accounts/login/**")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + "/mixtures/")


def header_user(page) -> str:
    return page.locator("header.top").inner_text()


def test_a_provider_user_named_admin_gets_an_account_of_its_own(
    page, live_server, start_provider, django_user_model
):
    local = django_user_model.objects.create_superuser(
        "admin", "root@example.org", "local-admin-password-1"
    )
    idp = start_provider(
        [
            {
                "username": "admin",
                "password": "attacker-pw-1",
                "email": "root@example.org",
                "groups": ["platform"],
            }
        ]  # fmt: skip
    )

    sso_sign_in(page, live_server, idp, "admin", "attacker-pw-1")

    names = header_user(page).split()
    assert "admin" not in names  # not the local superuser
    newcomer = django_user_model.objects.exclude(pk=local.pk).get()
    assert newcomer.username.startswith("admin-sso-") and newcomer.username in names
    assert not newcomer.is_superuser and not newcomer.is_staff
    assert not newcomer.has_usable_password()
    local.refresh_from_db()
    assert local.is_superuser and local.check_password("local-admin-password-1")
    assert not local.identities.exists()
    # The role comes from the provider's groups, on the provider's own account only.
    assert list(newcomer.groups.values_list("name", flat=True)) == ["admin"]
    # The same identity signs in again: the same account, found by issuer and subject.
    sso_sign_in(page, live_server, idp, "admin", "attacker-pw-1")
    assert django_user_model.objects.count() == 2
    assert newcomer.username in header_user(page).split()


def test_an_unverified_email_claim_links_nothing_and_a_verified_one_links_when_allowed(
    page, live_server, start_provider, django_user_model, settings
):
    bob = django_user_model.objects.create_user("bob", "bob@example.org", "bobs-password-123")
    idp = start_provider(
        [
            {
                "username": "mallory",
                "password": "mallory-pw-1",
                "email": "bob@example.org",
                "email_verified": False,
                "groups": ["data-eng"],
            },
            {
                "username": "robert",
                "password": "robert-pw-1",
                "email": "BOB@example.org",
                "groups": ["data-eng"],
            },
        ]  # fmt: skip
    )
    settings.SHARDYARD_OIDC_LINK_VERIFIED_EMAIL = True

    sso_sign_in(page, live_server, idp, "mallory", "mallory-pw-1")
    assert "mallory" in header_user(page).split()
    mallory = django_user_model.objects.get(username="mallory")
    assert mallory.email == ""  # an unverified address is not stored either
    assert not bob.identities.exists()

    sso_sign_in(page, live_server, idp, "robert", "robert-pw-1")
    assert "bob" in header_user(page).split()
    assert [i.linked_by for i in bob.identities.all()] == ["verified-email"]
    assert not django_user_model.objects.filter(username="robert").exists()


def test_a_verified_email_never_links_a_superuser_and_linking_is_off_by_default(
    page, live_server, start_provider, django_user_model, settings
):
    root = django_user_model.objects.create_superuser("root", "ops@example.org", "root-pw-12345")
    carol = django_user_model.objects.create_user("carol", "carol@example.org", "carol-pw-1234")
    idp = start_provider(
        [
            {"username": "ops", "password": "ops-pw-1", "email": "ops@example.org"},
            {"username": "carol2", "password": "carol2-pw-1", "email": "carol@example.org"},
        ]  # fmt: skip
    )
    settings.SHARDYARD_OIDC_LINK_VERIFIED_EMAIL = True
    sso_sign_in(page, live_server, idp, "ops", "ops-pw-1")
    assert "ops" in header_user(page).split() and not root.identities.exists()

    settings.SHARDYARD_OIDC_LINK_VERIFIED_EMAIL = False
    sso_sign_in(page, live_server, idp, "carol2", "carol2-pw-1")
    assert "carol2" in header_user(page).split() and not carol.identities.exists()


def test_an_admin_links_an_account_to_an_identity_and_its_sign_in_reaches_it(
    page, live_server, start_provider, django_user_model, login
):
    idp = start_provider(
        [{"username": "dora-at-idp", "password": "dora-pw-1", "groups": ["data-eng"]}]
    )
    dora = django_user_model.objects.create_user("dora", "", "doras-local-pw-1")
    issuer = idp.discovery()["issuer"]
    login("root", "root-password-123", superuser=True)
    page.goto(live_server.url + "/users/")

    # A superuser cannot be linked: the page offers no form and the service refuses it.
    root_row = page.locator("tr", has_text="root")
    assert "superusers sign in locally only" in root_row.inner_text()
    page.locator("tr", has_text="dora").locator("summary").click()
    page.get_by_label("subject for dora").fill("1")  # the provider's first user
    page.locator("tr", has_text="dora").get_by_role("button", name="Link").click()
    assert f"dora is linked to 1 of {issuer}" in page.locator(".msg").inner_text()
    assert "(admin)" in page.locator("tr", has_text="dora").inner_text()

    sso_sign_in(page, live_server, idp, "dora-at-idp", "dora-pw-1")
    assert "dora" in header_user(page).split()
    assert list(dora.groups.values_list("name", flat=True)) == ["editor"]
    assert django_user_model.objects.count() == 2
