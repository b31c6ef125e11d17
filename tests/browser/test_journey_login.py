"""Journey: an anonymous visitor is sent to the login page, logs in, sees the overview."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_logs_in_through_the_form_and_lands_on_the_overview(
    page, live_server, login, screenshot
):
    page.goto(live_server.url + "/")
    assert "/accounts/login/" in page.url
    screenshot("01-login")

    login("ada")

    assert page.locator("h1").first.inner_text() == "Overview"
    assert page.locator("header.top").inner_text().count("ada") == 1
    screenshot("02-overview")


def test_it_refuses_a_wrong_password(page, live_server, django_user_model):
    django_user_model.objects.create_user(username="grace", password="cobol-is-fine-1959")
    page.goto(live_server.url + "/accounts/login/")
    page.fill("#id_username", "grace")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    assert "did not match" in page.locator("form").inner_text()
