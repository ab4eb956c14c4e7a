//! Reading a federated data table (Parquet) into plain vectors for `data::parquet`. It lives
//! here because this room holds all polars code; it knows columns and types, not splits or
//! clients' meaning.

use polars::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the features are.
#[derive(Clone, Copy, Debug)]
pub enum FeatureColumns<'a> {
    /// One numeric column per feature.
    Columns(&'a [String]),
    /// One column holding every row's features: a list or a fixed-size list (arrow's
    /// `fixed_size_list`, what pyarrow writes for a 2-D numpy array) of any float or integer
    /// type; all rows the same length.
    List(&'a str),
}

/// Given each row's client (an index into the sorted ids) and the number of clients: which
/// rows to keep.
pub type RowFilter<'a> = dyn Fn(&[u32], usize) -> Vec<bool> + 'a;

/// The columns to read.
#[derive(Clone, Copy)]
pub struct TableColumns<'a> {
    /// The client id column; `None`: the rows are one pool (a single client, `all`).
    pub client: Option<&'a str>,
    pub split: Option<&'a str>,
    pub label: &'a str,
    pub features: FeatureColumns<'a>,
    /// Which rows to keep, given each row's client (an index into the sorted ids) and the
    /// number of clients: a mask over the rows. The others are left out before the features
    /// are read, and clients left without rows are dropped.
    pub keep_rows: Option<&'a RowFilter<'a>>,
}

/// A table's rows in file order.
#[derive(Clone, Debug, Default)]
pub struct ClientTable {
    /// Client ids in their natural order (numbers numerically, text lexically).
    pub client_names: Vec<String>,
    /// Whether the ids are integers (ordered numerically).
    pub numeric_ids: bool,
    /// Per row: index into `client_names`.
    pub client: Vec<u32>,
    /// Per row: the split column's text, when there is one.
    pub split: Option<Vec<String>>,
    pub labels: Vec<i64>,
    /// Row-major, `dim` per row.
    pub features: Vec<f32>,
    pub dim: usize,
}

impl ClientTable {
    /// The rows whose features include NaN or an infinity, in file order.
    pub fn non_finite_rows(&self) -> Vec<usize> {
        (0..self.labels.len())
            .filter(|&r| !self.row(r).iter().all(|x| x.is_finite()))
            .collect()
    }

    /// Row `r`'s features.
    pub fn row(&self, r: usize) -> &[f32] {
        &self.features[r * self.dim..(r + 1) * self.dim]
    }

