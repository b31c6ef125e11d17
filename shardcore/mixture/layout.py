"""Names of a mixture's files and settings, shared by its modules (imports nothing of the
project)."""

from __future__ import annotations

KIND = "mixture"
SCHEDULE_DIR = "schedule"
POOL_FILE = f"{SCHEDULE_DIR}/pool.npy"
RECORD_FILE = f"{SCHEDULE_DIR}/record.npy"
LENGTH_FAMILY = "length"

# A schedule holds two arrays of one entry per sample (pool: 1-2 bytes, record: 8 bytes)
# in memory while it is built: 2^30 samples is about 10 GiB. Budgets beyond it are refused
# before anything is allocated; raise it on bigger machines.
MAX_SAMPLES_VARIABLE = "SHARDYARD_MAX_SCHEDULE_SAMPLES"
DEFAULT_MAX_SAMPLES = 1 << 30

# The stage of the unit-of-work protocol (``shardcore.mixture.stages``) and its unit.
STAGE = "mixture"
SCHEDULE_UNIT = "schedule"
