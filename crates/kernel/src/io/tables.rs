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
    /// number of clients: a mask over the rows. Only the client column is read to choose them
    /// ([`read_client_table`] then reads only the row groups holding kept rows), and clients
    /// left without rows are dropped.
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
    match (cols.client, cols.keep_rows) {
        (Some(client), Some(keep)) => read_kept_rows(path, cols, client, keep),
        _ => table_of_frame(path, read_frame(path, None)?, cols, &|r| r),
    }
}

/// Reads the rows `keep` keeps: they are chosen from the client column alone, then only the
/// row groups holding one of them are read in full (a few of FEMNIST's 3 597 writers, one row
/// group each, read a few row groups). The table is the one a whole read would give.
fn read_kept_rows(
    path: &Path,
    cols: TableColumns<'_>,
    client: &str,
    keep: &RowFilter<'_>,
) -> Result<ClientTable, TableError> {
    let (schema, metadata) = with_reader(path, |mut reader| {
        Ok((reader.schema()?, reader.get_metadata()?.clone()))
    })?;
    if !schema.contains(client) {
        // The whole read says what the file lacks.
        return table_of_frame(path, read_frame(path, None)?, cols, &|r| r);
    }
    let read = |slice: (usize, usize), columns: Option<Vec<String>>| {
        with_reader(path, |mut reader| {
            reader.set_metadata(metadata.clone());
            reader
                .with_columns(columns)
                .with_slice(Some(slice))
                .finish()
        })
    };
    let ids = read((0, metadata.num_rows), Some(vec![client.to_string()]))?;
    let (names, index, _) = client_index(path, &ids, client)?;
    let mask = keep(&index, names.len());
    assert_eq!(mask.len(), index.len(), "`keep_rows` masks every row");
    // Runs of adjacent row groups holding a kept row, as (first row, rows).
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut first = 0;
    for rows in metadata.row_groups.iter().map(|g| g.num_rows()) {
        let Some(group) = mask.get(first..first + rows) else {
            return Err(TableError {
                path: path.to_path_buf(),
                message: format!(
                    "not a readable Parquet file (it is corrupt: its row groups hold more rows \
                     than its column `{client}`, {})",
                    mask.len()
                ),
            });
        };
        if group.contains(&true) {
            match spans.last_mut() {
                Some((start, len)) if *start + *len == first => *len += rows,
                _ => spans.push((first, rows)),
            }
        }
        first += rows;
    }
    let mut df = read((0, 0), None)?;
    for &span in &spans {
        df.vstack_mut(&read(span, None)?).map_err(|e| TableError {
            path: path.to_path_buf(),
            message: format!("reading rows: {e}"),
        })?;
    }
    let starts: Vec<usize> = (spans.iter())
        .scan(0, |read, &(_, rows)| {
            Some(std::mem::replace(read, *read + rows))
        })
        .collect();
    let file_row = |r: usize| {
        let s = starts.partition_point(|&start| start <= r) - 1;
        spans[s].0 + r - starts[s]
    };
    let span_mask: Vec<bool> = (spans.iter())
        .flat_map(|&(first, rows)| mask[first..first + rows].iter().copied())
        .collect();
    let kept = move |_: &[u32], _: usize| span_mask.clone();
    let cols = TableColumns {
        keep_rows: Some(&kept),
        ..cols
    };
    table_of_frame(path, df, cols, &file_row)
}

/// Runs `read` on a Parquet reader of `path`, reporting a file that cannot be opened or read
/// (or that makes the reader panic) as an error about `path`.
fn with_reader<T>(
    path: &Path,
    read: impl FnOnce(ParquetReader<std::fs::File>) -> PolarsResult<T>,
) -> Result<T, TableError> {
    let fail = |message: String| TableError {
        path: path.to_path_buf(),
        message,
    };
    let file = crate::io::open_regular(path, crate::io::SizeLimit::STREAMED)
        .map_err(|e| fail(format!("cannot open: {e}")))?;
    without_panics(|| check_pages(path, &file))
        .map_err(|e| fail(format!("not a readable Parquet file (it is corrupt: {e})")))?
        .map_err(|e| fail(format!("not a readable Parquet file (it is corrupt: {e})")))?;
    without_panics(|| read(ParquetReader::new(file)))
        .map_err(|e| fail(format!("not a readable Parquet file (it is corrupt: {e})")))?
        .map_err(|e| fail(format!("not a readable Parquet file: {e}")))
}

