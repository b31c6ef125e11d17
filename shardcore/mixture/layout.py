"""Names of a mixture's files and settings, shared by its modules (imports nothing of the
project)."""

from __future__ import annotations

KIND = "mixture"
SCHEDULE_DIR = "schedule"
POOL_FILE = f"{SCHEDULE_DIR}/pool.npy"
RECORD_FILE = f"{SCHEDULE_DIR}/record.npy"
# Per pool, the samples of it before each chunk boundary (int64, chunks + 1 rows x pools):
# row c counts samples [0, c * chunk_samples), the last row the whole schedule.
COUNTS_FILE = f"{SCHEDULE_DIR}/counts.npy"
# The schedule format of manifest["schedule"]["format"]: 2 adds COUNTS_FILE and keyed
# epoch permutations (``shardcore.mixture.permute``); manifests without it are format 1.
SCHEDULE_FORMAT = 2
# Samples per chunk: the unit of the build's memory (about 40 bytes per sample of it) and of
# the counts above (what a resume position or a first read scans at most).
CHUNK_SAMPLES = 1 << 23
# Units writing the record column, each a contiguous range of chunks (one on object storage).
RECORD_UNITS = 4
LENGTH_FAMILY = "length"

# A schedule holds two arrays of one entry per sample (pool: 2 bytes, record: 8 bytes) on
# disk, built in chunks in memory bounded by the chunk whatever its ordering: 2^36 samples
# (640 GiB on disk; nine times the 7.3 billion samples of 15 T tokens at seq_len 2,048) is
# the default cap (``shardcore.config.max_schedule_samples``), and the build checks the
# disk holds it before writing. Budgets beyond the cap are refused before anything is
# allocated.
MAX_SAMPLES_VARIABLE = "SHARDYARD_MAX_SCHEDULE_SAMPLES"
SAMPLE_BYTES = 10

# The stage of the unit-of-work protocol (``shardcore.mixture.stages``) and its unit.
STAGE = "mixture"
SCHEDULE_UNIT = "schedule"
