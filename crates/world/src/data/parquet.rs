//! Bring your own federated data: one Parquet file with a client id column, an optional split
//! column (`train` / `val` / `test`; without it the scenario's `split` fractions cut each
//! client's rows in file order), a label column (integer class ids) and the features, as
//! numeric columns or one list or fixed-size list column (any float or integer type). Features
//! must be finite: NaN or infinite values are refused with the first bad row, or their rows
//! left out with `non_finite: drop`. Clients are numbered in the order of their ids
//! (numerically for integer ids). Or, with `partition:`, the rows are one pool (no client
//! column) dealt to clients by a partitioner, as the built-in image sets are. The file is read
//! by `io::read_client_table` (all polars reading code lives there).

use super::{ClientShard, FederatedData, PartitionSpec, SplitSpec};
use super::{DatasetSettings, InputShape};
use crate::io::{read_client_table, FeatureColumns, TableColumns, TableError};
use crate::records::Split;
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};

mod on_demand;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParquetSpec {
    /// The file, relative to the working directory.
    pub path: PathBuf,
    /// The column of client ids (whole numbers); without it a `partition` deals the rows.
    #[serde(default = "d_client")]
    pub client_column: String,
    /// Column of `train` / `val` / `test` [default: none, the `split` fractions apply].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_column: Option<String>,
    /// The column of labels (whole numbers from 0).
    #[serde(default = "d_label")]
    pub label_column: String,
    /// One numeric column per feature ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_columns: Option<Vec<String>>,
    /// ... or one list column holding all of a row's features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features_column: Option<String>,
    /// The rows are images of this `[channels, height, width]` (row-major; the product must be
    /// the number of features), for convolutional models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<[usize; 3]>,
    /// The rows are token ids in `0..vocabulary` (integer lists, e.g. text windows), for the
    /// LSTM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocabulary: Option<usize>,
    /// Every feature is divided by this (255 turns `uint8` pixels into [0, 1]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// Number of classes [default: largest label + 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
    /// Rows whose features hold NaN or an infinity: `reject` the file (default) or `drop` the
    /// rows (their number is printed).
    #[serde(default, skip_serializing_if = "NonFinite::is_reject")]
    pub non_finite: NonFinite,
    /// Read each client's rows when a job needs them instead of holding the table: one pass
    /// over the file (a row group at a time) checks it and writes the rows to an unnamed
    /// temporary file, then only 20 bytes per client stay in memory. The file's rows must be
    /// sorted by client id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_demand: bool,
    /// Deal the rows to clients with this partitioner (drawn from the data's seed) instead of
    /// reading a client column: for pooled data such as a CIFAR-100 export
    /// (`{kind: pachinko, clients: 100}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<PartitionSpec>,
    /// FedGMM's joint-distribution shift of images (with `shape`; pixel values 0–255 before
    /// `scale`), as for MNIST: a pool dealt by `partition`, or each client of the client column
    /// its own Beta-drawn share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joint_shift: Option<super::JointShift>,
}

/// What to do with rows whose features are NaN or infinite.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NonFinite {
    #[default]
    Reject,
    Drop,
}

impl NonFinite {
    fn is_reject(&self) -> bool {
        *self == NonFinite::Reject
    }
}

fn d_client() -> String {
    "client".into()
}
fn d_label() -> String {
    "label".into()
}

/// The most classes a data set may have (2²⁴): a label at or above it is not a class id
/// (and its model's output layer would not fit in memory).
pub const MAX_CLASSES: usize = 1 << 24;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("{}: {message}", path.display())]
    Content { path: PathBuf, message: String },
    /// A data set that is not in the cache and could not be fetched.
    #[error("{0}")]
    Fetch(String),
}

