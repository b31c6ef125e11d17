"""A pytest plugin loaded before Django's settings (``-p tests.support.testing`` in
pyproject's addopts): it marks this process and every process the tests start (workers,
``manage.py``, the command line) as the test suite's, with ``SHARDYARD_TESTING=1``. The
settings then accept the suite's short throwaway SECRET_KEY with DEBUG off; a deployment
never sets it.

Unless the caller chose one, the suite's data root (``SHARDYARD_DATA``) is a fresh
temporary directory, so what a test builds without a root of its own never lands in the
checkout's ``data/`` (where a second run would find it and refuse to build it again)."""

import os
import tempfile

os.environ.setdefault("SHARDYARD_TESTING", "1")
if not os.environ.get("SHARDYARD_DATA"):
    os.environ["SHARDYARD_DATA"] = tempfile.mkdtemp(prefix="shardyard-tests-")