    /// Leaves out the rows in `drop` (sorted), keeping the others in file order.
    pub fn drop_rows(&mut self, drop: &[usize]) {
        let keep = |r: &usize| drop.binary_search(r).is_err();
        let rows: Vec<usize> = (0..self.labels.len()).filter(keep).collect();
        self.features = rows.iter().flat_map(|&r| self.row(r).to_vec()).collect();
        self.labels = rows.iter().map(|&r| self.labels[r]).collect();
        self.client = rows.iter().map(|&r| self.client[r]).collect();
        if let Some(split) = &self.split {
            self.split = Some(rows.iter().map(|&r| split[r].clone()).collect());
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct TableError {
    pub path: PathBuf,
    pub message: String,
}

pub fn read_client_table(path: &Path, cols: TableColumns<'_>) -> Result<ClientTable, TableError> {
    table_of_frame(path, read_frame(path, None)?, cols, 0)
}

/// Reads `path` (rows `slice = (offset, len)` only, if given), reporting unreadable files as
/// errors about `path`.
fn read_frame(path: &Path, slice: Option<(usize, usize)>) -> Result<DataFrame, TableError> {
    let fail = |message: String| TableError {
        path: path.to_path_buf(),
        message,
    };
    let file = crate::io::open_regular(path).map_err(|e| fail(format!("cannot open: {e}")))?;
    without_panics(|| ParquetReader::new(file).with_slice(slice).finish())
        .map_err(|e| fail(format!("not a readable Parquet file (it is corrupt: {e})")))?
        .map_err(|e| fail(format!("not a readable Parquet file: {e}")))
}

/// The row counts of `path`'s row groups, in file order (read from its footer).
fn row_groups(path: &Path) -> Result<Vec<usize>, TableError> {
    let fail = |message: String| TableError {
        path: path.to_path_buf(),
        message,
    };
    let file = crate::io::open_regular(path).map_err(|e| fail(format!("cannot open: {e}")))?;
    let mut reader = ParquetReader::new(file);
    let groups = without_panics(|| {
        reader
            .get_metadata()
            .map(|m| m.row_groups.iter().map(|g| g.num_rows()).collect())
    })
    .map_err(|e| fail(format!("not a readable Parquet file (it is corrupt: {e})")))?;
    groups.map_err(|e| fail(format!("not a readable Parquet file: {e}")))
}

/// Reads `path` one row group at a time (memory follows the largest row group, not the file)
/// and hands each group's rows to `each` with the file row number of its first row. Each
/// group's `client_names` are that group's own ids. `each`'s errors are messages about `path`.
pub fn scan_client_table(
    path: &Path,
    cols: TableColumns<'_>,
    each: &mut dyn FnMut(&ClientTable, usize) -> Result<(), String>,
) -> Result<usize, TableError> {
    let mut first = 0;
    for rows in row_groups(path)? {
        let table = table_of_frame(path, read_frame(path, Some((first, rows)))?, cols, first)?;
        each(&table, first).map_err(|message| TableError {
            path: path.to_path_buf(),
            message,
        })?;
        first += rows;
    }
    Ok(first)
}

/// The table of a frame read from `path`.
fn table_of_frame(
    path: &Path,
    df: DataFrame,
    cols: TableColumns<'_>,
    first_row: usize,
) -> Result<ClientTable, TableError> {
    let fail = |message: String| TableError {
        path: path.to_path_buf(),
        message,
    };
    let names: Vec<String> = df
        .get_column_names()
        .iter()
        .map(|c| c.to_string())
        .collect();
    let column = |df: &DataFrame, name: &str, role: &str| {
        df.column(name).cloned().map_err(|_| {
            fail(format!(
                "no {role} column `{name}`; the file has: {}",
                names.join(", ")
            ))
        })
    };
    let polars_err = |name: &str, e: PolarsError| fail(format!("column `{name}`: {e}"));
    let no_nulls = |name: &str, c: &Column| {
        if c.null_count() > 0 {
            Err(fail(format!("column `{name}` has missing values")))
        } else {
            Ok(())
        }
    };

    let (client_names, client, numeric_ids) = match cols.client {
        None => (vec!["all".to_string()], vec![0; df.height()], false),
        Some(name) => {
            let client_col = column(&df, name, "client")?;
            no_nulls(name, &client_col)?;
            let numeric_ids = client_col.dtype().is_integer();
            let (names, client) = if numeric_ids {
                let c = client_col
                    .cast(&DataType::Int64)
                    .map_err(|e| polars_err(name, e))?;
                let ids: Vec<i64> = c
                    .i64()
                    .map_err(|e| polars_err(name, e))?
                    .into_no_null_iter()
                    .collect();
                index_of(ids, |v| v.to_string())
            } else {
                let c = client_col
                    .cast(&DataType::String)
                    .map_err(|e| polars_err(name, e))?;
                let ids: Vec<String> = c
                    .str()
                    .map_err(|e| polars_err(name, e))?
                    .iter()
                    .map(|v| v.unwrap_or_default().to_string())
                    .collect();
                index_of(ids, Clone::clone)
            };
            (names, client, numeric_ids)
        }
    };
    // Rows of clients left out go before anything else is read; `kept` maps the rows read
    // back to the frame's rows (for messages).
    let mut kept: Option<Vec<usize>> = None;
    let (df, client_names, client) = match cols.keep_rows {
        None => (df, client_names, client),
        Some(keep) => {
            let mask = keep(&client, client_names.len());
            kept = Some((0..mask.len()).filter(|&r| mask[r]).collect());
            let rows: BooleanChunked = mask.iter().map(|&k| Some(k)).collect();
            let df = df
                .filter(&rows)
                .map_err(|e| fail(format!("selecting rows: {e}")))?;
            let mut has_rows = vec![false; client_names.len()];
            for (&c, &k) in client.iter().zip(&mask) {
                has_rows[c as usize] |= k;
            }
            let mut renumber = vec![u32::MAX; client_names.len()];
            let mut names = Vec::new();
            for (c, name) in client_names.into_iter().enumerate() {
                if has_rows[c] {
                    renumber[c] = names.len() as u32;
                    names.push(name);
                }
            }
            let client = client
                .iter()
                .zip(&mask)
                .filter(|(_, &k)| k)
                .map(|(&c, _)| renumber[c as usize])
                .collect();
            (df, names, client)
        }
    };

    let file_row = |r: usize| first_row + kept.as_ref().map_or(r, |k| k[r]);
    let split = match cols.split {
        None => None,
        Some(name) => {
            let c = column(&df, name, "split")?;
            no_nulls(name, &c)?;
            let c = c.cast(&DataType::String).map_err(|e| polars_err(name, e))?;
            let ca = c.str().map_err(|e| polars_err(name, e))?;
            Some(
                ca.iter()
                    .map(|v| v.unwrap_or_default().to_string())
                    .collect(),
            )
        }
    };

    let label_col = column(&df, cols.label, "label")?;
    no_nulls(cols.label, &label_col)?;
    if !label_col.dtype().is_integer() {
        return Err(fail(format!(
            "label column `{}` must hold integers (class ids), it holds {}",
            cols.label,
            label_col.dtype()
        )));
    }
    let as_i64 = label_col
        .cast(&DataType::Int64)
        .map_err(|e| polars_err(cols.label, e))?;
    if let Some(r) = first_null(&as_i64.as_materialized_series().clone()) {
        return Err(fail(format!(
            "label column `{}`, row {}: {} is not a class id (it does not fit a 64-bit signed \
             integer)",
            cols.label,
            file_row(r),
            label_col.get(r).map(|v| v.to_string()).unwrap_or_default()
        )));
    }
    let labels: Vec<i64> = as_i64
        .i64()
        .map_err(|e| polars_err(cols.label, e))?
        .into_no_null_iter()
        .collect();

    let rows = df.height();
    let (features, dim) = match cols.features {
        FeatureColumns::Columns(names) => {
            let mut per_column = Vec::with_capacity(names.len());
            for name in names {
                let c = column(&df, name, "feature")?;
                no_nulls(name, &c)?;
                if !c.dtype().is_primitive_numeric() {
                    return Err(fail(format!(
                        "feature column `{name}` must hold numbers (any float or integer type), \
                         it holds {}",
                        c.dtype()
                    )));
                }
                check_fits_f32(&c, name, &file_row).map_err(fail)?;
                let c = c
                    .cast(&DataType::Float32)
                    .map_err(|e| polars_err(name, e))?;
                let v: Vec<f32> = c
                    .f32()
                    .map_err(|e| polars_err(name, e))?
                    .into_no_null_iter()
                    .collect();
                per_column.push(v);
            }
            let dim = names.len();
            let mut features = Vec::with_capacity(rows * dim);
            for r in 0..rows {
                features.extend(per_column.iter().map(|c| c[r]));
            }
            (features, dim)
        }
        FeatureColumns::List(name) => {
            let c = column(&df, name, "features")?;
            no_nulls(name, &c)?;
            match c.dtype().clone() {
                DataType::Array(inner, width) if inner.is_primitive_numeric() => {
                    let values = c.array().map_err(|e| polars_err(name, e))?.get_inner();
                    let per_row = |i: usize| file_row(i / width.max(1));
                    check_fits_f32(&values.into_column(), name, &per_row).map_err(fail)?;
                    let c = c
                        .cast(&DataType::Array(Box::new(DataType::Float32), width))
                        .map_err(|e| polars_err(name, e))?
                        .rechunk();
                    let values = c.array().map_err(|e| polars_err(name, e))?.get_inner();
                    if let Some(i) = first_null(&values) {
                        return Err(fail(format!(
                            "column `{name}`: row {} has missing values",
                            i / width.max(1)
                        )));
                    }
                    let values = values.f32().map_err(|e| polars_err(name, e))?;
                    (values.into_no_null_iter().collect(), width)
                }
                DataType::List(inner) if inner.is_primitive_numeric() => {
                    list_features(&c, name).map_err(fail)?
                }
                other => {
                    return Err(fail(format!(
                        "features column `{name}` must hold lists or fixed-size lists of numbers \
                         (any float or integer type), it holds {other}"
                    )))
                }
            }
        }
    };
    if dim == 0 && rows > 0 {
        return Err(fail("the features are empty (0 per row)".into()));
    }
    let lengths = [
        client.len(),
        labels.len(),
        features.len() / dim.max(1),
        split.as_ref().map_or(rows, Vec::len),
    ];
    if lengths.iter().any(|&n| n != rows) || features.len() != rows * dim {
        return Err(fail(format!(
            "not a readable Parquet file (it is corrupt: its columns have different lengths, \
             {rows} rows but {lengths:?})"
        )));
    }
    Ok(ClientTable {
        client_names,
        numeric_ids,
        client,
        split,
        labels,
        features,
        dim,
    })
}

thread_local! {
    /// Set while [`without_panics`] runs on this thread: its panics are expected and reported
    /// as errors, so the panic hook keeps quiet about them.
    static EXPECTING_PANIC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How many threads are inside [`without_panics`]: while any is, panics on polars' own worker
/// threads (which decode pages and hand their panics back to the caller) are expected too.
static READING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs `f` and turns a panic inside it into an error message. The Parquet reader panics on
/// some corrupt files (a malformed footer or page, say) instead of returning an error; a
/// user's broken file must give a clear error, not a crash.
fn without_panics<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    use std::sync::atomic::Ordering;
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let polars_worker = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("polars"));
            let expected = EXPECTING_PANIC.with(|e| e.get())
                || (polars_worker && READING.load(Ordering::SeqCst) > 0);
            if !expected {
                previous(info)
            }
        }));
    });
    EXPECTING_PANIC.with(|e| e.set(true));
    READING.fetch_add(1, Ordering::SeqCst);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    READING.fetch_sub(1, Ordering::SeqCst);
    EXPECTING_PANIC.with(|e| e.set(false));
    result.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the reader failed".into())
    })
}

