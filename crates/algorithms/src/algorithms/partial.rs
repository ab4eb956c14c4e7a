//! Partial personalization: some of the model's layers are shared (averaged by the server),
//! the others stay with each client. Layers are named as `Architecture::select_layers` reads
//! them: `head` (the last layer with parameters), `body` (every other), `norm` (every
//! normalisation layer) or a layer's own name (`0`, `1`, … as the model file names its
//! tensors).
//!
//! Three algorithms are FedAvg on the shared layers with the rest kept by each client, and
//! differ only in which layers stay:
//! - FedPer (Arivazhagan et al. 2019): the head (`personal: [head]`);
//! - LG-FedAvg (Liang et al. 2020): the body, local representations under a global head
//!   (`personal: [body]`);
//! - FedBN (Li et al. 2021): the normalisation layers' scales and shifts (`personal: [norm]`).
//!
//! FedRep and FedBABU (their own files) split the same way and train the halves in turn or
//! one half only. The server holds the shared layers and, for the others, the values every
//! client starts from ([`SplitModel`]); a client keeps its own values of the other layers once
//! it has trained (lazily: none before). Only the shared layers travel. This room holds no tch
//! code: the local SGD runs and gradients are the models'; `LayerSteps::step` is a step on flat
//! vectors.

use super::{
    stale_delta_average, Algorithm, Gradients, LocalContext, LocalUpdate, SentRuns, SgdRun,
    SgdUpdate, StaleUpdate, Tested,
};
use crate::algorithms::fedavg::ModelUpdate;
use crate::models::Architecture;
use crate::records::ModelKind;
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::ops::Range;

/// A layer's name in a setting: a layer's index may be written as a number (`personal: [0,
/// head]`).
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(
    untagged,
    expecting = "expected a layer's name: `head`, `body`, `norm` or a layer's own (`0`, `1`, …)"
)]
pub enum LayerName {
    Name(String),
    Index(u64),
}

/// Reads an optional list of [`LayerName`]s as names (`deserialize_with`).
pub fn layer_names<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    let names: Option<Vec<LayerName>> = Option::deserialize(deserializer)?;
    Ok(names.map(|names| {
        (names.into_iter())
            .map(|n| match n {
                LayerName::Name(name) => name,
                LayerName::Index(i) => i.to_string(),
            })
            .collect()
    }))
}

/// A model's layers in two halves: the `shared` ones and the `rest`, as ranges of the flat
/// parameter vector (each half sorted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerSplit {
    pub shared: Vec<Range<usize>>,
    pub rest: Vec<Range<usize>>,
}

impl LayerSplit {
    /// The split of `arch` whose `rest` is the layers `names` select; refused (with the field
    /// `field`) where the names are not the model's or leave no layer shared.
    pub fn of(arch: &Architecture, names: &[String], field: &str) -> Result<Self, FieldError> {
        let rest = (arch.select_layers(names)).map_err(|m| FieldError::new(field.into(), m))?;
        let mut shared = Vec::new();
        let mut at = 0;
        for r in &rest {
            if r.start > at {
                shared.push(at..r.start);
            }
            at = r.end;
        }
        if at < arch.num_params() {
            shared.push(at..arch.num_params());
        }
        if shared.is_empty() {
            return Err(FieldError::new(
                field.into(),
                format!(
                    "{names:?} is every layer of this model ({}): nothing would be shared; use \
                     a model with more layers or name fewer",
                    arch.summary()
                ),
            ));
        }
        Ok(LayerSplit { shared, rest })
    }

    fn gather(ranges: &[Range<usize>], model: &[f32]) -> Vec<f32> {
        ranges
            .iter()
            .flat_map(|r| &model[r.clone()])
            .copied()
            .collect()
    }

    fn scatter(ranges: &[Range<usize>], values: &[f32], model: &mut [f32]) {
        let mut at = 0;
        for r in ranges {
            model[r.clone()].copy_from_slice(&values[at..at + r.len()]);
            at += r.len();
        }
        assert_eq!(at, values.len(), "the half's values");
    }

    /// The shared layers' values of a whole model, in parameter order.
    pub fn shared_of(&self, model: &[f32]) -> Vec<f32> {
        Self::gather(&self.shared, model)
    }

