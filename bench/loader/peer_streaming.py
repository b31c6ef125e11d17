"""mosaicml-streaming's side of bench/loader/stream.py, run with the peer's own virtual
environment (bench/.venv-streaming): writes records as MDS shards to S3, or reads them back
through StreamingDataset's S3 path and local cache; for bench/loader/loaders.py, writes
them to a local directory only and reads them from there, alone or through its
StreamingDataLoader with workers. Prints one JSON line. Not a test.

    python peer_streaming.py write RECORDS.npy LOCAL_DIR s3://bucket/prefix SIZE_LIMIT
    python peer_streaming.py read s3://bucket/prefix CACHE_DIR CACHE_LIMIT
    python peer_streaming.py write RECORDS.npy LOCAL_DIR - SIZE_LIMIT   # local only
    python peer_streaming.py read-local DIR SEQ_LEN WORKERS BATCH PASSES  # -1: no DataLoader
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import types


def _streaming_base():
    # The package's __init__ also imports its vision and multimodal datasets, which need a
    # torchvision built for the installed torch (PyPI has none for CPU torch); the reader
    # and writer live in streaming.base, imported here without them.
    spec = importlib.util.find_spec("streaming")
    pkg = types.ModuleType("streaming")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["streaming"] = pkg
    import streaming.base as base

    return base


def write(records: str, local: str, remote: str, size_limit: str) -> dict:
    import numpy as np

    base = _streaming_base()
    rows = np.load(records, mmap_mode="r")
    t = time.perf_counter()
    columns = {"tokens": f"ndarray:int32:{rows.shape[1]}"}
    out = local if remote == "-" else (local, remote)
    with base.MDSWriter(out=out, columns=columns, size_limit=int(size_limit)) as w:
        for row in rows:
            w.write({"tokens": np.ascontiguousarray(row, dtype=np.int32)})
    return {"samples": int(rows.shape[0]), "seconds": time.perf_counter() - t}


def read(remote: str, cache: str, cache_limit: str) -> dict:
    import numpy as np

    base = _streaming_base()
    t = time.perf_counter()
    dataset = base.StreamingDataset(
        remote=remote, local=cache, shuffle=False, batch_size=1, cache_limit=cache_limit
    )
    return read_all((np.asarray(sample["tokens"], dtype=np.int64) for sample in dataset), t)


def read_local(directory: str, seq_len: str, workers: str, batch: str, passes: str) -> dict:
    import sys
    from pathlib import Path

    import torch  # noqa: F401  (imported before the clock, as in every contender)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from consume import consume, passes_over

    base = _streaming_base()
    t = time.perf_counter()
    dataset = base.StreamingDataset(local=directory, shuffle=False, batch_size=int(batch))
    if int(workers) < 0:
        rows = (sample["tokens"] for sample in passes_over(dataset, int(passes)))
        return consume(rows, t, int(seq_len))
    loader = base.StreamingDataLoader(dataset, batch_size=int(batch), num_workers=int(workers))
    return consume((b["tokens"] for b in passes_over(loader, int(passes))), t, int(seq_len))


def read_all(rows, t: float) -> dict:
    """Reads ``rows`` (token arrays, in order) to the end: seconds since ``t``, samples,
    tokens and the xxh3-128 of every row's bytes in order, the answer both sides give.
    Needs numpy and xxhash only, so that either environment can run it."""
    import xxhash

    digest = xxhash.xxh3_128()
    samples = tokens = 0
    for row in rows:
        digest.update(row.tobytes())
        samples += 1
        tokens += row.size
    return {
        "seconds": time.perf_counter() - t,
        "samples": samples,
        "tokens": tokens,
        "digest": digest.hexdigest(),
    }


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    commands = {"write": write, "read": read, "read-local": read_local}
    print(json.dumps(commands[command](*args)))
