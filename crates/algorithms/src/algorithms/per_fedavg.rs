//! Per-FedAvg (Fallah et al. 2020), first-order version (FO-MAML). Local work takes minibatches
//! in pairs (D, D'): a trial step w̃ = w − α·∇f(w; D), then the update w ← w − β·∇f(w̃; D'),
//! so w learns to be a good starting point for one step of adaptation. The server averages the
//! w's (weights n_t). Before it is tested, a client adapts: one step of size α on a minibatch of
//! its own training data.
//!
//! β is the round's `training.lr`; α is `inner_lr`. With `local_steps: R` a client takes R
//! pairs (2R minibatches); with local epochs, consecutive minibatches of each pass are paired
//! (an odd last one is left out). Plain SGD: momentum is not used.

use super::LocalUpdate;
use super::{
    descend, Algorithm, BatchwiseClient, BatchwiseUpdate, Gradients, LocalContext, Tested,
};
use crate::algorithms::fedavg::{model_update_aggregation, ModelUpdate};
use crate::models::{for_each_batch, LocalPlan, LocalWork};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PerFedAvgSpec {
    /// α, the step size of the trial step and of the adaptation before tests (pFedMe's
    /// Table 1 uses α = 0.02 with β = 0.002 on Synthetic).
    pub inner_lr: f64,
}

impl super::AlgorithmSettings for PerFedAvgSpec {
    const EXAMPLE: &'static str = "{inner_lr: 0.01}";

    type Algorithm = PerFedAvg;

    fn build(&self, _: &super::Population) -> PerFedAvg {
        PerFedAvg { spec: self.clone() }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        crate::settings::FieldError::positive("inner_lr", self.inner_lr)
    }
}

#[derive(Clone, Debug)]
pub struct PerFedAvg {
    pub spec: PerFedAvgSpec,
}

/// The plan with twice the minibatches when it counts steps (one pair per step).
fn paired(plan: &LocalPlan) -> LocalPlan {
    let work = match plan.work {
        LocalWork::Steps(s) => LocalWork::Steps(2 * s),
        epochs => epochs,
    };
    LocalPlan { work, ..*plan }
}

/// What a Per-FedAvg client works on during an update (nothing is kept between rounds): its copy
/// w of the global model, and the trial step w̃ between the two minibatches of a pair.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PerFedAvgClient {
    pub global_copy: Vec<f32>,
    pub trial: Option<Vec<f32>>,
}

impl super::Finite for PerFedAvgClient {
    fn is_finite(&self) -> bool {
        self.global_copy.is_finite() && self.trial.as_ref().is_none_or(|t| t.is_finite())
    }
}

impl crate::io::Floats for PerFedAvgClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        std::iter::once(&mut self.global_copy)
            .chain(self.trial.as_mut())
            .collect()
    }
}

impl Algorithm for PerFedAvg {
    /// A copy of the global model.
    const CLIENT_MODELS: usize = 1;

    type Global = Vec<f32>;
    type ClientState = PerFedAvgClient;
    type Update = ModelUpdate;

    one_global_model!();

    fn init_client(&self, _: &Vec<f32>, _: u32) -> PerFedAvgClient {
        PerFedAvgClient::default()
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        paired(plan).samples_processed(n_train)
    }

    /// Minibatches in pairs: the first makes the trial step, the second moves w.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Batchwise(BatchwiseUpdate {
        plan: |_, plan| paired(plan),
        begin: |_, _, global, client| {
            client.global_copy = global.clone();
            client.trial = None;
        },
        step: Self::step,
        finish: |_, ctx, _, client| {
            client.trial = None;
            ModelUpdate::of(ctx, std::mem::take(&mut client.global_copy))
        },
    });

    model_update_aggregation!();

    fn tested_models<'a>(
        &'a self,
        ctx: &LocalContext<'_>,
        global: &'a Vec<f32>,
        _: &'a PerFedAvgClient,
        rng: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        let one_step = LocalPlan {
            work: LocalWork::Steps(1),
            ..ctx.training.plan
        };
        let mut adapted = global.clone();
        for_each_batch(ctx.arch, ctx.train_view(), &one_step, rng, |batch| {
            descend(&mut adapted, self.spec.inner_lr, &batch.gradient(global))
        });
        vec![Tested::params(ModelKind::Personalized, adapted)]
    }
}

impl PerFedAvg {
    /// The first minibatch of a pair: w̃ = w − α·∇f(w; D); the second: w ← w − β·∇f(w̃; D').
    fn step(&self, clients: &mut [BatchwiseClient<'_, Self>], batch: &dyn Gradients) {
        let points: Vec<&[f32]> = clients
            .iter()
            .map(|c| c.state.trial.as_deref().unwrap_or(&c.state.global_copy))
            .collect();
        let gradients = batch.gradients(&points);
        for (c, gradient) in clients.iter_mut().zip(gradients) {
            let PerFedAvgClient { global_copy, trial } = &mut *c.state;
            match trial.take() {
                None => {
                    let mut t = global_copy.clone();
                    descend(&mut t, self.spec.inner_lr, &gradient);
                    *trial = Some(t);
                }
                Some(_) => descend(global_copy, c.lr, &gradient),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{close, Kit};
    use rand::SeedableRng;

    #[test]
    fn one_pair_by_hand() {
        // One row x = 1, y = 1 (both minibatches are that row); w = (0, 0); α = 1, β = 0.1.
        // Trial: w̃ = 0 − 1·(σ(0) − 1) = ½ per coordinate; update: w = 0 − 0.1·(σ(1) − 1).
        let kit = Kit::binary(&[(&[1.0], 1)], 1, 0.1);
        let alg = PerFedAvg {
            spec: PerFedAvgSpec { inner_lr: 1.0 },
        };
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let mut client = PerFedAvgClient::default();
        let up = alg.local_update(&kit.ctx(), &vec![0.0, 0.0], &mut client, &mut rng);
        assert!(client.global_copy.is_empty() && client.trial.is_none());
        let want = (-0.1 * (1.0 / (1.0 + (-1.0f64).exp()) - 1.0)) as f32;
        assert!(
            close(&up.params, &[want, want], 1e-6),
            "{:?} vs {want}",
            up.params
        );
    }
}
