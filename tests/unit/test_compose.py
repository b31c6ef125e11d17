"""docker-compose.yml holds together: every host reaches the same Postgres, Redis and MinIO
(with its bucket made before any app container starts), the catalog's data root is on that
bucket while what stays local is each container's own, and workers scale with
``docker compose up --scale worker=N``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import yaml

from tests.support.services import unavailable

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def _env(service: str) -> dict[str, str]:
    return {k: str(v) for k, v in (SERVICES[service].get("environment") or {}).items()}


def _default(value: str) -> str:
    """``${NAME:-default}`` as compose resolves it with NAME unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_every_dependency_names_a_service_with_a_health_check_or_a_one_shot_job():
    for name, service in SERVICES.items():
        for dep, cond in (service.get("depends_on") or {}).items():
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep}'s health"
            else:
                assert cond["condition"] == "service_completed_successfully"
                assert SERVICES[dep].get("restart") == "no", dep


def test_workers_scale_because_nothing_pins_one_container():
    worker = SERVICES["worker"]
    for pinned in ("container_name", "ports", "hostname"):
        assert pinned not in worker, f"worker sets {pinned}: --scale would collide"
    assert "celery -A workers worker" in worker["command"]


def test_web_and_workers_reach_the_same_catalog_broker_and_bucket():
    web, worker = _env("web"), _env("worker")
    assert web == worker
    db = urlparse(worker["DATABASE_URL"])
    assert db.hostname == "postgres" and db.port == 5432
    pg = _env("postgres")
    assert (db.username, db.password, db.path[1:]) == (
        pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], pg["POSTGRES_DB"],
    )  # fmt: skip
    assert urlparse(worker["CELERY_BROKER_URL"]).hostname == "redis"

    endpoint = urlparse(worker["AWS_ENDPOINT_URL"])
    assert endpoint.hostname == "minio" and endpoint.port == 9000
    minio = _env("minio")
    assert _default(worker["AWS_ACCESS_KEY_ID"]) == _default(minio["MINIO_ROOT_USER"])
    assert _default(worker["AWS_SECRET_ACCESS_KEY"]) == _default(minio["MINIO_ROOT_PASSWORD"])
    assert SERVICES["minio"]["command"][:2] == ["server", "/data"]
    assert "minio-data:/data" in SERVICES["minio"]["volumes"]


def test_the_bucket_is_made_once_minio_answers_and_before_the_app_starts():
    bucket = SERVICES["minio-bucket"]
    assert bucket["depends_on"] == {"minio": {"condition": "service_healthy"}}
    script = bucket["entrypoint"]
    assert "mc alias set store http://minio:9000 $$MINIO_ROOT_USER $$MINIO_ROOT_PASSWORD" in script
    assert "mc mb --ignore-existing store/shardyard" in script
    assert _env("minio-bucket") == _env("minio")
    for app in ("web", "worker"):
        deps = dict(SERVICES[app]["depends_on"])
        # The worker starts after the web container (migrations), which waits for the bucket.
        if app == "worker":
            deps = SERVICES["web"]["depends_on"]
        assert deps["minio-bucket"] == {"condition": "service_completed_successfully"}


def _mounts(service: str) -> list[str]:
    """Where the service's volumes are mounted in its containers."""
    return [v.split(":")[1] for v in SERVICES[service].get("volumes") or []]


def test_artifacts_go_to_the_bucket_and_what_stays_local_is_each_containers_own():
    bucket = re.search(r"store/([a-z0-9.-]+)", SERVICES["minio-bucket"]["entrypoint"]).group(1)
    for app in ("web", "worker"):
        env = _env(app)
        data = urlparse(env["SHARDYARD_DATA"])
        assert (data.scheme, data.hostname) == ("s3", bucket), env["SHARDYARD_DATA"]
        assert data.path.strip("/"), "the data root is a prefix of the bucket"
        # SHARDYARD_HOME and the cache are on no shared volume: with --scale, each worker
        # container keeps its own; the sources' directory is the one volume they share.
        for local in (env["SHARDYARD_HOME"], env["SHARDYARD_CACHE"]):
            assert local.startswith("/")
            assert not any(
                local == m or local.startswith(m.rstrip("/") + "/") for m in _mounts(app)
            ), (app, local)
        # Local source roots are the shared volume; s3:// ones are on the compose bucket.
        for root in re.split(r":(?!//)", env["SHARDYARD_SOURCE_ROOTS"]):
            if root.startswith("s3://"):
                assert urlparse(root).hostname == bucket, root
            else:
                assert root in _mounts(app), (app, root)


def test_flower_watches_the_same_broker_with_the_workers_task_events():
    flower, worker = SERVICES["flower"], _env("worker")
    assert "--task-events" in SERVICES["worker"]["command"]  # Flower sees tasks only with these
    assert "celery -A workers flower" in flower["command"] and "flower==2.2.0" in flower["command"]
    env = {k: str(v) for k, v in flower["environment"].items()}
    assert env["CELERY_BROKER_URL"] == worker["CELERY_BROKER_URL"]
    assert env["DATABASE_URL"] == worker["DATABASE_URL"]
    assert "--basic-auth=$${FLOWER_BASIC_AUTH}" in flower["command"]
    assert flower["depends_on"]["redis"]["condition"] == "service_healthy"
    # The web app's health check is the liveness probe, which needs no login.
    assert "/healthz" in " ".join(SERVICES["web"]["healthcheck"]["test"])


def _compose_command() -> list[str] | None:
    """Compose's own client: the v2 plugin (``docker compose``) or the v1 ``docker-compose``
    (Debian's package, which .ci/run installs). Either validates without an engine."""
    if shutil.which("docker") and (
        subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_itself_accepts_the_file():
    command = _compose_command()
    if command is None:
        unavailable("docker compose", "neither the compose plugin nor docker-compose is installed")
    env = {**os.environ, "SECRET_KEY": "a-placeholder-long-enough-to-pass-compose-validation"}
    done = subprocess.run(
        [*command, "-f", str(ROOT / "docker-compose.yml"), "config", "--services"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == set(SERVICES)
