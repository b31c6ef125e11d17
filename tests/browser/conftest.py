"""Browser fixtures: Playwright driving Debian's Chromium (/usr/bin/chromium), never a
downloaded browser, against pytest-django's live server backed by the test database."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import services

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"

# Playwright's sync API runs an event loop in this thread; Django's ORM refuses to run
# inside one unless told that this thread is only ever synchronous, which it is.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def chromium():
    if not os.path.exists(CHROMIUM):
        services.unavailable("Chromium", f"{CHROMIUM} is missing (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


@pytest.fixture
def screenshot(page):
    """``screenshot("journey-name")`` saves the current page for the README."""

    def take(name: str) -> Path:
        SCREENSHOTS.mkdir(exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture
def login(page, live_server, django_user_model):
    """Create a user with ``role`` and log in through the real login form."""

    def do(
        username: str = "ada", password: str = "analytical-engine-1843", *, superuser: bool = False
    ):
        if superuser:
            django_user_model.objects.create_superuser(username=username, password=password)
        else:
            django_user_model.objects.create_user(username=username, password=password)
        page.goto(live_server.url + "/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_url(live_server.url + "/")
        return page

    return do
