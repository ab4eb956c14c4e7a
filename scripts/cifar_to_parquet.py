#!/usr/bin/env python3
"""Converts the CIFAR-10 or CIFAR-100 Python archive you already have into the Parquet layout
fedsim reads. CIFAR is in no package registry, so fedsim cannot fetch it; its archives are
`cifar-10-python.tar.gz` and `cifar-100-python.tar.gz` from the CIFAR authors' page.

    python3 scripts/cifar_to_parquet.py cifar-10-python.tar.gz cifar10.parquet

Writes one row per image, the training batches first then the test batch, in archive order:
`x` (fixed_size_list<uint8>[3072], the archive's bytes: channels first, each channel row-major
32×32), `y` (int64; CIFAR-100: the fine label, 0–99), `coarse` (CIFAR-100 only: the coarse
label, 0–19) and `original_split` ("train" or "test", the archive's split; fedsim pools the
images and cuts each client's rows by the scenario's split). Read it with

    data: {kind: parquet, path: cifar10.parquet, features_column: x, label_column: y,
           shape: [3, 32, 32], scale: 255, partition: {kind: dirichlet, clients: 80, alpha: 0.4}}

(`scenarios/paper/fedgmm_cifar10_fedgmm.yaml` and `fedgmm_cifar100_fedgmm.yaml`). Needs numpy
(the archive's batches are pickled numpy arrays) and pyarrow: `pip install numpy pyarrow`.
"""
import pickle
import sys
import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# Member names (after the archive's top folder) in the order written, per archive kind.
LAYOUTS = {
    "cifar-10-batches-py": (
        [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"],
        b"labels",
        10,
    ),
    "cifar-100-python": (["train", "test"], b"fine_labels", 100),
}


def read(archive: str):
    """The archive's images, labels (and coarse labels for CIFAR-100) and original splits."""
    with tarfile.open(archive, "r:*") as tar:
        names = {m.name: m for m in tar.getmembers() if m.isfile()}
        tops = {n.split("/", 1)[0] for n in names}
        kinds = [k for k in LAYOUTS if k in tops]
        if len(kinds) != 1:
            sys.exit(
                f"{archive}: expected the folder cifar-10-batches-py/ or cifar-100-python/ "
                f"inside, found {sorted(tops)}"
            )
        kind = kinds[0]
        members, label_key, classes = LAYOUTS[kind]
        xs, ys, coarse, splits = [], [], [], []
        for member in members:
            path = f"{kind}/{member}"
            if path not in names:
                sys.exit(f"{archive}: {path} is missing")
            batch = pickle.load(tar.extractfile(names[path]), encoding="bytes")
            x = np.asarray(batch[b"data"], dtype=np.uint8)
            y = np.asarray(batch[label_key], dtype=np.int64)
            if x.ndim != 2 or x.shape[1] != 3072 or len(y) != len(x):
                sys.exit(
                    f"{archive}: {path}: data of shape {x.shape} with {len(y)} labels; "
                    "expected (n, 3072) and n labels"
                )
            if y.min(initial=0) < 0 or y.max(initial=0) >= classes:
                sys.exit(f"{archive}: {path}: labels outside 0–{classes - 1}")
            xs.append(x)
            ys.append(y)
            if kind == "cifar-100-python":
                coarse.append(np.asarray(batch[b"coarse_labels"], dtype=np.int64))
            split = "test" if "test" in member else "train"
            splits += [split] * len(y)
    return kind, np.concatenate(xs), np.concatenate(ys), coarse and np.concatenate(coarse), splits


def main(archive: str, out: str) -> None:
    kind, x, y, coarse, splits = read(archive)
    flat = pa.array(x.reshape(-1), type=pa.uint8())
    columns = {
        "x": pa.FixedSizeListArray.from_arrays(flat, 3072),
        "y": pa.array(y, type=pa.int64()),
    }
    if len(coarse):
        columns["coarse"] = pa.array(coarse, type=pa.int64())
    columns["original_split"] = pa.array(splits, type=pa.string())
    pq.write_table(pa.table(columns), out)
    print(f"{out}: {len(y)} images of {kind} ({splits.count('train')} train, "
          f"{splits.count('test')} test)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