/// Refuses a float64 column whose finite values do not all fit a 32-bit float (they would
/// become infinite); `row` maps a value's index to its file row, for the message.
fn check_fits_f32(c: &Column, name: &str, row: &dyn Fn(usize) -> usize) -> Result<(), String> {
    if c.dtype() != &DataType::Float64 {
        return Ok(());
    }
    let values = c.f64().map_err(|e| format!("column `{name}`: {e}"))?;
    let too_big = values
        .iter()
        .position(|v| v.is_some_and(|v| v.is_finite() && v.abs() > f32::MAX as f64));
    match too_big {
        None => Ok(()),
        Some(i) => Err(format!(
            "column `{name}`, row {}: {:e} does not fit a 32-bit float (at most ±{:e}); scale \
             the column down",
            row(i),
            values.get(i).unwrap_or_default(),
            f32::MAX
        )),
    }
}

/// The features of a list column whose rows must all have the same length: row-major values
/// and that length. Errors are messages about `name`.
fn list_features(c: &Column, name: &str) -> Result<(Vec<f32>, usize), String> {
    if let DataType::List(inner) = c.dtype() {
        if **inner == DataType::Float64 {
            let lists = c.list().map_err(|e| format!("column `{name}`: {e}"))?;
            for r in 0..lists.len() {
                if let Some(row) = lists.get_as_series(r) {
                    check_fits_f32(&row.into_column(), name, &|_| r)?;
                }
            }
        }
    }
    let c = c
        .cast(&DataType::List(Box::new(DataType::Float32)))
        .map_err(|e| format!("column `{name}`: {e}"))?;
    let lists = c.list().map_err(|e| format!("column `{name}`: {e}"))?;
    let mut features = Vec::new();
    let mut dim = None;
    for r in 0..lists.len() {
        let row = lists
            .get_as_series(r)
            .ok_or_else(|| format!("column `{name}`: row {r} is empty"))?;
        let values = row.f32().map_err(|e| format!("column `{name}`: {e}"))?;
        if values.null_count() > 0 {
            return Err(format!("column `{name}`: row {r} has missing values"));
        }
        let n = values.len();
        if *dim.get_or_insert(n) != n {
            return Err(format!(
                "column `{name}`: row {r} has {n} features, earlier rows {}",
                dim.unwrap_or(0)
            ));
        }
        features.extend(values.into_no_null_iter());
    }
    Ok((features, dim.unwrap_or(0)))
}

