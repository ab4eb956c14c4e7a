//! Federated data sets: one contiguous feature buffer and one label buffer for all clients,
//! each client a set of index ranges (train / val / test). No per-client copies. A data set too
//! large to hold can instead make each client's rows when a job needs them ([`OnDemandRows`]);
//! jobs reach rows through [`FederatedData::rows_for`], which serves both.
//!
//! This module generates and splits data; it does not train, and it holds no tch tensors
//! (tensors are not `Sync`; the trainer makes zero-copy views of these buffers instead).

mod blobs;
mod catalogue;
mod fedem_synthetic;
mod fedgmm_synthetic;
mod images;
mod numpy_rng;
mod parquet;
mod partition;
pub mod registry;
mod shakespeare;
mod split;
mod synthetic_ab;

pub use blobs::BlobsSpec;
pub use catalogue::{
    DatasetSettings, DatasetSpec, Registration as DatasetRegistration, Source, DATASETS,
};
pub use fedem_synthetic::{ColumnFile, FedemSyntheticSpec, LabelLaw, LabelRule};
pub use fedgmm_synthetic::{ComponentLaw, FedgmmSyntheticSpec, InputLaw, Marginal};
pub use images::{
    FashionMnistSpec, FemnistSpec, JointShift, MnistSpec, NovelMode, Pixels, RegistryImagesSpec,
    ShiftDealing, ShiftMode,
};
pub use numpy_rng::NumpyRandomState;
pub use parquet::{DataError, NonFinite, ParquetSpec};
pub use partition::{
    DirichletSpec, IidSpec, NaturalSpec, PachinkoSpec, PartitionRegistration, PartitionSettings,
    PartitionSpec, PfedmeSpec, ShardsSpec, PARTITIONS,
};
pub use shakespeare::{ShakespeareSpec, PRINTABLE};
pub use split::{SplitSizes, SplitSpec};
pub use synthetic_ab::SyntheticAbSpec;

use crate::records::Split;
use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

/// One client's rows in the shared buffers. The three ranges are contiguous and disjoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientShard {
    pub train: Range<usize>,
    pub val: Range<usize>,
    pub test: Range<usize>,
}

impl ClientShard {
    pub fn range(&self, split: Split) -> Range<usize> {
        match split {
            Split::Train => self.train.clone(),
            Split::Val => self.val.clone(),
            Split::Test => self.test.clone(),
            Split::Backdoor => self.test.end..self.test.end,
        }
    }
}

/// The true generative parameters of a synthetic data set, kept for recovery checks and for
/// the Bayes-optimal accuracy.
#[derive(Clone, Debug, Default)]
pub struct MixtureTruth {
    /// `components[m]` is θ_m.
    pub components: Vec<Vec<f64>>,
    /// `weights[t]` is π_t.
    pub weights: Vec<Vec<f64>>,
    /// How a label follows from ⟨x, θ_z⟩; `None` when the labels do not follow the model.
    pub labels: Option<LabelLaw>,
    /// Components with input laws of their own (FedGMM's data): each labels its own inputs,
    /// so P(y | x) follows from the posterior over components given x.
    pub inputs: Option<Vec<ComponentLaw>>,
}

impl MixtureTruth {
    /// P(y = 1 | x) for client `client` under the true model, Σ_m π_m · P(y = 1 | ⟨x, θ_m⟩);
    /// `None` when the labels do not follow the model.
    pub fn positive_probability(&self, client: usize, x: &[f32]) -> Option<f64> {
        if let Some(laws) = &self.inputs {
            return Some(fedgmm_synthetic::positive_probability(
                laws,
                &self.weights[client],
                x,
            ));
        }
        let law = self.labels?;
        Some(
            self.components
                .iter()
                .zip(&self.weights[client])
                .map(|(theta, &pi)| {
                    let logit: f64 = x.iter().zip(theta).map(|(&a, &b)| a as f64 * b).sum();
                    pi * law.positive_probability(logit)
                })
                .sum(),
        )
    }

