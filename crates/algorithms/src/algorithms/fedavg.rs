//! FedAvg (McMahan et al. 2017) and its two close relatives. Clients run local SGD from the
//! global model; the server averages the returned models weighted by the clients' training-set
//! sizes n_t.
//! - FedProx (Li et al. 2020) adds (μ/2)·‖θ − θ_global‖² to the local loss.
//! - FedAvg+ (Jiang et al. 2019) trains like FedAvg; at evaluation each client fine-tunes a copy
//!   of the global model for a few local epochs and is tested on it.

use super::LocalUpdate;
use super::ProximalTerm;
use super::{
    stale_delta_average, weighted_average, Algorithm, LocalContext, SentRuns, SgdRun, SgdUpdate,
    StaleUpdate, Tested,
};
use super::{FineTuning, FineTunings};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedAvgSpec {}

impl super::AlgorithmSettings for FedAvgSpec {
    type Algorithm = FedAvg;

    fn build(&self, _: &super::Population) -> FedAvg {
        FedAvg::plain()
    }
}

/// D-PSGD (Lian et al. 2017) has FedAvg's settings: none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DPsgdSpec {}

impl super::AlgorithmSettings for DPsgdSpec {
    type Algorithm = FedAvg;

    fn build(&self, _: &super::Population) -> FedAvg {
        FedAvg::plain()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedProxSpec {
    /// μ, the weight of the proximal term (the FedEM authors used 1, 0.1 or 0.05).
    pub mu: f64,
}

impl super::AlgorithmSettings for FedProxSpec {
    const EXAMPLE: &'static str = "{mu: 0.1}";

    type Algorithm = FedAvg;

    fn build(&self, _: &super::Population) -> FedAvg {
        FedAvg::prox(self)
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        crate::settings::FieldError::non_negative("mu", self.mu)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedAvgPlusSpec {
    /// Local epochs of fine-tuning before each evaluation.
    #[serde(default = "default_finetune_epochs")]
    pub finetune_epochs: u32,
    /// Learning rate of the fine-tuning [default: `training.lr`, undecayed: the FedEM authors'
    /// fine-tuning learner steps its own schedule only when it fine-tunes, so it stays near it].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finetune_lr: Option<f64>,
}

fn default_finetune_epochs() -> u32 {
    1
}

impl super::AlgorithmSettings for FedAvgPlusSpec {
    type Algorithm = FedAvg;

    fn build(&self, _: &super::Population) -> FedAvg {
        FedAvg::plus(self)
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        crate::settings::FieldError::at_least_one(
            "finetune_epochs",
            self.finetune_epochs as usize,
        )?;
        match self.finetune_lr {
            Some(lr) => crate::settings::FieldError::positive("finetune_lr", lr),
            None => Ok(()),
        }
    }
}

/// FedAvg with an optional proximal weight (FedProx) and optional fine-tuning before tests
/// (FedAvg+).
#[derive(Clone, Debug, Default)]
pub struct FedAvg {
    pub proximal_mu: f64,
    pub finetune_epochs: u32,
    /// `None`: the scenario's base learning rate.
    pub finetune_lr: Option<f64>,
}

impl FedAvg {
    pub fn plain() -> Self {
        FedAvg::default()
    }

    pub fn prox(spec: &FedProxSpec) -> Self {
        FedAvg {
            proximal_mu: spec.mu,
            ..Default::default()
        }
    }

    pub fn plus(spec: &FedAvgPlusSpec) -> Self {
        FedAvg {
            finetune_epochs: spec.finetune_epochs,
            finetune_lr: spec.finetune_lr,
            ..Default::default()
        }
    }
}

/// `aggregate` (FedAvg's weighted average), `STALE_UPDATES` (FedBuff's), `SERVER_OPTIMIZED`
/// (the model) and `PRIVATE_UPDATES` (the sent model against the global one; each client weighs 1, so the
/// average divides the sum of changes by the clients aggregated) for an
/// [`Algorithm`] whose server holds one flat model and whose clients send [`ModelUpdate`]s.
macro_rules! model_update_aggregation {
    () => {
        const PRIVATE_UPDATES: Option<$crate::algorithms::PrivateUpdates<Self>> =
            Some($crate::algorithms::PrivateUpdates {
                sent: |global, update| vec![(&global[..], &mut update.params[..])],
                equal_weight: |_, update| update.weight = 1.0,
                divisor: |_, aggregated| aggregated,
                global: |global| vec![&mut global[..]],
            });

        /// The model, as averaged.
        const SERVER_OPTIMIZED: Option<$crate::algorithms::AggregatedVectors<Self>> =
            Some(|global, next| vec![(&global[..], &mut next[..])]);

        /// FedAvg's n_t-weighted average of the models, in client order.
        const SUMMED: Option<$crate::algorithms::Summed<Self>> = Some($crate::algorithms::Summed {
            weight: |update, _| update.weight,
            finish: |_, _, sums, _| {
                let [sum] = <[_; 1]>::try_from(sums).expect("one vector");
                sum.average()
            },
        });

        fn aggregate(
            &self,
            global: &Vec<f32>,
            updates: $crate::algorithms::Updates<ModelUpdate>,
        ) -> Vec<f32> {
            $crate::algorithms::summed_aggregate(self, global, updates)
        }

        const STALE_UPDATES: Option<$crate::algorithms::AggregateStale<Self>> =
            Some(|_, global, updates, server_lr| {
                ModelUpdate::stale_average(global, updates, server_lr)
            });
    };
}
pub(crate) use model_update_aggregation;

/// A client's model after local training, with its aggregation weight n_t.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct ModelUpdate {
    pub params: Vec<f32>,
    pub weight: f64,
}

impl super::Finite for ModelUpdate {
    fn is_finite(&self) -> bool {
        self.params.is_finite() && self.weight.is_finite()
    }
}

impl crate::io::Floats for ModelUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.params]
    }
}

