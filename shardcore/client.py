"""A small client a training loop calls to talk to a Shardyard server: register the run
against a mixture version, report progress (consumed samples or tokens at a step), and ask
for the resume position after a restart.

Standard library only (urllib), so that it installs into any trainer's environment.
Connection errors, timeouts, 429 and 5xx answers are retried with capped exponential
backoff and jitter; other 4xx answers raise ``ShardyardHTTPError`` at once, because
repeating a bad request cannot fix it. Progress reports are idempotent on the server
(one report per run and step), so a retry after a lost answer records nothing twice.

    client = ShardyardClient("http://shardyard:8000", token=os.environ["SHARDYARD_TOKEN"])
    run = client.register_run(mixture_version=12, name="olmo-1b-a")
    ...
    client.report_progress(run["id"], step=step, consumed_samples=samples_seen)
    position = client.resume_position(run["id"])
    client.report_losses(run["id"], step=step, val={pool_id: 2.31}, train=[(step, 2.4)])
    client.switch(run["id"], weights={pool_id: 0.7, other_id: 0.3})  # an editor's token
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class ShardyardError(Exception):
    """The server could not be reached or refused the request."""


class ShardyardHTTPError(ShardyardError):
    """The server answered with an error status; ``status`` and ``body`` say which."""

    def __init__(self, method: str, url: str, status: int, body: Any):
        self.status = status
        self.body = body
        super().__init__(f"{method} {url} answered {status}: {body}")


class ShardyardSwitched(ShardyardHTTPError):
    """A progress report read a version the run had switched away from before that
    position (409): resume from the checkpoint at the switch and read the run's segments."""


class ShardyardUnavailable(ShardyardError):
    """Every attempt failed with a connection error or a retryable status."""


class ShardyardClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url {base_url!r} must start with http:// or https://")
        if retries < 0:
            raise ValueError(f"retries={retries} must be >= 0")
        self.base_url = base_url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._sleep = sleep

    # --- the three calls a trainer makes ----------------------------------------------
    def register_run(self, *, mixture_version: int, name: str, **extra: Any) -> dict:
        """Register a training run; returns the run with its ``id``."""
        return self.request(
            "POST", "api/runs/", {"mixture_version": mixture_version, "name": name, **extra}
        )

    def report_progress(
        self,
        run_id: int,
        *,
        step: int,
        consumed_samples: int | None = None,
        consumed_tokens: int | None = None,
        mixture_version: int | None = None,
    ) -> dict:
        """Record that the run consumed this many samples (or tokens) by ``step``. With
        ``mixture_version`` (the version read up to here), a run that switched version
        before this position answers ``ShardyardSwitched`` (HTTP 409): resume from the
        checkpoint at the switch and read ``segments``. The answer's ``mixture_version`` is
        the version the run reads next: another one means it switched at this position."""
        if consumed_samples is None and consumed_tokens is None:
            raise ValueError("give consumed_samples or consumed_tokens")
        body: dict[str, Any] = {"step": step}
        if consumed_samples is not None:
            body["consumed_samples"] = consumed_samples
        if consumed_tokens is not None:
            body["consumed_tokens"] = consumed_tokens
        if mixture_version is not None:
            body["mixture_version"] = int(mixture_version)
        return self.request("POST", f"api/runs/{int(run_id)}/progress/", body)

    def run(self, run_id: int) -> dict:
        """The run, with ``segments``: the versions it read in order, each with its
        ``path`` and the run's ``first_sample`` where it starts (what
        ``shardcore.loader.ShardyardIterableDataset`` reads)."""
        return self.request("GET", f"api/runs/{int(run_id)}/")

    def segments(self, run_id: int) -> list[dict]:
        """The run's segments (see ``run``)."""
        return self.run(run_id)["segments"]

    def switch(
        self,
        run_id: int,
        *,
        weights: Mapping[int, float] | Iterable[Mapping[str, Any]],
        note: str = "",
        add: Iterable[int] = (),
        wait: float = 3600.0,
    ) -> dict:
        """Save ``weights`` (``{pool_id: weight}``; e.g. a proposal's ``proposed``) as a
        new version of the run's mixture that continues from the run's resume position,
        and switch the run to it there (an editor's token). A pool the run's stage does
        not hold is refused unless ``add`` lists it. The server builds the version
        by a job: this waits until it is built (at most ``wait`` seconds), so the new
        segment can be read at once. Returns the run with its ``segments``, the new
        ``version`` and where it ``continues``."""
        if isinstance(weights, Mapping):
            weights = [{"pool": int(p), "weight": float(w)} for p, w in weights.items()]
        body = {"weights": [dict(w) for w in weights], "note": note, "add": [int(p) for p in add]}
        answer = self.request("POST", f"api/runs/{int(run_id)}/switch/", body)
        self.wait_version(int(answer["version"]), timeout=wait)
        return answer

    def wait_version(self, version_id: int, *, timeout: float = 3600.0) -> dict:
        """The mixture version once its build job has recorded it (``status`` "ready"),
        polling ``GET /api/mixture-versions/{id}/``; a failed build raises
        ``ShardyardError`` with the job's error, and so does a build still running after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        delay = 0.5
        while True:
            version = self.request("GET", f"api/mixture-versions/{int(version_id)}/")
            if version["status"] == "ready":
                return version
            if version["status"] != "building":
                job = self.request("GET", f"api/jobs/{int(version['job'])}/")
                raise ShardyardError(
                    f"mixture version {version_id} {version['status']}: {job.get('error') or '?'}"
                )
            if time.monotonic() > deadline:
                raise ShardyardError(
                    f"mixture version {version_id} still building after {timeout:g}s"
                )
            self._sleep(delay)
            delay = min(delay * 2, 5.0)

    def proposal(
        self, run_id: int, *, reference: int, eta: float = 1.0, smoothing: float = 1e-3
    ) -> dict:
        """The next stage's weights for the run's pools against a reference run's losses
        (``GET /api/runs/{id}/proposal/``)."""
        query = urllib.parse.urlencode(
            {"reference": int(reference), "eta": eta, "smoothing": smoothing}
        )
        return self.request("GET", f"api/runs/{int(run_id)}/proposal/?{query}")

    def resume_position(self, run_id: int) -> dict:
        """Where the run's last report leaves the data: stage, pool, shard, record, offset."""
        return self.request("GET", f"api/runs/{int(run_id)}/resume/")

    def report_losses(
        self,
        run_id: int,
        *,
        step: int | None = None,
        val: Mapping[int, float] | Iterable[Mapping[str, Any]] | None = None,
        train: Mapping[int, float] | Iterable[tuple[int, float]] | None = None,
    ) -> dict:
        """Record losses: ``val`` at checkpoint ``step``, validation loss per pool
        (``{pool_id: loss}``, or ``[{"pool": id, "source": name, "loss": x}]`` for one
        source of a pool built from several); ``train``, training loss per step
        (``{step: loss}`` or ``[(step, loss)]``). Retried reports record nothing twice."""
        body: dict[str, Any] = {}
        if step is not None:
            body["step"] = int(step)
        if val:
            if isinstance(val, Mapping):
                val = [{"pool": int(p), "loss": float(x)} for p, x in val.items()]
            body["val"] = [dict(v) for v in val]
        if train:
            pairs = train.items() if isinstance(train, Mapping) else train
            body["train"] = [{"step": int(s), "loss": float(x)} for s, x in pairs]
        if "val" not in body and "train" not in body:
            raise ValueError("give val (with step) or train")
        return self.request("POST", f"api/runs/{int(run_id)}/losses/", body)

    # --- transport -------------------------------------------------------------------
    def request(self, method: str, path: str, body: dict | None = None) -> Any:
        url = urllib.parse.urljoin(self.base_url, path.lstrip("/"))
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "Authorization": f"Token {self.token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        last: str = ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            retry_after: float | None = None
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as e:
                payload = _decode(e.read())
                if e.code == 409 and path.rstrip("/").endswith("progress"):
                    raise ShardyardSwitched(method, url, e.code, payload) from None
                if e.code not in RETRY_STATUSES:
                    raise ShardyardHTTPError(method, url, e.code, payload) from None
                last = f"status {e.code}: {payload}"
                retry_after = _seconds(e.headers.get("Retry-After"))
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            if attempt < self.retries:
                self._sleep(self._delay(attempt, retry_after))
        raise ShardyardUnavailable(f"{method} {url} failed {self.retries + 1} times; last: {last}")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        # Full jitter: trainers restarted together do not retry in lockstep.
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:500]


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None
