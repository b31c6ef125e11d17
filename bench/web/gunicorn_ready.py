"""A gunicorn config for benchmarks: each worker, once it has loaded the application,
writes a file named by its pid in ``$BENCH_READY_DIR``. gunicorn accepts connections as
soon as its master binds the socket, before a worker has imported anything; a benchmark
that waits for these files measures requests, not a worker's boot."""

import os
from pathlib import Path


def post_worker_init(worker) -> None:
    Path(os.environ["BENCH_READY_DIR"], str(worker.pid)).touch()
