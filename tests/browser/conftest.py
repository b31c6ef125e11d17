"""Browser fixtures: Playwright driving Debian's Chromium (/usr/bin/chromium), never a
downloaded browser, against pytest-django's live server backed by the test database."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
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
def screenshot(page, tmp_path):
    """``screenshot("journey-name")`` takes the current page: into tests/browser/screenshots
    (the README's pictures) when SHARDYARD_SCREENSHOTS=1, else into the test's temporary
    directory, so that an ordinary run leaves the checkout as it was."""

    def take(name: str) -> Path:
        folder = SCREENSHOTS if os.environ.get("SHARDYARD_SCREENSHOTS") == "1" else tmp_path
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.png"
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


@dataclass
class Stack:
    """The live server's source root and data root, shared with a real Celery worker."""

    root: Path
    data: Path
    start_worker: Callable[[], object]

    def corpus(self, max_bytes_per_source: int = 120_000) -> dict[str, Path]:
        """The demo corpus (CPython's standard library as four sources) under the root."""
        from shardcore.demo import build_demo_corpus

        return build_demo_corpus(self.root / "demo", max_bytes_per_source=max_bytes_per_source)

    def wait_job(self, job_id: int, timeout: float = 180):
        from tests.support.services import wait_for
        from webapp.jobs.models import Job

        job = wait_for(
            lambda: (j := Job.objects.get(pk=job_id)).is_active is False and j,
            timeout=timeout,
            interval=0.3,
            what=f"job {job_id} to finish",
        )
        assert job.state == "succeeded", job.log_tail
        return job

    def tokenized(self, name: str, directory: Path, properties=("kind", "lang", "package")):
        """A registered source tokenized by the worker (setup for the later journeys)."""
        from webapp.catalog.services.sources import source_register
        from webapp.catalog.services.tokenized import tokenized_source_build

        source = source_register(name=name, uri=str(directory), metadata_fields=list(properties))
        ts = tokenized_source_build(source_id=source.pk)
        self.wait_job(ts.job_id)
        ts.refresh_from_db()
        return ts

    def pool(self, name: str, tokenized, seq_len: int = 256):
        from webapp.catalog.services.pools import pool_build

        pool = pool_build(name=name, tokenized_ids=[tokenized.pk], seq_len=seq_len)
        self.wait_job(pool.job_id)
        pool.refresh_from_db()
        return pool


@pytest.fixture
def code_pools(transactional_db, tmp_path) -> dict:
    """The pools of ``tests.unit.mix_fixtures`` (CPython stdlib code, 64-token records) as
    READY catalog pools ``code-early``, ``code-middle`` and ``code-late``, by short name."""
    from shardcore.pool import PoolReader
    from tests.unit import mix_fixtures
    from webapp.catalog.models import ArtifactStatus, Pool

    pools = {}
    for name, path in mix_fixtures.build_pools(tmp_path, seq_len=64).items():
        m = PoolReader(path).manifest
        pools[name] = Pool.objects.create(
            name=f"code-{name}", seq_len=64, path=str(path), status=ArtifactStatus.READY,
            num_records=m["num_records"], num_tokens=m["num_tokens"],
        )  # fmt: skip
    return pools


@pytest.fixture
def stack(transactional_db, redis_url, celery_workers, settings, monkeypatch, tmp_path):
    """Source and data roots for the live server (this process) and for the worker
    subprocess, which ``stack.start_worker()`` starts (once per test)."""
    root, data = services.catalog_roots(tmp_path, settings, monkeypatch)
    return Stack(root=root, data=data, start_worker=lambda: celery_workers("browser"))
