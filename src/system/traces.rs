//! Readers of the files a system model can take its per-client values from.
//!
//! - Our CSV files (a header row, comma-separated, `#` comments): a per-client value column
//!   (`client,<column>`), and online intervals (`client,start_s,end_s`).
//! - FedScale's two trace files, Python pickles of a dict keyed by client id (FedScale,
//!   `benchmark/dataset/data/device_info/`):
//!   `client_device_capacity`: `{id: {'computation': ms per sample (inference), 'communication':
//!   kbit/s}}`; `client_behave_trace`: `{id: {'active': [s], 'inactive': [s], 'finish_time': s,
//!   ...}}` (other keys ignored). Client `c` of a run takes the entry at position `c mod len` of
//!   the ids in ascending order (FedScale has far more ids than a run has clients).

use super::SystemError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

fn content(path: &Path, message: impl Into<String>) -> SystemError {
    SystemError::File {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// A CSV file's header and numeric rows, with the 1-based line of each row.
struct Csv {
    header: Vec<String>,
    rows: Vec<(usize, Vec<f64>)>,
}

impl Csv {
    fn read(path: &Path) -> Result<Csv, SystemError> {
        let text = std::fs::read_to_string(path).map_err(|e| content(path, e.to_string()))?;
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let (_, head) = lines
            .next()
            .ok_or_else(|| content(path, "the file is empty (it needs a header row)"))?;
        let header: Vec<String> = head.split(',').map(|h| h.trim().to_string()).collect();
        let mut rows = Vec::new();
        for (line, l) in lines {
            let cells: Vec<&str> = l.split(',').map(str::trim).collect();
            if cells.len() != header.len() {
                return Err(content(
                    path,
                    format!(
                        "line {line}: {} cells, the header has {}",
                        cells.len(),
                        header.len()
                    ),
                ));
            }
            let values = cells
                .iter()
                .zip(&header)
                .map(|(c, h)| {
                    c.parse::<f64>().map_err(|_| {
                        content(
                            path,
                            format!("line {line}: column `{h}`: `{c}` is not a number"),
                        )
                    })
                })
                .collect::<Result<Vec<f64>, _>>()?;
            rows.push((line, values));
        }
        Ok(Csv { header, rows })
    }

    fn column(&self, path: &Path, name: &str) -> Result<usize, SystemError> {
        self.header.iter().position(|h| h == name).ok_or_else(|| {
            content(
                path,
                format!(
                    "no column `{name}` (the header has: {})",
                    self.header.join(", ")
                ),
            )
        })
    }

    /// The client id of a row, checked against the number of clients.
    fn client(
        &self,
        path: &Path,
        line: usize,
        v: f64,
        clients: usize,
    ) -> Result<usize, SystemError> {
        if v.fract() != 0.0 || v < 0.0 || v >= clients as f64 {
            return Err(content(
                path,
                format!("line {line}: client `{v}` is not an id in 0..{clients}"),
            ));
        }
        Ok(v as usize)
    }
}

/// One value per client from `client,<column>` rows; every client must have exactly one row.
pub fn per_client_column(
    path: &Path,
    column: &str,
    clients: usize,
) -> Result<Vec<f64>, SystemError> {
    let csv = Csv::read(path)?;
    let (ci, vi) = (csv.column(path, "client")?, csv.column(path, column)?);
    let mut out = vec![None; clients];
    for (line, row) in &csv.rows {
        let c = csv.client(path, *line, row[ci], clients)?;
        if out[c].replace(row[vi]).is_some() {
            return Err(content(
                path,
                format!("line {line}: client {c} appears twice"),
            ));
        }
    }
    out.iter()
        .enumerate()
        .map(|(c, v)| v.ok_or_else(|| content(path, format!("no row for client {c}"))))
        .collect()
}

/// Online intervals `[start_s, end_s)` per client from `client,start_s,end_s` rows (a client
/// without rows is never online).
pub fn online_intervals(path: &Path, clients: usize) -> Result<Vec<Vec<(f64, f64)>>, SystemError> {
    let csv = Csv::read(path)?;
    let cols = [
        csv.column(path, "client")?,
        csv.column(path, "start_s")?,
        csv.column(path, "end_s")?,
    ];
    let mut out = vec![Vec::new(); clients];
    for (line, row) in &csv.rows {
        let c = csv.client(path, *line, row[cols[0]], clients)?;
        let (start, end) = (row[cols[1]], row[cols[2]]);
        if !(start >= 0.0 && end > start && end.is_finite()) {
            return Err(content(
                path,
                format!("line {line}: need 0 ≤ start_s < end_s, got {start}, {end}"),
            ));
        }
        out[c].push((start, end));
    }
    Ok(out)
}

/// One FedScale device: inference latency and bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
pub struct FedScaleDevice {
    /// Milliseconds per sample for inference (FedScale multiplies by 3 for training).
    pub computation: f64,
    /// Bandwidth in kbit/s, both directions.
    pub communication: f64,
}

/// One FedScale availability trace: online during `[active[i], inactive[i]]`, repeating every
/// `finish_time` seconds.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct FedScaleBehavior {
    pub active: Vec<f64>,
    pub inactive: Vec<f64>,
    pub finish_time: f64,
}

fn read_pickle<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<BTreeMap<i64, T>, SystemError> {
    let file = std::fs::File::open(path).map_err(|e| content(path, e.to_string()))?;
    serde_pickle::from_reader(
        std::io::BufReader::new(file),
        serde_pickle::DeOptions::new(),
    )
    .map_err(|e| content(path, format!("not a FedScale trace pickle: {e}")))
}

fn assign<T: Clone>(
    path: &Path,
    map: BTreeMap<i64, T>,
    clients: usize,
) -> Result<Vec<T>, SystemError> {
    if map.is_empty() {
        return Err(content(path, "the trace has no clients"));
    }
    let entries: Vec<T> = map.into_values().collect();
    Ok((0..clients)
        .map(|c| entries[c % entries.len()].clone())
        .collect())
}

/// FedScale's `client_device_capacity`, one entry per client.
pub fn fedscale_devices(path: &Path, clients: usize) -> Result<Vec<FedScaleDevice>, SystemError> {
    let devices = assign(path, read_pickle::<FedScaleDevice>(path)?, clients)?;
    for d in &devices {
        if !(d.computation > 0.0 && d.communication > 0.0) {
            return Err(content(
                path,
                format!("computation and communication must be positive, got {d:?}"),
            ));
        }
    }
    Ok(devices)
}

/// FedScale's `client_behave_trace`: its entries in ascending id order (client `c` of a run
/// takes entry `c mod len`; the entries are not copied per client).
pub fn fedscale_behavior(path: &Path) -> Result<Vec<FedScaleBehavior>, SystemError> {
    let map = read_pickle::<FedScaleBehavior>(path)?;
    if map.is_empty() {
        return Err(content(path, "the trace has no clients"));
    }
    let traces: Vec<FedScaleBehavior> = map.into_values().collect();
    for t in &traces {
        if t.active.len() != t.inactive.len() || t.finish_time.is_nan() || t.finish_time <= 0.0 {
            return Err(content(
                path,
                "each trace needs as many `active` as `inactive` times and a positive finish_time",
            ));
        }
    }
    Ok(traces)
}
