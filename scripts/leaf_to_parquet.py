#!/usr/bin/env python3
"""Converts LEAF's FEMNIST JSON files into the Parquet layout fedsim reads
(`data: {kind: femnist, path: OUT}`).

    python3 scripts/leaf_to_parquet.py LEAF/data/femnist/data/all_data OUT.parquet

Reads every *.json in the folder (LEAF's {"users", "num_samples", "user_data": {user: {"x",
"y"}}}), and writes one row per image: `writer` (LEAF's user id), `client` (writers numbered in
sorted order), `x` (fixed_size_list<uint8>[784], round(255 · pixel), row-major 28×28) and `y`
(int64, 0-61), one row group per writer (so that fedsim reads only the writers it keeps).
Needs numpy and pyarrow (`pip install numpy pyarrow`).
"""
import json
import pathlib
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def main(src: str, out: str) -> None:
    users = {}
    files = sorted(pathlib.Path(src).glob("*.json"))
    if not files:
        sys.exit(f"{src}: no *.json files (LEAF's data/femnist/data/all_data holds them)")
    for f in files:
        blob = json.loads(f.read_text())
        for user, d in blob["user_data"].items():
            x = np.asarray(d["x"], dtype=np.float64)
            if x.ndim != 2 or x.shape[1] != 784:
                sys.exit(f"{f}: user {user}: x has shape {x.shape}, expected (n, 784)")
            prev = users.get(user)
            y = np.asarray(d["y"], dtype=np.int64)
            users[user] = (x, y) if prev is None else (np.vstack([prev[0], x]), np.concatenate([prev[1], y]))
    writers, clients, xs, ys, counts = [], [], [], [], []
    for c, user in enumerate(sorted(users)):
        x, y = users[user]
        writers += [user] * len(y)
        clients.append(np.full(len(y), c, dtype=np.int64))
        xs.append(np.rint(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8))
        ys.append(y)
        counts.append(len(y))
    pixels = np.concatenate(xs)
    table = pa.table({
        "writer": pa.array(writers, pa.string()),
        "client": pa.array(np.concatenate(clients)),
        "x": pa.FixedSizeListArray.from_arrays(pa.array(pixels.reshape(-1)), 784),
        "y": pa.array(np.concatenate(ys)),
    })
    with pq.ParquetWriter(out, table.schema) as w:
        start = 0
        for n in counts:
            w.write_table(table.slice(start, n))
            start += n
    print(f"{out}: {len(users)} writers, {len(pixels)} images")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