    /// The other layers' values of a whole model, in parameter order.
    pub fn rest_of(&self, model: &[f32]) -> Vec<f32> {
        Self::gather(&self.rest, model)
    }

    /// The whole model of the two halves' values.
    pub fn join(&self, shared: &[f32], rest: &[f32]) -> Vec<f32> {
        let len = shared.len() + rest.len();
        let mut model = vec![0f32; len];
        Self::scatter(&self.shared, shared, &mut model);
        Self::scatter(&self.rest, rest, &mut model);
        model
    }

    /// The whole model with the split of `model`.
    pub fn split(&self, model: &[f32]) -> SplitModel {
        SplitModel {
            shared: self.shared_of(model),
            rest: self.rest_of(model),
        }
    }
}

/// What the server of a split model holds: the shared layers, averaged each round, and the
/// other layers' values every client starts from (the initial ones: the server never sees a
/// client's).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SplitModel {
    pub shared: Vec<f32>,
    pub rest: Vec<f32>,
}

impl SplitModel {
    /// A client's values of the other layers: its own (`own`), or the server's before it has
    /// any (empty `own`).
    pub fn rest_or<'a>(&'a self, own: &'a [f32]) -> &'a [f32] {
        match own.is_empty() {
            true => &self.rest,
            false => own,
        }
    }
}

impl super::Finite for SplitModel {
    fn is_finite(&self) -> bool {
        self.shared.is_finite() && self.rest.is_finite()
    }
}

/// `init_global` (the initial model, split), `models` (the halves joined), `broadcast_len`
/// (the shared layers) and `update_len` for an [`Algorithm`] with a `split: LayerSplit` whose
/// server holds a [`SplitModel`] and whose clients send the shared layers as [`ModelUpdate`]s.
macro_rules! split_model_global {
    () => {
        fn init_global(
            &self,
            _: &$crate::models::Architecture,
            init: &mut $crate::models::InitialModels<'_, rand_chacha::ChaCha20Rng>,
        ) -> $crate::algorithms::partial::SplitModel {
            self.split.split(&init.model())
        }

        fn models(&self, global: &$crate::algorithms::partial::SplitModel) -> Vec<Vec<f32>> {
            vec![self.split.join(&global.shared, &global.rest)]
        }

        fn broadcast_len(&self, global: &$crate::algorithms::partial::SplitModel) -> usize {
            global.shared.len()
        }

        fn update_len(&self, update: &$crate::algorithms::ModelUpdate) -> usize {
            update.params.len()
        }
    };
}
pub(crate) use split_model_global;

/// `aggregate` (the n_t-weighted average of the shared layers, summed), `STALE_UPDATES`
/// (FedBuff's), `SERVER_OPTIMIZED` and `PRIVATE_UPDATES` (the shared layers) for an
/// [`Algorithm`] whose server holds a [`SplitModel`] and whose clients send the shared layers
/// as [`ModelUpdate`]s.
macro_rules! split_model_aggregation {
    () => {
        const PRIVATE_UPDATES: Option<$crate::algorithms::PrivateUpdates<Self>> =
            Some($crate::algorithms::PrivateUpdates {
                sent: |global, update| vec![(&global.shared[..], &mut update.params[..])],
                equal_weight: |_, update| update.weight = 1.0,
                divisor: |_, aggregated| aggregated,
                global: |global| vec![&mut global.shared[..]],
            });

        /// The shared layers, as averaged.
        const SERVER_OPTIMIZED: Option<$crate::algorithms::AggregatedVectors<Self>> =
            Some(|global, next| vec![(&global.shared[..], &mut next.shared[..])]);

        /// The n_t-weighted average of the shared layers, in client order.
        const SUMMED: Option<$crate::algorithms::Summed<Self>> = Some($crate::algorithms::Summed {
            weight: |update, _| update.weight,
            finish: |_, global, sums, _| {
                let [sum] = <[_; 1]>::try_from(sums).expect("one vector");
                $crate::algorithms::partial::SplitModel {
                    shared: sum.average(),
                    rest: global.rest.clone(),
                }
            },
        });

        fn aggregate(
            &self,
            global: &$crate::algorithms::partial::SplitModel,
            updates: $crate::algorithms::Updates<$crate::algorithms::ModelUpdate>,
        ) -> $crate::algorithms::partial::SplitModel {
            $crate::algorithms::summed_aggregate(self, global, updates)
        }

        const STALE_UPDATES: Option<$crate::algorithms::AggregateStale<Self>> =
            Some(|_, global, updates, server_lr| {
                $crate::algorithms::partial::stale_average(global, updates, server_lr)
            });
    };
}
pub(crate) use split_model_aggregation;