/// The position of the first missing value of `s`, if any.
fn first_null(s: &Series) -> Option<usize> {
    if s.null_count() == 0 {
        return None;
    }
    s.is_null().iter().position(|v| v == Some(true))
}

/// Sorted distinct ids, and each row's index among them.
fn index_of<K: Ord + Clone>(ids: Vec<K>, name: impl Fn(&K) -> String) -> (Vec<String>, Vec<u32>) {
    let order: BTreeMap<K, u32> = ids
        .iter()
        .cloned()
        .map(|k| (k, 0))
        .collect::<BTreeMap<_, _>>()
        .into_keys()
        .enumerate()
        .map(|(i, k)| (k, i as u32))
        .collect();
    let names = order.keys().map(name).collect();
    let rows = ids.iter().map(|k| order[k]).collect();
    (names, rows)
}

/// A per-client column of a population file.
#[derive(Clone, Debug, PartialEq)]
pub enum PopulationValues {
    Numbers(Vec<f64>),
    Text(Vec<String>),
}

/// Columns `client` and `column` of a Parquet population file (only those two are read): per
/// row, the client id and the value (numbers, or text when `text`). Missing values are an
/// error naming the row.
pub fn read_population_column(
    path: &Path,
    column: &str,
    text: bool,
) -> Result<(Vec<i64>, PopulationValues), TableError> {
    let fail = |message: String| TableError {
        path: path.to_path_buf(),
        message,
    };
    let file = crate::io::open_regular(path).map_err(|e| fail(format!("cannot open: {e}")))?;
    let mut reader = ParquetReader::new(file);
    let names: Vec<String> = without_panics(|| reader.schema())
        .map_err(|e| fail(format!("not a readable Parquet file (it is corrupt: {e})")))?
        .map_err(|e| fail(format!("not a readable Parquet file: {e}")))?
        .iter_names()
        .map(|n| n.to_string())
        .collect();
    for name in ["client", column] {
        if !names.iter().any(|n| n == name) {
            return Err(fail(format!(
                "no column `{name}` (the file has: {})",
                names.join(", ")
            )));
        }
    }
    let df = without_panics(|| {
        reader
            .with_columns(Some(vec!["client".into(), column.into()]))
            .finish()
    })
    .map_err(|e| fail(format!("not a readable Parquet file (it is corrupt: {e})")))?
    .map_err(|e| fail(format!("not a readable Parquet file: {e}")))?;
    let polars_err = |name: &str, e: PolarsError| fail(format!("column `{name}`: {e}"));
    let missing = |name: &str, c: &Column| match first_null(c.as_materialized_series()) {
        Some(row) => Err(fail(format!("column `{name}`, row {row}: missing value"))),
        None => Ok(()),
    };
    let client = df.column("client").map_err(|e| polars_err("client", e))?;
    missing("client", client)?;
    if !client.dtype().is_integer() {
        return Err(fail(format!(
            "column `client` must hold integer client ids, it holds {}",
            client.dtype()
        )));
    }
    let ids: Vec<i64> = client
        .cast(&DataType::Int64)
        .map_err(|e| polars_err("client", e))?
        .i64()
        .map_err(|e| polars_err("client", e))?
        .into_no_null_iter()
        .collect();
    let values = df.column(column).map_err(|e| polars_err(column, e))?;
    missing(column, values)?;
    let values = if text {
        let c = values
            .cast(&DataType::String)
            .map_err(|e| polars_err(column, e))?;
        PopulationValues::Text(
            c.str()
                .map_err(|e| polars_err(column, e))?
                .iter()
                .map(|v| v.unwrap_or_default().to_string())
                .collect(),
        )
    } else {
        if !values.dtype().is_primitive_numeric() {
            return Err(fail(format!(
                "column `{column}` must hold numbers, it holds {}",
                values.dtype()
            )));
        }
        PopulationValues::Numbers(
            values
                .cast(&DataType::Float64)
                .map_err(|e| polars_err(column, e))?
                .f64()
                .map_err(|e| polars_err(column, e))?
                .into_no_null_iter()
                .collect(),
        )
    };
    Ok((ids, values))
}
