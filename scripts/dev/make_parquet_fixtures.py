"""Writes tests/data/parquet/feature_types.parquet with pyarrow: the same features stored in
every layout the Parquet loader accepts, so the integration tests read files that pyarrow (and
so pandas, Hugging Face datasets and most converters) really writes.

    python3 -m pip install pyarrow numpy && python3 scripts/dev/make_parquet_fixtures.py

Table: 3 clients (ids 4, 1, 9), 8 rows each, 3 features with small integer values (exact in
every element type), labels 0/1 following the first feature. Feature columns, all the same
numbers:
  fsl_f32   fixed_size_list<float>[3]   (what pyarrow writes for a 2-D float32 numpy array)
  fsl_f64   fixed_size_list<double>[3]
  fsl_u8    fixed_size_list<uint8>[3]   (images stored as bytes)
  fsl_i64   fixed_size_list<int64>[3]
  list_f64  list<double>
  list_i32  list<int32>
  large_f32 large_list<float>
"""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

rows = []
for cid in (4, 1, 9):
    for i in range(8):
        rows.append((cid, [(i * 3 + cid) % 11, (i + 2 * cid) % 7, i % 5]))
client = np.array([c for c, _ in rows], dtype=np.int64)
x = np.array([f for _, f in rows], dtype=np.float32)
label = (x[:, 0] > 5).astype(np.int64)


def fixed(values, typ):
    flat = pa.array(values.reshape(-1), type=typ)
    return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])


table = pa.table(
    {
        "client": client,
        "label": label,
        "fsl_f32": fixed(x, pa.float32()),
        "fsl_f64": fixed(x.astype(np.float64), pa.float64()),
        "fsl_u8": fixed(x.astype(np.uint8), pa.uint8()),
        "fsl_i64": fixed(x.astype(np.int64), pa.int64()),
        "list_f64": pa.array([list(map(float, r)) for r in x], type=pa.list_(pa.float64())),
        "list_i32": pa.array([list(map(int, r)) for r in x], type=pa.list_(pa.int32())),
        "large_f32": pa.array([list(map(float, r)) for r in x], type=pa.large_list(pa.float32())),
    }
)
out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "parquet")
os.makedirs(out, exist_ok=True)
pq.write_table(table, os.path.join(out, "feature_types.parquet"))
print(table.schema)
