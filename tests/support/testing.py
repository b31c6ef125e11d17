"""A pytest plugin loaded before Django's settings (``-p tests.support.testing`` in
pyproject's addopts): it marks this process and every process the tests start (workers,
``manage.py``, the command line) as the test suite's, with ``SHARDYARD_TESTING=1``. The
settings then accept the suite's short throwaway SECRET_KEY with DEBUG off; a deployment
never sets it."""

import os

os.environ.setdefault("SHARDYARD_TESTING", "1")