/// FedBuff's aggregation of stale updates of the shared layers (as FedAvg's, on them).
pub fn stale_average(
    global: &SplitModel,
    updates: &[StaleUpdate<'_, SplitModel, ModelUpdate>],
    lr: f64,
) -> SplitModel {
    let total = updates.iter().map(|u| u.update.weight).sum();
    let items = (updates.iter()).map(|u| {
        (
            u.update.weight,
            u.factor,
            &u.update.params[..],
            &u.base.shared[..],
        )
    });
    SplitModel {
        shared: stale_delta_average(&global.shared, items, total, lr),
        rest: global.rest.clone(),
    }
}

/// A split model trained minibatch by minibatch, one half at a time (FedRep, FedBABU): during
/// an update, the whole model, its momentum buffer (from zero: a new optimizer per update, as
/// the authors' code makes), the plan's momentum ρ, and how many steps train the `rest`
/// before the steps that train the shared layers. Empty between rounds.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct LayerSteps {
    pub model: Vec<f32>,
    pub momentum: Vec<f32>,
    pub rho: f64,
    pub rest_steps: u64,
}

impl LayerSteps {
    /// Starts an update from `model`.
    pub fn begin(&mut self, model: Vec<f32>, rho: f64, rest_steps: u64) {
        self.momentum = vec![0.0; model.len()];
        (self.model, self.rho, self.rest_steps) = (model, rho, rest_steps);
    }

    /// One minibatch step of each of `runs` (with its learning rate): the gradients at their
    /// models in one query, then PyTorch's SGD on the half each trains (the `rest` while it has
    /// steps left, then the shared layers), the other half and its buffer left as they are.
    pub fn step(split: &LayerSplit, runs: &mut [(&mut LayerSteps, f64)], batch: &dyn Gradients) {
        let points: Vec<&[f32]> = runs.iter().map(|(run, _)| &run.model[..]).collect();
        let gradients = batch.gradients(&points);
        for ((run, lr), gradient) in runs.iter_mut().zip(gradients) {
            let trained = match run.rest_steps {
                0 => &split.shared,
                _ => {
                    run.rest_steps -= 1;
                    &split.rest
                }
            };
            let (lr, rho) = (*lr as f32, run.rho as f32);
            for i in trained.iter().flat_map(Range::clone) {
                let direction = match rho == 0.0 {
                    true => gradient[i],
                    false => {
                        run.momentum[i] = rho * run.momentum[i] + gradient[i];
                        run.momentum[i]
                    }
                };
                run.model[i] -= lr * direction;
            }
        }
    }

    /// The trained model; the buffer is dropped.
    pub fn finish(&mut self) -> Vec<f32> {
        self.momentum = Vec::new();
        std::mem::take(&mut self.model)
    }
}

impl super::Finite for LayerSteps {
    fn is_finite(&self) -> bool {
        self.model.is_finite() && self.momentum.is_finite()
    }
}

impl crate::io::Floats for LayerSteps {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.model, &mut self.momentum]
    }
}

/// Which layers each client keeps (`personal`), as the settings of FedPer, LG-FedAvg and
/// FedBN name them.
fn personal_split(
    arch: &Architecture,
    personal: &Option<Vec<String>>,
    default: &str,
) -> Result<LayerSplit, FieldError> {
    let names = personal
        .clone()
        .unwrap_or_else(|| vec![default.to_string()]);
    LayerSplit::of(arch, &names, "personal")
}

/// The model the examples of split algorithms run with: a body and a head (a linear model has
/// one layer, nothing to split).
pub const SPLIT_EXAMPLE_MODEL: &str = "model={kind: mlp, hidden: [8]}";