    /// The true log p(x) (`y: Some`: log p(x, y)) of client `client`, for data whose components
    /// have input laws of their own; `None` otherwise.
    pub fn log_density(&self, client: usize, x: &[f32], y: Option<i64>) -> Option<f64> {
        let laws = self.inputs.as_ref()?;
        Some(fedgmm_synthetic::log_density(
            laws,
            &self.weights[client],
            x,
            y,
        ))
    }

    /// Accuracy on `view` (client `client`'s rows) of the Bayes-optimal classifier, which
    /// knows the true components and mixture weights and predicts 1 when P(y = 1 | x) > 1/2:
    /// the ceiling of any method on these rows, up to sampling noise. `None` when the labels
    /// do not follow the model; NaN on an empty view.
    pub fn bayes_accuracy(&self, client: usize, view: SplitView<'_>) -> Option<f64> {
        if self.inputs.is_none() {
            self.labels?;
        }
        let correct = (0..view.len())
            .map(|i| {
                let x = &view.features[i * view.dim..(i + 1) * view.dim];
                let p = self.positive_probability(client, x)?;
                Some(((p > 0.5) as i64 == view.labels[i]) as usize)
            })
            .sum::<Option<usize>>()?;
        Some(correct as f64 / view.len() as f64)
    }
}

/// The shape of one input row: flat features, an image `[channels, height, width]` stored
/// row-major in the row's features, or `len` token ids (as exact small floats) of a vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputShape {
    Flat(usize),
    Image([usize; 3]),
    Tokens { len: usize, vocab: usize },
}

impl InputShape {
    /// Features per row.
    pub fn len(&self) -> usize {
        match *self {
            InputShape::Flat(d) => d,
            InputShape::Image([c, h, w]) => c * h * w,
            InputShape::Tokens { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the `dim` features of a row are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// Plain numbers.
    #[default]
    Flat,
    /// An image `[channels, height, width]` (their product is `dim`), row-major.
    Image([usize; 3]),
    /// Token ids in `0..vocab` (a text window; `dim` tokens).
    Tokens { vocab: usize },
}

/// All clients' data, row-major features (`rows × dim`) and integer labels.
#[derive(Clone, Debug)]
pub struct FederatedData {
    pub layout: Layout,
    pub dim: usize,
    pub classes: usize,
    pub features: Vec<f32>,
    pub labels: Vec<i64>,
    pub clients: Vec<ClientShard>,
    pub truth: Option<MixtureTruth>,
    /// Per client, rows from a distribution no client trains on (novelty detection); empty
    /// for most data sets. They belong to no split.
    pub novel: Vec<Range<usize>>,
    /// Per client, its [`Split::Backdoor`] rows (after every split's rows); empty without a
    /// backdoor adversary.
    pub backdoor: Vec<Range<usize>>,
    /// Clients whose rows are made when a job needs them; then `features`, `labels` and
    /// `clients` are empty and only [`FederatedData::rows_for`] gives rows.
    pub on_demand: Option<Arc<dyn OnDemandRows>>,
    /// Floats in `features` before row 0 (rows made on demand start on a 64-byte boundary, so
    /// that libtorch's kernels, whose rounding can follow the address, see the same layout
    /// on every run); 0 for resident data, whose buffer is page-aligned.
    pub lead: usize,
}

/// A data set that makes each client's rows when asked, the same rows every time.
pub trait OnDemandRows: Send + Sync + std::fmt::Debug {
    fn num_clients(&self) -> usize;
    /// Row counts of `client`'s splits.
    fn split_sizes(&self, client: usize) -> SplitSizes;
    /// How many novel rows `client` has (rows of no split, for novelty detection).
    fn novel_len(&self, _client: usize) -> usize {
        0
    }
    /// Appends `client`'s rows (train, val, test, then its novel rows) to `features` and
    /// `labels`.
    fn make_rows(&self, client: usize, features: &mut Vec<f32>, labels: &mut Vec<i64>);
}

/// The rows of some clients ([`FederatedData::rows_for`]): the data set itself when its rows are
/// resident, or a small data set of just those clients, made on demand.
pub struct ClientRows<'a> {
    data: Cow<'a, FederatedData>,
    /// Position of each asked-for client in `data`.
    index: Vec<usize>,
}

impl ClientRows<'_> {
    pub fn data(&self) -> &FederatedData {
        &self.data
    }

    /// Where the `k`-th client asked for is in [`ClientRows::data`].
    pub fn index(&self, k: usize) -> usize {
        self.index[k]
    }
}

/// A read-only view of one client's split.
#[derive(Clone, Copy, Debug)]
pub struct SplitView<'a> {
    pub features: &'a [f32],
    pub labels: &'a [i64],
    pub dim: usize,
}

