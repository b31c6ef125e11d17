"""A real S3-compatible server for tests: moto's server (``moto_server``) in its own
process on a free local port, reached over HTTP through ``AWS_ENDPOINT_URL`` with fake
credentials, exactly as a deployment reaches MinIO or S3. Nothing in boto is patched."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """``moto_server`` listening on ``host:port``; ``stop()`` ends it."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None):
        self.host, self.port = host, port or free_port()
        self.endpoint = f"http://{host}:{self.port}"
        server = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen(
            [str(server), "-H", host, "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((host, self.port), 0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError(f"moto_server did not start on {self.endpoint}") from None
                time.sleep(0.1)

    def env(self) -> dict[str, str]:
        """The environment a client (or a spawned worker) needs to reach this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, **FAKE_CREDENTIALS}

    def client(self):
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def new_bucket(self, name: str | None = None) -> str:
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def apply_env(server: MotoServer, monkeypatch) -> None:
    for k, v in server.env().items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        if k in os.environ:
            monkeypatch.delenv(k)