/// Checks every page header of `file` against its footer before polars decodes a page: each
/// data page declares no more values (and no fewer than none) than are left of its column
/// chunk, every size is non-negative and within the chunk, and no page or chunk declares more
/// than this process's memory. polars reserves what a page header declares before it decodes
/// it, so a corrupt header (a negative count read as 2⁶⁴ − 8) would make it ask for exabytes:
/// an abort, not an error. Headers are read, never pages; a file is checked once per process
/// (by its path, size and modification time), since a table is read a row group at a time.
fn check_pages(path: &Path, file: &std::fs::File) -> Result<(), String> {
    use polars_parquet_format::thrift::protocol::TCompactInputProtocol;
    use polars_parquet_format::{PageHeader, PageType};
    use std::io::{Read, Seek, SeekFrom};
    type Key = (PathBuf, u64, Option<std::time::SystemTime>);
    static CHECKED: std::sync::Mutex<Vec<Key>> = std::sync::Mutex::new(Vec::new());
    let meta = file.metadata().map_err(|e| e.to_string())?;
    let key = (path.to_path_buf(), meta.len(), meta.modified().ok());
    if CHECKED.lock().is_ok_and(|c| c.contains(&key)) {
        return Ok(());
    }
    let memory = crate::io::machine_memory().unwrap_or(16e9);
    let mut handle = file.try_clone().map_err(|e| e.to_string())?;
    let metadata = ParquetReader::new(file.try_clone().map_err(|e| e.to_string())?)
        .get_metadata()
        .map_err(|e| e.to_string())?
        .clone();
    for (g, group) in metadata.row_groups.iter().enumerate() {
        for column in group.parquet_columns() {
            let name = column.descriptor().path_in_schema.join(".");
            let at = |what: String| format!("row group {g}, column `{name}`: {what}");
            let values = column.num_values();
            let chunk = column.byte_range();
            if values < 0 || values as f64 > 8.0 * memory || chunk.end > meta.len() {
                return Err(at(format!(
                    "its footer declares {values} values in bytes {}..{} of a file of {}",
                    chunk.start,
                    chunk.end,
                    meta.len()
                )));
            }
            let (mut pos, mut seen) = (chunk.start, 0i64);
            while seen < values && pos < chunk.end {
                handle
                    .seek(SeekFrom::Start(pos))
                    .map_err(|e| e.to_string())?;
                let mut header_bytes = (&mut handle).take(chunk.end - pos);
                let mut protocol = TCompactInputProtocol::new(&mut header_bytes, 1 << 24);
                let header = PageHeader::read_from_in_protocol(&mut protocol)
                    .map_err(|e| at(format!("a page header at byte {pos} does not read: {e}")))?;
                drop(protocol);
                let header_len = (chunk.end - pos) - header_bytes.limit();
                let declared = match header.type_ {
                    PageType::DATA_PAGE => header.data_page_header.as_ref().map(|h| h.num_values),
                    PageType::DATA_PAGE_V2 => {
                        header.data_page_header_v2.as_ref().map(|h| h.num_values)
                    }
                    PageType::DICTIONARY_PAGE => {
                        header.dictionary_page_header.as_ref().map(|h| h.num_values)
                    }
                    _ => Some(0),
                };
                let fits = header.compressed_page_size >= 0
                    && header.uncompressed_page_size >= 0
                    && (header.uncompressed_page_size as f64) < memory
                    && pos + header_len + header.compressed_page_size as u64 <= chunk.end;
                let count = declared.filter(|&n| n >= 0 && (seen + n as i64) <= values);
                let Some(count) = count.filter(|_| fits) else {
                    return Err(at(format!(
                        "a page at byte {pos} declares {} values and {} bytes, where {} of the \
                         chunk's {values} values and {} of its bytes are left",
                        declared.map_or("no".into(), |n| n.to_string()),
                        header.compressed_page_size,
                        values - seen,
                        chunk.end - pos - header_len
                    )));
                };
                if header.type_ != PageType::DICTIONARY_PAGE {
                    seen += count as i64;
                }
                pos += header_len + header.compressed_page_size as u64;
            }
        }
    }
    if let Ok(mut checked) = CHECKED.lock() {
        checked.push(key);
    }
    Ok(())
}