impl SplitView<'_> {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

impl FederatedData {
    /// What one row is, for the model.
    pub fn input_shape(&self) -> InputShape {
        match self.layout {
            Layout::Flat => InputShape::Flat(self.dim),
            Layout::Image(shape) => InputShape::Image(shape),
            Layout::Tokens { vocab } => InputShape::Tokens {
                len: self.dim,
                vocab,
            },
        }
    }

    pub fn num_clients(&self) -> usize {
        match &self.on_demand {
            Some(rows) => rows.num_clients(),
            None => self.clients.len(),
        }
    }

    /// A data set that holds no rows: `rows` makes each client's when a job asks.
    pub fn made_on_demand(
        layout: Layout,
        dim: usize,
        classes: usize,
        rows: impl OnDemandRows + 'static,
    ) -> FederatedData {
        FederatedData {
            layout,
            dim,
            classes,
            features: Vec::new(),
            labels: Vec::new(),
            clients: Vec::new(),
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: Some(Arc::new(rows)),
            lead: 0,
        }
    }

    /// Test helper: `self`, whose rows are made on demand, gives `resident`'s rows for clients
    /// asked in any order (one of them twice), on a 64-byte boundary.
    #[cfg(test)]
    pub(crate) fn assert_makes_the_rows_of(&self, resident: &FederatedData, asked: &[u32]) {
        assert!(self.features.is_empty() && self.labels.is_empty());
        assert_eq!(self.num_clients(), resident.num_clients());
        let rows = self.rows_for(asked);
        assert_eq!(rows.data().all_rows().features.as_ptr() as usize % 64, 0);
        for (k, &c) in asked.iter().enumerate() {
            for part in Split::ALL {
                let (a, b) = (
                    resident.view(c as usize, part),
                    rows.data().view(rows.index(k), part),
                );
                assert_eq!(self.split_len(c as usize, part), a.len());
                assert_eq!(
                    (a.features, a.labels),
                    (b.features, b.labels),
                    "{c} {part:?}"
                );
            }
            let (a, b) = (
                resident.novel_view(c as usize),
                rows.data().novel_view(rows.index(k)),
            );
            assert_eq!((a.features, a.labels), (b.features, b.labels), "{c} novel");
        }
    }

    /// Whether any client has novel rows (rows of no split, for novelty detection).
    pub fn has_novel_rows(&self) -> bool {
        match &self.on_demand {
            None => self.novel.iter().any(|rows| !rows.is_empty()),
            Some(source) => (0..source.num_clients()).any(|c| source.novel_len(c) > 0),
        }
    }

