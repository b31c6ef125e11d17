"""litdata's side of bench/loader/loaders.py, run with its own virtual environment
(bench/.venv-litdata): writes records as litdata chunks, or reads them back with its
StreamingDataset, alone or through its StreamingDataLoader with workers. Prints one JSON
line. Not a test.

    python peer_litdata.py write RECORDS.npy OUT_DIR CHUNK_BYTES
    python peer_litdata.py read DIR SEQ_LEN WORKERS BATCH PASSES  # WORKERS -1: no DataLoader
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def write(records: str, out: str, chunk_bytes: str) -> dict:
    import numpy as np
    from litdata.streaming.writer import BinaryWriter

    rows = np.load(records, mmap_mode="r")
    t = time.perf_counter()
    writer = BinaryWriter(out, chunk_bytes=int(chunk_bytes))
    for i, row in enumerate(rows):
        writer[i] = np.ascontiguousarray(row)
    writer.done()
    writer.merge()
    return {"samples": int(rows.shape[0]), "seconds": time.perf_counter() - t}


def read(directory: str, seq_len: str, workers: str, batch: str, passes: str) -> dict:
    import torch  # noqa: F401  (imported before the clock, as in every contender)
    from consume import consume, passes_over
    from litdata import StreamingDataLoader, StreamingDataset

    t = time.perf_counter()
    dataset = StreamingDataset(input_dir=directory, shuffle=False)
    if int(workers) < 0:
        return consume(passes_over(dataset, int(passes)), t, int(seq_len))
    loader = StreamingDataLoader(dataset, batch_size=int(batch), num_workers=int(workers))
    return consume(passes_over(loader, int(passes)), t, int(seq_len))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    print(json.dumps({"write": write, "read": read}[command](*args)))