impl ModelUpdate {
    /// The model a local run produced on `ctx`'s client, weighted by its training-set size.
    pub fn of(ctx: &LocalContext<'_>, params: Vec<f32>) -> Self {
        ModelUpdate {
            params,
            weight: ctx.train_view().len() as f64,
        }
    }

    /// FedAvg's aggregation of stale updates: the global model moves by `lr` times the
    /// n_t- and staleness-weighted average of the clients' changes (FedBuff).
    pub fn stale_average(
        global: &[f32],
        updates: &[StaleUpdate<'_, Vec<f32>, ModelUpdate>],
        lr: f64,
    ) -> Vec<f32> {
        let total = updates.iter().map(|u| u.update.weight).sum();
        let items = updates
            .iter()
            .map(|u| (u.update.weight, u.factor, &u.update.params[..], &u.base[..]));
        stale_delta_average(global, items, total, lr)
    }
}

/// D-PSGD (Lian et al. 2017): FedAvg's local work, then a weighted average with neighbours.
impl super::Gossip for FedAvg {
    fn local_model(&self, update: ModelUpdate) -> Vec<f32> {
        update.params
    }

    fn mix(&self, items: &[(f64, &Vec<f32>)]) -> Vec<f32> {
        weighted_average(items.iter().map(|(w, x)| (*w, &x[..])))
    }
}

impl Algorithm for FedAvg {
    type Global = Vec<f32>;
    /// The momentum buffer (empty unless momentum is kept across rounds).
    type ClientState = Vec<f32>;
    type Update = ModelUpdate;

    one_global_model!();

    fn init_client(&self, _: &Vec<f32>, _: u32) -> Vec<f32> {
        Vec::new()
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    /// One run from the global model with the client's momentum (FedProx: anchored at the
    /// global model).
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |alg, _, global, momentum, _| {
            vec![SgdRun {
                params: Cow::Borrowed(global),
                momentum: std::mem::take(momentum),
                sample_weights: None,
                proximal: (alg.proximal_mu > 0.0).then(|| ProximalTerm {
                    anchor: Cow::Borrowed(global),
                    mu: alg.proximal_mu,
                }),
                ..SgdRun::default()
            }]
        },
        finish: |_, ctx, _, momentum, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            *momentum = run.momentum;
            ModelUpdate::of(ctx, run.params.into_owned())
        },
        sends: SentRuns::All,
        keeps: None,
    });

    model_update_aggregation!();

    /// Novelty is scored by the global model's confidence maxᵧ p(y | x) (FedAvg+ too: before
    /// fine-tuning).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> = Some(|_, global, _| global);

    fn tested_models<'a>(
        &'a self,
        ctx: &LocalContext<'_>,
        global: &'a Vec<f32>,
        state: &'a Vec<f32>,
        rng: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        match Self::FINE_TUNING.and_then(|tuning| tuning(self, ctx, global, state)) {
            None => vec![Tested::params(ModelKind::Global, &global[..])],
            Some(tuning) => {
                let tuned = ctx.fine_tune(&tuning, rng);
                vec![Tested::params(ModelKind::Personalized, tuned)]
            }
        }
    }

    /// FedAvg+: the global model, `finetune_epochs` epochs at `finetune_lr`.
    const FINE_TUNING: Option<FineTunings<Self>> = Some(|alg, ctx, global, _| {
        (alg.finetune_epochs > 0).then(|| FineTuning {
            start: Cow::Borrowed(global),
            epochs: alg.finetune_epochs,
            lr: alg.finetune_lr.unwrap_or(ctx.training.lr),
        })
    });
}