/// Reads `path` (rows `slice = (offset, len)` only, if given).
fn read_frame(path: &Path, slice: Option<(usize, usize)>) -> Result<DataFrame, TableError> {
    with_reader(path, |reader| reader.with_slice(slice).finish())
}

/// The row counts of `path`'s row groups, in file order (read from its footer).
fn row_groups(path: &Path) -> Result<Vec<usize>, TableError> {
    with_reader(path, |mut reader| {
        let metadata = reader.get_metadata()?;
        Ok(metadata.row_groups.iter().map(|g| g.num_rows()).collect())
    })
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
        let df = read_frame(path, Some((first, rows)))?;
        let table = table_of_frame(path, df, cols, &|r| first + r)?;
        each(&table, first).map_err(|message| TableError {
            path: path.to_path_buf(),
            message,
        })?;
        first += rows;
    }
    Ok(first)
}

/// The table of a frame read from `path`, whose row `r` is the file's row `file_row(r)`.
fn table_of_frame(
    path: &Path,
    df: DataFrame,
    cols: TableColumns<'_>,
    file_row: &dyn Fn(usize) -> usize,
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
        Some(name) => client_index(path, &df, name)?,
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

    let file_row = |r: usize| file_row(kept.as_ref().map_or(r, |k| k[r]));
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
                            file_row(i / width.max(1))
                        )));
                    }
                    let values = values.f32().map_err(|e| polars_err(name, e))?;
                    (values.into_no_null_iter().collect(), width)
                }
                DataType::List(inner) if inner.is_primitive_numeric() => {
                    list_features(&c, name, &file_row).map_err(fail)?
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
fn list_features(
    c: &Column,
    name: &str,
    file_row: &dyn Fn(usize) -> usize,
) -> Result<(Vec<f32>, usize), String> {
    if let DataType::List(inner) = c.dtype() {
        if **inner == DataType::Float64 {
            let lists = c.list().map_err(|e| format!("column `{name}`: {e}"))?;
            for r in 0..lists.len() {
                if let Some(row) = lists.get_as_series(r) {
                    check_fits_f32(&row.into_column(), name, &|_| file_row(r))?;
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
/// `df`'s client column `name` as (the ids in their natural order, each row's index into
/// them, whether the ids are integers).
fn client_index(
    path: &Path,
    df: &DataFrame,
    name: &str,
) -> Result<(Vec<String>, Vec<u32>, bool), TableError> {
    let fail = |message: String| TableError {
        path: path.to_path_buf(),
        message,
    };
    let polars_err = |e: PolarsError| fail(format!("column `{name}`: {e}"));
    let client_col = df.column(name).map_err(|_| {
        let names: Vec<String> = (df.get_column_names().iter())
            .map(|c| c.to_string())
            .collect();
        fail(format!(
            "no client column `{name}`; the file has: {}",
            names.join(", ")
        ))
    })?;
    if client_col.null_count() > 0 {
        return Err(fail(format!("column `{name}` has missing values")));
    }
    let numeric_ids = client_col.dtype().is_integer();
    let (names, client) = if numeric_ids {
        let c = (client_col.cast(&DataType::Int64)).map_err(polars_err)?;
        let ids: Vec<i64> = c.i64().map_err(polars_err)?.into_no_null_iter().collect();
        index_of(ids, |v| v.to_string())
    } else {
        let c = (client_col.cast(&DataType::String)).map_err(polars_err)?;
        let ids: Vec<String> = (c.str().map_err(polars_err)?.iter())
            .map(|v| v.unwrap_or_default().to_string())
            .collect();
        index_of(ids, Clone::clone)
    };
    Ok((names, client, numeric_ids))
}

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
    let names: Vec<String> = (with_reader(path, |mut reader| reader.schema())?.iter_names())
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
    let columns = Some(vec!["client".into(), column.into()]);
    let df = with_reader(path, |reader| reader.with_columns(columns).finish())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 23 rows in row groups of 5: client `row * 7 % 5` (every client in every group), or
    /// client `row / 4` (each in one or two groups), label `row`, feature `f` = `row` except
    /// a value too big for f32 at row `big`.
    fn write(path: &Path, interleaved: bool, big: usize) {
        let rows = 0..23i64;
        let client: Vec<i64> = (rows.clone())
            .map(|r| if interleaved { r * 7 % 5 } else { r / 4 })
            .collect();
        let f: Vec<f64> = (rows.clone())
            .map(|r| if r as usize == big { 1e300 } else { r as f64 })
            .collect();
        let mut df = df!("c" => client, "y" => rows.collect::<Vec<_>>(), "f" => f).unwrap();
        let file = std::fs::File::create(path).unwrap();
        ParquetWriter::new(file)
            .with_row_group_size(Some(5))
            .finish(&mut df)
            .unwrap();
    }

    fn read(path: &Path, keep: Option<&RowFilter<'_>>) -> Result<ClientTable, TableError> {
        let features = ["f".to_string()];
        let cols = TableColumns {
            client: Some("c"),
            split: None,
            label: "y",
            features: FeatureColumns::Columns(&features),
            keep_rows: keep,
        };
        read_client_table(path, cols)
    }

    #[test]
    fn kept_rows_read_from_their_row_groups_are_those_of_the_whole_table() {
        let tmp = tempfile::tempdir().unwrap();
        for interleaved in [false, true] {
            let path = tmp.path().join(format!("t-{interleaved}.parquet"));
            write(&path, interleaved, usize::MAX);
            let whole = read(&path, None).unwrap();
            // Clients 1 and 4 of 6 (or of 5), every third row, and none.
            let clients = |c: &[u32], n: usize| -> Vec<bool> {
                assert_eq!(n, if interleaved { 5 } else { 6 });
                c.iter().map(|&c| c == 1 || c == 4).collect()
            };
            let thirds = |c: &[u32], _: usize| (0..c.len()).map(|r| r % 3 == 0).collect();
            let nothing = |c: &[u32], _: usize| vec![false; c.len()];
            for keep in [&clients as &RowFilter<'_>, &thirds, &nothing] {
                let kept = read(&path, Some(keep)).unwrap();
                let mask = keep(&whole.client, whole.client_names.len());
                let rows: Vec<usize> = (0..mask.len()).filter(|&r| mask[r]).collect();
                let labels: Vec<i64> = rows.iter().map(|&r| whole.labels[r]).collect();
                assert_eq!(kept.labels, labels);
                let features: Vec<f32> = labels.iter().map(|&y| y as f32).collect();
                assert_eq!(kept.features, features);
                let names: Vec<&String> = (whole.client_names.iter().enumerate())
                    .filter(|(c, _)| rows.iter().any(|&r| whole.client[r] == *c as u32))
                    .map(|(_, name)| name)
                    .collect();
                assert_eq!(kept.client_names.iter().collect::<Vec<_>>(), names);
                for (k, &r) in rows.iter().enumerate() {
                    let name = &whole.client_names[whole.client[r] as usize];
                    assert_eq!(&kept.client_names[kept.client[k] as usize], name);
                }
            }
        }
        // Clients 1 and 4 hold rows 4–7 and 16–19: a bad value in row 18 is named by its row
        // in the file.
        let path = tmp.path().join("big.parquet");
        write(&path, false, 18);
        let clients = |c: &[u32], _: usize| c.iter().map(|&c| c == 1 || c == 4).collect();
        let err = read(&path, Some(&clients)).unwrap_err().to_string();
        assert!(err.contains("column `f`, row 18: 1e300"), "{err}");
    }
}