/// The model FedBN's example runs with: a batch norm between two dense layers.
pub const NORM_EXAMPLE_MODEL: &str =
    "model={kind: layers, layers: [{kind: dense, units: 8}, batch_norm, relu, dense]}";

/// The settings of FedPer, LG-FedAvg and FedBN: which layers each client keeps.
macro_rules! personal_layers_spec {
    ($(#[$doc:meta])* $spec:ident, default: $default:literal, example_model: $model:expr, field: $(#[$field:meta])*) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $spec {
            $(#[$field])*
            #[serde(default, deserialize_with = "layer_names", skip_serializing_if = "Option::is_none")]
            #[schemars(with = "Option<Vec<LayerName>>")]
            pub personal: Option<Vec<String>>,
        }

        impl super::AlgorithmSettings for $spec {
            type Algorithm = PartialFedAvg;

            const EXAMPLE_SETTINGS: &'static [&'static str] = &[$model];

            fn check_model(&self, arch: &Architecture) -> Result<(), FieldError> {
                personal_split(arch, &self.personal, $default).map(|_| ())
            }

            fn build(&self, population: &super::Population) -> PartialFedAvg {
                let split = personal_split(&population.arch, &self.personal, $default)
                    .expect("checked with the model");
                PartialFedAvg { split }
            }
        }
    };
}

personal_layers_spec! {
    /// FedPer: the head stays with each client.
    FedPerSpec, default: "head", example_model: SPLIT_EXAMPLE_MODEL, field:
    /// The layers each client keeps [default: `[head]`]: `head`, `body`, `norm` or layers'
    /// names (`0`, `1`, …).
}

personal_layers_spec! {
    /// LG-FedAvg: the body (every layer but the head) stays with each client.
    LgFedAvgSpec, default: "body", example_model: SPLIT_EXAMPLE_MODEL, field:
    /// The layers each client keeps [default: `[body]`]: `head`, `body`, `norm` or layers'
    /// names (`0`, `1`, …).
}

personal_layers_spec! {
    /// FedBN: every normalisation layer stays with each client.
    FedBnSpec, default: "norm", example_model: NORM_EXAMPLE_MODEL, field:
    /// The layers each client keeps [default: `[norm]`]: `head`, `body`, `norm` or layers'
    /// names (`0`, `1`, …).
}

/// FedAvg on the shared layers; each client keeps the rest.
#[derive(Clone, Debug)]
pub struct PartialFedAvg {
    pub split: LayerSplit,
}

/// A client's own values of the layers it keeps (empty until it first trains: it starts
/// from the server's) and its momentum buffer over the whole model (empty unless momentum is
/// kept across rounds).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PartialClient {
    pub rest: Vec<f32>,
    pub momentum: Vec<f32>,
}

impl super::Finite for PartialClient {
    fn is_finite(&self) -> bool {
        self.rest.is_finite() && self.momentum.is_finite()
    }
}

impl crate::io::Floats for PartialClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.rest, &mut self.momentum]
    }
}

impl Algorithm for PartialFedAvg {
    /// The layers it keeps (counted as a whole model, at most).
    const CLIENT_MODELS: usize = 1;

    type Global = SplitModel;
    type ClientState = PartialClient;
    type Update = ModelUpdate;

    split_model_global!();

    fn init_client(&self, _: &SplitModel, _: u32) -> PartialClient {
        PartialClient::default()
    }