    /// The rows of `clients`, resident or made now (in that order, each once per mention).
    pub fn rows_for(&self, clients: &[u32]) -> ClientRows<'_> {
        let Some(source) = &self.on_demand else {
            return ClientRows {
                data: Cow::Borrowed(self),
                index: clients.iter().map(|&c| c as usize).collect(),
            };
        };
        let sizes: Vec<(SplitSizes, usize)> = clients
            .iter()
            .map(|&c| (source.split_sizes(c as usize), source.novel_len(c as usize)))
            .collect();
        let rows: usize = sizes
            .iter()
            .map(|(s, n)| s.train + s.val + s.test + n)
            .sum();
        const ALIGN_FLOATS: usize = 64 / std::mem::size_of::<f32>();
        let mut features: Vec<f32> = Vec::with_capacity(rows * self.dim + ALIGN_FLOATS);
        let base = features.as_ptr();
        let misalign = base as usize % 64 / std::mem::size_of::<f32>();
        let lead = (ALIGN_FLOATS - misalign) % ALIGN_FLOATS;
        features.resize(lead, 0.0);
        let mut labels = Vec::with_capacity(rows);
        let mut novel = Vec::new();
        let shards = clients
            .iter()
            .zip(&sizes)
            .map(|(&c, (s, novel_len))| {
                let start = labels.len();
                source.make_rows(c as usize, &mut features, &mut labels);
                assert_eq!(
                    labels.len() - start,
                    s.train + s.val + s.test + novel_len,
                    "client {c}'s rows"
                );
                let train = start..start + s.train;
                let val = train.end..train.end + s.val;
                let test = val.end..val.end + s.test;
                novel.push(test.end..test.end + novel_len);
                ClientShard { train, val, test }
            })
            .collect();
        if sizes.iter().all(|&(_, novel_len)| novel_len == 0) {
            novel.clear();
        }
        assert_eq!(
            features.as_ptr(),
            base,
            "the rows fit the buffer: its alignment holds"
        );
        ClientRows {
            data: Cow::Owned(FederatedData {
                layout: self.layout,
                dim: self.dim,
                classes: self.classes,
                features,
                labels,
                clients: shards,
                truth: None,
                novel,
                backdoor: Vec::new(),
                on_demand: None,
                lead,
            }),
            index: (0..clients.len()).collect(),
        }
    }

    /// Whether every row is held in memory (else they are made on demand).
    pub fn is_resident(&self) -> bool {
        self.on_demand.is_none()
    }

    /// `client`'s rows of `split`, as indices into the buffers.
    fn range(&self, client: usize, split: Split) -> Range<usize> {
        match split {
            Split::Backdoor => self.backdoor.get(client).cloned().unwrap_or(0..0),
            split => self.clients[client].range(split),
        }
    }

    pub fn view(&self, client: usize, split: Split) -> SplitView<'_> {
        assert!(self.is_resident(), "rows made on demand: use rows_for");
        let r = self.range(client, split);
        let floats = self.lead + r.start * self.dim..self.lead + r.end * self.dim;
        SplitView {
            features: &self.features[floats],
            labels: &self.labels[r.clone()],
            dim: self.dim,
        }
    }

    /// Every row of the data set, of all clients and splits, as one view (rows in file order:
    /// a client's split starts at [`FederatedData::first_row`]).
    pub fn all_rows(&self) -> SplitView<'_> {
        assert!(self.is_resident(), "rows made on demand: use rows_for");
        SplitView {
            features: &self.features[self.lead..],
            labels: &self.labels,
            dim: self.dim,
        }
    }

    /// Index of the first row of `client`'s `split` in [`FederatedData::all_rows`].
    pub fn first_row(&self, client: usize, split: Split) -> usize {
        self.range(client, split).start
    }

    pub fn split_len(&self, client: usize, split: Split) -> usize {
        if let Some(rows) = &self.on_demand {
            let s = rows.split_sizes(client);
            return match split {
                Split::Train => s.train,
                Split::Val => s.val,
                Split::Test => s.test,
                Split::Backdoor => 0,
            };
        }
        self.range(client, split).len()
    }

    /// Replaces each label y of `clients`' training rows by C − 1 − y (a label-flipping
    /// adversary's poisoned data). Resident data only.
    pub fn flip_train_labels(&mut self, clients: &[u32]) {
        assert!(self.is_resident(), "rows made on demand cannot be flipped");
        let top = self.classes as i64 - 1;
        for &c in clients {
            let rows = self.clients[c as usize].range(Split::Train);
            self.labels[rows].iter_mut().for_each(|y| *y = top - *y);
        }
    }

    /// Client `client`'s novel rows (empty when the data set has none).
    pub fn novel_view(&self, client: usize) -> SplitView<'_> {
        let r = self.novel.get(client).cloned().unwrap_or(0..0);
        SplitView {
            features: &self.features[self.lead + r.start * self.dim..self.lead + r.end * self.dim],
            labels: &self.labels[r.clone()],
            dim: self.dim,
        }
    }
}
