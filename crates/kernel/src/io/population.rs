//! Readers of per-client files: the values a data set or a system model can take for each
//! client, and the availability traces of a population.
//!
//! - Our CSV files (a header row, comma-separated, `#` comments): per-client value columns
//!   (`client,<column>,...`: one file can describe a whole population), and online intervals
//!   (`client,start_s,end_s`). Per-client columns can also come from a Parquet file (by the
//!   `.parquet` extension), of which only `client` and the asked-for column are read.
//! - FedScale's two trace files, Python pickles of a dict keyed by client id (FedScale,
//!   `benchmark/dataset/data/device_info/`):
//!   `client_device_capacity`: `{id: {'computation': ms per sample (inference), 'communication':
//!   kbit/s}}`; `client_behave_trace`: `{id: {'active': [s], 'inactive': [s], 'finish_time': s,
//!   ...}}` (other keys ignored). Client `c` of a run takes the entry at position `c mod len` of
//!   the ids in ascending order (FedScale has far more ids than a run has clients).

use super::tables::{read_population_column, PopulationValues};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A per-client file that cannot be used: which file, and what is wrong with it (with the line
/// or row where one is to blame).
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    pub message: String,
}

fn content(path: &Path, message: impl Into<String>) -> FileError {
    FileError {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// A CSV file's text and header; rows are split when they are walked.
struct Csv {
    text: String,
    header: Vec<String>,
    /// The 0-based index of the header among the file's lines.
    header_index: usize,
}

impl Csv {
    fn read(path: &Path) -> Result<Csv, FileError> {
        let text = crate::io::read_text(path, crate::io::SizeLimit::memory("a per-client file"))
            .map_err(|e| content(path, e.to_string()))?;
        let (header_index, head) = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i, l.trim()))
            .find(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .ok_or_else(|| content(path, "the file is empty (it needs a header row)"))?;
        let header: Vec<String> = head.split(',').map(|h| h.trim().to_string()).collect();
        Ok(Csv {
            header,
            header_index,
            text,
        })
    }

    /// Calls `each(line, cells)` for every row after the header (1-based lines; blank and `#`
    /// lines skipped), stopping at the first error.
    fn for_each_row(
        &self,
        path: &Path,
        mut each: impl FnMut(usize, &[&str]) -> Result<(), FileError>,
    ) -> Result<(), FileError> {
        let mut cells = Vec::with_capacity(self.header.len());
        for (i, l) in self.text.lines().enumerate().skip(self.header_index + 1) {
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            cells.clear();
            cells.extend(l.split(',').map(str::trim));
            if cells.len() != self.header.len() {
                return Err(content(
                    path,
                    format!(
                        "line {}: {} cells, the header has {}",
                        i + 1,
                        cells.len(),
                        self.header.len()
                    ),
                ));
            }
            each(i + 1, &cells)?;
        }
        Ok(())
    }

    fn column(&self, path: &Path, name: &str) -> Result<usize, FileError> {
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

    /// Cell `k` of a row at `line` as a number.
    fn number(&self, path: &Path, line: usize, cells: &[&str], k: usize) -> Result<f64, FileError> {
        cells[k].parse::<f64>().map_err(|_| {
            content(
                path,
                format!(
                    "line {line}: column `{}`: `{}` is not a number",
                    self.header[k], cells[k]
                ),
            )
        })
    }
}

/// A client id `v` (at `place`: a line or a row) checked against the number of clients.
fn client_id(path: &Path, place: &str, v: f64, clients: usize) -> Result<usize, FileError> {
    if v.fract() != 0.0 || v < 0.0 || v >= clients as f64 {
        return Err(content(
            path,
            format!("{place}: client `{v}` is not an id in 0..{clients}"),
        ));
    }
    Ok(v as usize)
}

/// Hands each row `(place, client id, value)` of a file to its argument.
type RowFeed<'a, T> = &'a mut dyn FnMut(
    &mut dyn FnMut(String, f64, T) -> Result<(), FileError>,
) -> Result<(), FileError>;

/// What a per-client value must be, checked where it is read: `Err` says what it must be.
pub type ValueRule<'a, T> = &'a dyn Fn(&T) -> Result<(), String>;

/// Puts `(place, client id, value)` rows in client order; every client must have exactly one,
/// and each value must pass `rule` (the error names the place and `column`).
fn one_per_client<T: std::fmt::Debug>(
    path: &Path,
    clients: usize,
    (column, rule): (&str, ValueRule<'_, T>),
    rows: RowFeed<'_, T>,
) -> Result<Vec<T>, FileError> {
    let mut out: Vec<Option<T>> = (0..clients).map(|_| None).collect();
    rows(&mut |place, id, value| {
        let c = client_id(path, &place, id, clients)?;
        rule(&value).map_err(|must| {
            content(
                path,
                format!("{place}: column `{column}` (client {c}): {must}, got {value:?}"),
            )
        })?;
        if out[c].replace(value).is_some() {
            return Err(content(path, format!("{place}: client {c} appears twice")));
        }
        Ok(())
    })?;
    out.into_iter()
        .enumerate()
        .map(|(c, v)| v.ok_or_else(|| content(path, format!("no row for client {c}"))))
        .collect()
}

/// Whether `path` names a Parquet file (by its extension); other files are read as CSV.
fn is_parquet(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

/// One value per client of `column` in a population file (see [`per_client_column`]):
/// `text` asks for text, and `from_csv` turns a CSV row's cells into the value.
fn per_client_values<T: std::fmt::Debug>(
    path: &Path,
    column: &str,
    clients: usize,
    (text, rule): (bool, ValueRule<'_, T>),
    from_parquet: impl Fn(PopulationValues) -> Vec<T>,
    from_csv: impl Fn(&Csv, usize, &[&str], usize) -> Result<T, FileError>,
) -> Result<Vec<T>, FileError> {
    if is_parquet(path) {
        let (ids, values) =
            read_population_column(path, column, text).map_err(|e| content(path, e.message))?;
        let values = from_parquet(values);
        let mut rows = ids.into_iter().zip(values).enumerate();
        return one_per_client(path, clients, (column, rule), &mut |put| {
            rows.try_for_each(|(r, (id, v))| put(format!("row {r}"), id as f64, v))
        });
    }
    let csv = Csv::read(path)?;
    let (ci, vi) = (csv.column(path, "client")?, csv.column(path, column)?);
    one_per_client(path, clients, (column, rule), &mut |put| {
        csv.for_each_row(path, |line, cells| {
            let id = csv.number(path, line, cells, ci)?;
            put(format!("line {line}"), id, from_csv(&csv, line, cells, vi)?)
        })
    })
}

/// One value per client from a file with a `client` column and `column` (a CSV file with a
/// header, or a Parquet file); every client must have exactly one row, and each value must
/// pass `rule` (the rule an inline value of the same setting passes: an error names the file,
/// the line or row, the column and what is allowed). One file can describe a whole
/// population, a column per quantity.
pub fn per_client_column(
    path: &Path,
    column: &str,
    clients: usize,
    rule: ValueRule<'_, f64>,
) -> Result<Vec<f64>, FileError> {
    per_client_values(
        path,
        column,
        clients,
        (false, rule),
        |values| match values {
            PopulationValues::Numbers(v) => v,
            PopulationValues::Text(_) => unreachable!("asked for numbers"),
        },
        |csv, line, cells, k| csv.number(path, line, cells, k),
    )
}

/// [`per_client_column`] for a column of text (names of availability classes, say).
pub fn per_client_text(
    path: &Path,
    column: &str,
    clients: usize,
) -> Result<Vec<String>, FileError> {
    per_client_values(
        path,
        column,
        clients,
        (true, &|_: &String| Ok(())),
        |values| match values {
            PopulationValues::Text(v) => v,
            PopulationValues::Numbers(_) => unreachable!("asked for text"),
        },
        |_, _, cells, k| Ok(cells[k].to_string()),
    )
}

/// Online intervals `[start_s, end_s)` per client from `client,start_s,end_s` rows (a client
/// without rows is never online).
pub fn online_intervals(path: &Path, clients: usize) -> Result<Vec<Vec<(f64, f64)>>, FileError> {
    let csv = Csv::read(path)?;
    let cols = [
        csv.column(path, "client")?,
        csv.column(path, "start_s")?,
        csv.column(path, "end_s")?,
    ];
    let mut out = vec![Vec::new(); clients];
    csv.for_each_row(path, |line, cells| {
        let c = client_id(
            path,
            &format!("line {line}"),
            csv.number(path, line, cells, cols[0])?,
            clients,
        )?;
        let start = csv.number(path, line, cells, cols[1])?;
        let end = csv.number(path, line, cells, cols[2])?;
        if !(start >= 0.0 && end > start && end <= crate::settings::LONGEST_SECONDS) {
            return Err(content(
                path,
                format!(
                    "line {line}: need 0 ≤ start_s < end_s ≤ 4.6e12 (the longest span the \
                     virtual clock counts), got {}, {}",
                    crate::settings::number(start),
                    crate::settings::number(end)
                ),
            ));
        }
        out[c].push((start, end));
        Ok(())
    })?;
    Ok(out)
}

/// One FedScale device: inference latency and bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
pub struct FedScaleDevice {
    /// Milliseconds per sample for inference (FedScale multiplies by 3 for training).
    pub computation: f64,
    /// Bandwidth in kbit/s, both directions.
    pub communication: f64,
}

/// One FedScale availability trace: online during `[active[i], inactive[i]]`, repeating every
/// `finish_time` seconds.
#[derive(Clone, Debug, PartialEq, Deserialize, schemars::JsonSchema)]
pub struct FedScaleBehavior {
    pub active: Vec<f64>,
    pub inactive: Vec<f64>,
    pub finish_time: f64,
}

fn read_pickle<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<BTreeMap<i64, T>, FileError> {
    let file = crate::io::open_regular(path, crate::io::SizeLimit::memory("a FedScale trace"))
        .map_err(|e| content(path, e.to_string()))?;
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
) -> Result<Vec<T>, FileError> {
    if map.is_empty() {
        return Err(content(path, "the trace has no clients"));
    }
    let entries: Vec<T> = map.into_values().collect();
    Ok((0..clients)
        .map(|c| entries[c % entries.len()].clone())
        .collect())
}

/// FedScale's `client_device_capacity`, one entry per client.
pub fn fedscale_devices(path: &Path, clients: usize) -> Result<Vec<FedScaleDevice>, FileError> {
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
pub fn fedscale_behavior(path: &Path) -> Result<Vec<FedScaleBehavior>, FileError> {
    let map = read_pickle::<FedScaleBehavior>(path)?;
    if map.is_empty() {
        return Err(content(path, "the trace has no clients"));
    }
    let traces: Vec<FedScaleBehavior> = map.into_values().collect();
    let longest = crate::settings::LONGEST_SECONDS;
    let in_clock = |t: f64| (0.0..=longest).contains(&t);
    for t in &traces {
        let times_fit = t.active.iter().chain(&t.inactive).all(|&x| in_clock(x));
        if t.active.len() != t.inactive.len()
            || !(t.finish_time > 0.0 && t.finish_time <= longest)
            || !times_fit
        {
            return Err(content(
                path,
                "each trace needs as many `active` as `inactive` times, each from 0 to 4.6e12 s, \
                 and a positive finish_time up to that (the longest span the virtual clock \
                 counts)"
                    .to_string(),
            ));
        }
    }
    Ok(traces)
}