    /// One run of the whole model (the shared layers received, the client's own others) with
    /// the client's momentum; the shared layers go back, the client keeps the others.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |alg, _, global, state, _| {
            let model = alg.split.join(&global.shared, global.rest_or(&state.rest));
            vec![SgdRun {
                params: Cow::Owned(model),
                momentum: std::mem::take(&mut state.momentum),
                ..SgdRun::default()
            }]
        },
        finish: |alg, ctx, _, state, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            state.momentum = run.momentum;
            let SplitModel { shared, rest } = alg.split.split(&run.params);
            state.rest = rest;
            ModelUpdate::of(ctx, shared)
        },
        sends: SentRuns::Computed,
        keeps: None,
    });

    split_model_aggregation!();

    /// The shared layers with the client's own others.
    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a SplitModel,
        state: &'a PartialClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        let model = self.split.join(&global.shared, global.rest_or(&state.rest));
        vec![Tested::params(ModelKind::Personalized, model)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::close;
    use crate::algorithms::{AlgorithmSettings, Updates};
    use crate::models::ModelSpec;

    /// An MLP 2 → 2 → 1: layer `0` is values 0..6, the head `1` is 6..9.
    fn mlp() -> Architecture {
        Architecture::new(
            &ModelSpec::from_yaml("{kind: mlp, hidden: [2]}").unwrap(),
            2,
            2,
        )
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // lists of ranges, one long
    fn a_split_takes_a_model_apart_and_back() {
        let split = LayerSplit::of(&mlp(), &["head".into()], "personal").unwrap();
        assert_eq!(split.shared, [0..6]);
        assert_eq!(split.rest, [6..9]);
        let model: Vec<f32> = (0..9).map(|i| i as f32).collect();
        let halves = split.split(&model);
        assert_eq!(halves.shared, [0., 1., 2., 3., 4., 5.]);
        assert_eq!(halves.rest, [6., 7., 8.]);
        assert_eq!(split.join(&halves.shared, &halves.rest), model);
        let body = LayerSplit::of(&mlp(), &["body".into()], "personal").unwrap();
        assert_eq!((body.shared, body.rest), (vec![6..9], vec![0..6]));
        let e = LayerSplit::of(&mlp(), &["head".into(), "body".into()], "personal").unwrap_err();
        assert!(e.to_string().contains("nothing would be shared"), "{e}");
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // lists of ranges, one long
    fn the_server_averages_the_shared_layers_and_keeps_the_rest() {
        // Two clients with 1 and 3 rows send shared layers (2, 0) and (6, 4): the average is
        // (1·2 + 3·6)/4 = 5 and (1·0 + 3·4)/4 = 3; the rest stays the server's.
        let alg = PartialFedAvg {
            split: LayerSplit {
                shared: vec![0..2],
                rest: vec![2..3],
            },
        };
        let global = SplitModel {
            shared: vec![0., 0.],
            rest: vec![9.],
        };
        let updates = vec![
            (
                0,
                ModelUpdate {
                    params: vec![2., 0.],
                    weight: 1.0,
                },
            ),
            (
                1,
                ModelUpdate {
                    params: vec![6., 4.],
                    weight: 3.0,
                },
            ),
        ];
        let next = alg.aggregate(&global, Updates::from(updates));
        assert!(close(&next.shared, &[5.0, 3.0], 1e-7), "{:?}", next.shared);
        assert_eq!(next.rest, [9.]);
    }

    #[test]
    fn a_client_keeps_its_layers_and_sends_the_shared_ones() {
        let mut kit = crate::algorithms::testkit::Kit::binary(&[(&[1.0, 0.0], 1)], 1, 0.1);
        kit.arch = mlp();
        let population = kit.population();
        let alg = FedPerSpec::default().build(&population);
        let global = alg
            .split
            .split(&[0.5, -0.5, 0.25, 0.0, 0.1, 0.2, 1.0, -1.0, 0.5]);
        let mut state = PartialClient::default();
        let mut rng = <ChaCha20Rng as rand::SeedableRng>::seed_from_u64(0);
        let ctx = kit.ctx();
        let up = alg.local_update(&ctx, &global, &mut state, &mut rng);
        // One step of the whole model: the sent layers and the kept head are its halves.
        let mut whole = alg.split.join(&global.shared, &global.rest);
        let mut momentum = Vec::new();
        crate::models::train_sgd(
            &population.arch,
            &mut whole,
            &mut momentum,
            ctx.train_view(),
            &ctx.training.plan,
            ctx.lr,
            &mut <ChaCha20Rng as rand::SeedableRng>::seed_from_u64(0),
            &Default::default(),
        );
        assert_eq!(up.params, alg.split.shared_of(&whole));
        assert_eq!(state.rest, alg.split.rest_of(&whole));
        assert_ne!(state.rest, global.rest, "the head moved");
    }
}