impl ParquetSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(partition) = &self.partition {
            if partition.natural_fraction().is_some() {
                return Err(FieldError::new(
                    "partition".into(),
                    "`natural` keeps the file's own clients: leave `partition` out and name \
                     the client column (`client_column`)"
                        .into(),
                ));
            }
            if self.on_demand {
                return Err(FieldError::new(
                    "on_demand".into(),
                    "reads a table whose clients are its client column; a `partition` deals \
                     a pool, which is read whole"
                        .into(),
                ));
            }
            partition.validate().map_err(|e| e.within("partition"))?;
        }
        if let Some(shift) = &self.joint_shift {
            shift.validate().map_err(|e| e.within("joint_shift"))?;
            if self.shape.is_none() || self.on_demand {
                return Err(FieldError::new(
                    "joint_shift".into(),
                    "shifts images held in memory: give `shape: [channels, height, width]` and \
                     leave `on_demand` out"
                        .into(),
                ));
            }
        }
        match (&self.feature_columns, &self.features_column) {
            (Some(_), Some(_)) | (None, None) => Err(FieldError::new(
                "feature_columns".into(),
                "give exactly one of `feature_columns` (a list of column names) and \
                 `features_column` (one list column)"
                    .into(),
            )),
            (Some(cols), None) if cols.is_empty() => Err(FieldError::new(
                "feature_columns".into(),
                "must name at least one column".into(),
            )),
            _ => match self.classes {
                Some(c) if !(2..=MAX_CLASSES).contains(&c) => Err(FieldError::new(
                    "classes".into(),
                    format!("must be in 2..={MAX_CLASSES}, got {c}"),
                )),
                _ => {
                    if self.shape.is_some() && self.vocabulary.is_some() {
                        return Err(FieldError::new(
                            "vocabulary".into(),
                            "rows are images (`shape`) or tokens (`vocabulary`), not both".into(),
                        ));
                    }
                    if let Some(vocabulary) = self.vocabulary {
                        FieldError::at_least_one("vocabulary", vocabulary)?;
                    }
                    if let Some(shape) = self.shape {
                        if shape.contains(&0) {
                            return Err(FieldError::new(
                                "shape".into(),
                                format!(
                                    "[channels, height, width], each at least 1, got {shape:?}"
                                ),
                            ));
                        }
                    }
                    if self.on_demand && self.non_finite == NonFinite::Drop {
                        return Err(FieldError::new(
                            "on_demand".into(),
                            "cannot leave rows out (`non_finite: drop`); clean the file or \
                             read it whole (`on_demand: false`)"
                                .into(),
                        ));
                    }
                    match self.scale {
                        Some(v) => FieldError::positive("scale", v),
                        None => Ok(()),
                    }
                }
            },
        }
    }

    fn features(&self) -> FeatureColumns<'_> {
        match (&self.feature_columns, &self.features_column) {
            (Some(cols), _) => FeatureColumns::Columns(cols),
            (None, Some(col)) => FeatureColumns::List(col),
            (None, None) => unreachable!("validated"),
        }
    }

    /// The columns to read.
    fn columns(&self) -> TableColumns<'_> {
        TableColumns {
            client: self.partition.is_none().then_some(&self.client_column[..]),
            split: self.split_column.as_deref(),
            label: &self.label_column,
            features: self.features(),
            keep_rows: None,
        }
    }

    /// Where row `r` of a split column's text goes: 0 train, 1 val, 2 test.
    fn part_of(&self, text: &str, r: usize) -> Result<usize, String> {
        match text {
            "train" => Ok(0),
            "val" | "validation" => Ok(1),
            "test" => Ok(2),
            other => Err(format!(
                "split column `{}`, row {r}: `{other}`; allowed: train, val, test",
                self.split_column.as_deref().unwrap_or_default()
            )),
        }
    }

    /// The feature column of feature `k` (for messages).
    fn feature_name(&self, k: usize) -> &str {
        match self.features() {
            FeatureColumns::Columns(cols) => &cols[k.min(cols.len() - 1)],
            FeatureColumns::List(col) => col,
        }
    }

    pub fn load(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        let content = |message: String| DataError::Content {
            path: self.path.clone(),
            message,
        };
        if matches!(split, SplitSpec::ExtraTest { .. }) {
            return Err(content(
                "a Parquet data set needs `split: {kind: fractions, ...}` or a split column; \
                 `extra_test` only applies to generated data"
                    .into(),
            ));
        }
        if self.on_demand {
            return on_demand::load(self, split);
        }
        let mut table = read_client_table(&self.path, self.columns())?;
        if table.labels.is_empty() {
            return Err(content(
                "the file has no rows; a data set needs at least one training row per client"
                    .into(),
            ));
        }
        let not_class = |&y: &i64| y < 0 || y as u64 >= MAX_CLASSES as u64;
        if let Some(r) = table.labels.iter().position(not_class) {
            return Err(content(format!(
                "label column `{}`, row {r} (client `{}`): {} is not a class id; labels are \
                 0 ≤ label < {MAX_CLASSES}",
                self.label_column, table.client_names[table.client[r] as usize], table.labels[r]
            )));
        }
        let bad = table.non_finite_rows();
        if let Some(&first) = bad.first() {
            match self.non_finite {
                NonFinite::Reject => {
                    let feature = table.row(first).iter().position(|x| !x.is_finite());
                    let column = self.feature_name(feature.unwrap_or(0));
                    return Err(content(format!(
                        "{} rows have NaN or infinite features; the first is row {first} \
                         (client `{}`, column `{column}`); fix the data or set \
                         `data.non_finite: drop` to leave such rows out",
                        bad.len(),
                        table.client_names[table.client[first] as usize]
                    )));
                }
                NonFinite::Drop => {
                    eprintln!(
                        "note: {}: left out {} rows with NaN or infinite features \
                         (data.non_finite: drop)",
                        self.path.display(),
                        bad.len()
                    );
                    table.drop_rows(&bad);
                }
            }
        }
        let top = table.labels.iter().copied().max().unwrap_or(0) as usize;
        let classes = self.classes.unwrap_or(top + 1).max(2);
        if top >= classes {
            return Err(content(format!(
                "label {top} does not fit classes = {classes}"
            )));
        }
        // Each client's rows, grouped by split: in file order, or in the order dealt.
        let dim = table.dim;
        let shape = self.shape.unwrap_or([1, 1, dim]);
        if shape.iter().product::<usize>() != dim {
            return Err(content(format!(
                "`shape: {shape:?}` holds {} values, but the rows have {dim} features",
                shape.iter().product::<usize>()
            )));
        }
        let images = super::images::RawImages {
            features: &mut table.features,
            labels: &mut table.labels,
            classes,
            shape,
        };
        let (members, names): (Vec<Vec<usize>>, Vec<String>) = match &self.partition {
            None => {
                let mut members = vec![Vec::new(); table.client_names.len()];
                for (r, &c) in table.client.iter().enumerate() {
                    members[c as usize].push(r);
                }
                if let Some(shift) = &self.joint_shift {
                    shift.shift_clients(images, &members, seeds);
                }
                (members, table.client_names.clone())
            }
            Some(partition) => {
                let rows: Vec<usize> = (0..images.labels.len()).collect();
                let groups = match &self.joint_shift {
                    Some(shift) => shift.shift_pool(images, rows, seeds),
                    None => vec![rows],
                };
                let members = partition
                    .assign_groups(&table.labels, &groups, classes, |g| {
                        seeds.rng(Entity::Data, "partition", g as u64)
                    })
                    .map_err(content)?;
                let names = (0..members.len()).map(|c| c.to_string()).collect();
                (members, names)
            }
        };
        let clients = members.len();
        let mut rows: Vec<[Vec<usize>; 3]> = vec![Default::default(); clients];
        for (c, mine) in members.iter().enumerate() {
            for &r in mine {
                let part = match &table.split {
                    None => 0,
                    Some(s) => self.part_of(&s[r], r).map_err(content)?,
                };
                rows[c][part].push(r);
            }
        }
        if let Some(vocab) = self.vocabulary {
            if let Some(r) = (0..table.labels.len()).find(|&r| {
                table
                    .row(r)
                    .iter()
                    .any(|&t| t < 0.0 || t.fract() != 0.0 || t >= vocab as f32)
            }) {
                return Err(content(format!(
                    "row {r} (client `{}`) holds a token id outside 0..{vocab} (or not a whole \
                     number)",
                    table.client_names[table.client[r] as usize]
                )));
            }
        }
        if let Some(scale) = self.scale {
            let scale = scale as f32;
            table.features.iter_mut().for_each(|v| *v /= scale);
        }
        let mut data = FederatedData {
            layout: match (self.shape, self.vocabulary) {
                (Some(shape), _) => super::Layout::Image(shape),
                (None, Some(vocab)) => super::Layout::Tokens { vocab },
                (None, None) => super::Layout::Flat,
            },
            dim,
            classes,
            features: Vec::with_capacity(table.features.len()),
            labels: Vec::with_capacity(table.labels.len()),
            clients: Vec::with_capacity(clients),
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        };
        for (c, [train, val, test]) in rows.into_iter().enumerate() {
            let start = data.labels.len();
            for &r in train.iter().chain(&val).chain(&test) {
                data.features
                    .extend_from_slice(&table.features[r * dim..(r + 1) * dim]);
                data.labels.push(table.labels[r]);
            }
            let shard = if table.split.is_some() {
                let (a, b) = (start + train.len(), start + train.len() + val.len());
                ClientShard {
                    train: start..a,
                    val: a..b,
                    test: b..b + test.len(),
                }
            } else {
                split.shard(start, train.len())
            };
            if shard.range(Split::Train).is_empty() {
                return Err(content(format!(
                    "client `{}` has no training rows",
                    names[c]
                )));
            }
            data.clients.push(shard);
        }
        Ok(data)
    }
}

impl DatasetSettings for ParquetSpec {
    const EXAMPLE: &'static str = "{path: data.parquet, features_column: x}";

    fn validate(&self) -> Result<(), FieldError> {
        ParquetSpec::validate(self)
    }
    fn num_clients(&self) -> Option<usize> {
        self.partition.as_ref().and_then(PartitionSpec::clients)
    }
    /// The window length of token rows is known once the file is read; the check only needs to
    /// know they are tokens.
    fn input_shape(&self) -> Option<InputShape> {
        match (self.shape, self.vocabulary) {
            (Some(shape), _) => Some(InputShape::Image(shape)),
            (None, Some(vocab)) => Some(InputShape::Tokens { len: 0, vocab }),
            (None, None) => None,
        }
    }
    fn classes(&self) -> Option<usize> {
        self.classes
    }
    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        self.load(split, seeds)
    }
}
