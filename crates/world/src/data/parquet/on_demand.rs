//! `data: {kind: parquet, on_demand: true}`: a table too large to hold, read one row group at a
//! time. The pass checks every row as the resident loader does, and writes each client's rows
//! (train, val, test, scaled) to an unnamed temporary file in `$TMPDIR`, so that a job reads a
//! client's rows with one positioned read. In memory: 20 bytes per client (its first row in
//! that file and its split sizes). The file's rows must be sorted by client id (numerically
//! for integer ids), so that clients are numbered as the resident loader numbers them and each
//! client's rows are together.
//!
//! This room reads the user's table and serves rows; it must not reorder rows within a client
//! beyond grouping them by split (as the resident loader does).

use super::{DataError, ParquetSpec, MAX_CLASSES};
use crate::data::{FederatedData, Layout, OnDemandRows, SplitSizes, SplitSpec};
use crate::io::{scan_client_table, ClientTable};
use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Reads `spec`'s table as described in the module docs.
pub(super) fn load(spec: &ParquetSpec, split: &SplitSpec) -> Result<FederatedData, DataError> {
    let content = |message: String| DataError::Content {
        path: spec.path.clone(),
        message,
    };
    let mut scan = Scan {
        spec,
        split,
        rows: RowFiles::create().map_err(|e| {
            content(format!(
                "cannot make a temporary file in {} for `on_demand` rows: {e}",
                std::env::temp_dir().display()
            ))
        })?,
        written: 0,
        current: None,
        parts: Default::default(),
        index: Vec::new(),
        dim: None,
        top: None,
    };
    scan_client_table(&spec.path, spec.columns(), &mut |t, first| {
        scan.group(t, first)
    })?;
    scan.finish_client().map_err(content)?;
    let Scan {
        index,
        dim,
        top,
        rows,
        ..
    } = scan;
    let dim = dim.ok_or_else(|| content("the file has no rows".into()))?;
    let top = top.unwrap_or(0) as usize;
    let classes = spec.classes.unwrap_or(top + 1).max(2);
    if top >= classes {
        return Err(content(format!(
            "label {top} does not fit classes = {classes}"
        )));
    }
    if let Some(shape) = spec.shape {
        if shape.iter().product::<usize>() != dim {
            return Err(content(format!(
                "`shape: {shape:?}` holds {} values, but the rows have {dim} features",
                shape.iter().product::<usize>()
            )));
        }
    }
    let (features, labels) = rows.finish().map_err(|e| content(e.to_string()))?;
    let layout = match (spec.shape, spec.vocabulary) {
        (Some(shape), _) => Layout::Image(shape),
        (None, Some(vocab)) => Layout::Tokens { vocab },
        (None, None) => Layout::Flat,
    };
    let rows = ParquetRows {
        path: spec.path.clone(),
        dim,
        features,
        labels,
        index,
    };
    Ok(FederatedData::made_on_demand(layout, dim, classes, rows))
}

/// Where a client's rows are in the temporary files.
#[derive(Clone, Copy, Debug)]
struct ClientIndex {
    /// Its first row.
    start: u64,
    /// Train, val and test rows, in that order from `start`.
    sizes: [u32; 3],
}

/// The pass over the table.
struct Scan<'a> {
    spec: &'a ParquetSpec,
    split: &'a SplitSpec,
    rows: RowFiles,
    /// Rows written so far.
    written: u64,
    /// The client whose rows are being gathered (its id, and whether ids are numbers).
    current: Option<(String, bool)>,
    /// Its rows so far, by split: features and labels.
    parts: [(Vec<f32>, Vec<i64>); 3],
    index: Vec<ClientIndex>,
    dim: Option<usize>,
    /// The largest label.
    top: Option<i64>,
}

