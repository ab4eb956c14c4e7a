"""One data set and partition for every framework of the peer benchmark.

Reads MNIST as `fedsim data fetch mnist` installs it (the idx files in $FEDSIM_DATA/mnist,
default ./data/mnist) and writes, for each workload, one Parquet table that fedsim reads as
`data: {kind: parquet}` and the other frameworks' scripts read with pyarrow:

  client  int32   the client, 0..clients-1
  split   string  train | test
  y       int64   the label
  x       list<uint8>[784]  the image, row-major 28x28, 0..255 (every framework divides by 255)

The partition is IID: MNIST's 60 000 training and 10 000 test images, each shuffled with
numpy's PCG64 seeded 0, dealt in equal consecutive blocks (1 000 clients: 60 training and 10
test images each; 100 clients: 600 and 100).

  python benches/peers/prepare.py OUT_DIR
"""

import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

WORKLOADS = {"mlp": 1000, "cnn": 100}


def idx(path):
    with open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def table(images, labels, test_images, test_labels, clients):
    rng = np.random.Generator(np.random.PCG64(0))
    parts = []
    for split, x, y in (("train", images, labels), ("test", test_images, test_labels)):
        order = rng.permutation(len(y))
        per = len(y) // clients
        for c in range(clients):
            rows = order[c * per : (c + 1) * per]
            parts.append((c, split, x[rows], y[rows]))
    client = np.concatenate([np.full(len(p[3]), p[0], dtype=np.int32) for p in parts])
    split = sum(([p[1]] * len(p[3]) for p in parts), [])
    x = np.concatenate([p[2].reshape(len(p[3]), 784) for p in parts])
    y = np.concatenate([p[3].astype(np.int64) for p in parts])
    flat = pa.array(x.reshape(-1), type=pa.uint8())
    return pa.table(
        {
            "client": client,
            "split": split,
            "y": y,
            "x": pa.FixedSizeListArray.from_arrays(flat, 784),
        }
    )


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    root = os.path.join(os.environ.get("FEDSIM_DATA", "data"), "mnist")
    images = idx(os.path.join(root, "train-images-idx3-ubyte"))
    labels = idx(os.path.join(root, "train-labels-idx1-ubyte"))
    test_images = idx(os.path.join(root, "t10k-images-idx3-ubyte"))
    test_labels = idx(os.path.join(root, "t10k-labels-idx1-ubyte"))
    for name, clients in WORKLOADS.items():
        path = os.path.join(out, f"mnist_{clients}.parquet")
        if not os.path.exists(path):
            t = table(images, labels, test_images, test_labels, clients)
            pq.write_table(t, path + ".tmp")
            os.replace(path + ".tmp", path)
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