impl Scan<'_> {
    /// Takes in one row group whose first row is row `first` of the file.
    fn group(&mut self, t: &ClientTable, first: usize) -> Result<(), String> {
        let spec = self.spec;
        if t.labels.is_empty() {
            return Ok(());
        }
        match self.dim {
            Some(d) if d != t.dim => {
                return Err(format!(
                    "row {first} has {} features, earlier rows {d}",
                    t.dim
                ))
            }
            _ => self.dim = Some(t.dim),
        }
        for r in 0..t.labels.len() {
            let row = first + r;
            let id = &t.client_names[t.client[r] as usize];
            if self.current.as_ref().is_none_or(|(cur, _)| cur != id) {
                if let Some((cur, numeric)) = &self.current {
                    let order = if *numeric {
                        id.parse::<i64>().ok().cmp(&cur.parse::<i64>().ok())
                    } else {
                        id.as_str().cmp(cur.as_str())
                    };
                    if order != Ordering::Greater {
                        return Err(format!(
                            "row {row}: client `{id}` comes after client `{cur}`; with \
                             `on_demand: true` the rows must be sorted by client id \
                             (numerically for integer ids)"
                        ));
                    }
                }
                self.finish_client()?;
                self.current = Some((id.clone(), t.numeric_ids));
            }
            let y = t.labels[r];
            if y < 0 || y as u64 >= MAX_CLASSES as u64 {
                return Err(format!(
                    "row {row} (client `{id}`): label {y} is not a class id; labels are \
                     0 ≤ label < {MAX_CLASSES}"
                ));
            }
            self.top = self.top.max(Some(y));
            let x = t.row(r);
            if let Some(k) = x.iter().position(|v| !v.is_finite()) {
                return Err(format!(
                    "row {row} (client `{id}`, column `{}`) has NaN or infinite features; \
                     fix the data (with `on_demand: true` such rows cannot be left out)",
                    spec.feature_name(k)
                ));
            }
            if let Some(vocab) = spec.vocabulary {
                if x.iter()
                    .any(|&v| v < 0.0 || v.fract() != 0.0 || v >= vocab as f32)
                {
                    return Err(format!(
                        "row {row} (client `{id}`) holds a token id outside 0..{vocab} (or not \
                         a whole number)"
                    ));
                }
            }
            let part = match &t.split {
                None => 0,
                Some(s) => spec.part_of(&s[r], row)?,
            };
            let (features, labels) = &mut self.parts[part];
            match spec.scale {
                Some(scale) => features.extend(x.iter().map(|v| v / scale as f32)),
                None => features.extend_from_slice(x),
            }
            labels.push(y);
        }
        Ok(())
    }

    /// Writes the current client's rows (train, val, test) and records where they are.
    fn finish_client(&mut self) -> Result<(), String> {
        let Some((id, _)) = self.current.take() else {
            return Ok(());
        };
        let parts = std::mem::take(&mut self.parts);
        let sizes = if self.spec.split_column.is_some() {
            parts.each_ref().map(|p| p.1.len() as u32)
        } else {
            // No split column: the `split` fractions cut the rows in file order.
            let s = self.split.sizes(parts[0].1.len());
            [s.train as u32, s.val as u32, s.test as u32]
        };
        if sizes[0] == 0 {
            return Err(format!("client `{id}` has no training rows"));
        }
        for (features, labels) in &parts {
            self.rows
                .append(features, labels)
                .map_err(|e| format!("writing the temporary copy of the rows: {e}"))?;
        }
        self.index.push(ClientIndex {
            start: self.written,
            sizes,
        });
        self.written += sizes.iter().map(|&n| n as u64).sum::<u64>();
        Ok(())
    }
}

/// The two unnamed temporary files being written: features (`f32`) and labels (`i64`), in
/// native byte order.
struct RowFiles {
    features: BufWriter<File>,
    labels: BufWriter<File>,
}

impl RowFiles {
    fn create() -> std::io::Result<RowFiles> {
        Ok(RowFiles {
            features: BufWriter::with_capacity(1 << 20, crate::io::unnamed_file()?),
            labels: BufWriter::with_capacity(1 << 16, crate::io::unnamed_file()?),
        })
    }

    fn append(&mut self, features: &[f32], labels: &[i64]) -> std::io::Result<()> {
        for v in features {
            self.features.write_all(&v.to_ne_bytes())?;
        }
        for y in labels {
            self.labels.write_all(&y.to_ne_bytes())?;
        }
        Ok(())
    }

    fn finish(self) -> std::io::Result<(File, File)> {
        let features = self.features.into_inner().map_err(|e| e.into_error())?;
        let labels = self.labels.into_inner().map_err(|e| e.into_error())?;
        Ok((features, labels))
    }
}

/// A Parquet table's rows, served from the temporary files.
#[derive(Debug)]
struct ParquetRows {
    /// The user's file (for messages).
    path: PathBuf,
    dim: usize,
    features: File,
    labels: File,
    index: Vec<ClientIndex>,
}

impl OnDemandRows for ParquetRows {
    fn num_clients(&self) -> usize {
        self.index.len()
    }

    fn split_sizes(&self, client: usize) -> SplitSizes {
        let [train, val, test] = self.index[client].sizes.map(|n| n as usize);
        SplitSizes { train, val, test }
    }

    fn make_rows(&self, client: usize, features: &mut Vec<f32>, labels: &mut Vec<i64>) {
        let ClientIndex { start, sizes } = self.index[client];
        let n = sizes.iter().map(|&s| s as usize).sum::<usize>();
        let read = |file: &File, offset: u64, bytes: usize| {
            let mut buf = vec![0u8; bytes];
            file.read_exact_at(&mut buf, offset).unwrap_or_else(|e| {
                panic!(
                    "reading client {client}'s rows of {} from the temporary copy: {e}",
                    self.path.display()
                )
            });
            buf
        };
        let x = read(
            &self.features,
            start * (self.dim as u64) * 4,
            n * self.dim * 4,
        );
        features.extend(
            x.chunks_exact(4)
                .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
        );
        let y = read(&self.labels, start * 8, n * 8);
        labels.extend(
            y.chunks_exact(8)
                .map(|b| i64::from_ne_bytes(b.try_into().expect("8 bytes"))),
        );
    }
}
