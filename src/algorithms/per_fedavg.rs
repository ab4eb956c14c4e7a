//! Per-FedAvg (Fallah et al. 2020), first-order version (FO-MAML). Local work takes minibatches
//! in pairs (D, D'): a trial step w̃ = w − α·∇f(w; D), then the update w ← w − β·∇f(w̃; D'),
//! so w learns to be a good starting point for one step of adaptation. The server averages the
//! w's (weights n_t). Before it is tested, a client adapts: one step of size α on a minibatch of
//! its own training data.
//!
//! β is the round's `training.lr`; α is `inner_lr`. With `local_steps: R` a client takes R
//! pairs (2R minibatches); with local epochs, consecutive minibatches of each pass are paired
//! (an odd last one is left out). Plain SGD: momentum is not used.

use super::{descend, Algorithm, Evaluation, LocalContext, ModelKind};
use crate::algorithms::fedavg::{model_update_aggregation, ModelUpdate};
use crate::models::{evaluate, for_each_batch, Architecture, LocalPlan, LocalWork};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerFedAvgSpec {
    /// α, the step size of the trial step and of the adaptation before tests (pFedMe's
    /// Table 1 uses α = 0.02 with β = 0.002 on Synthetic).
    pub inner_lr: f64,
}

impl super::AlgorithmSettings for PerFedAvgSpec {
    type Algorithm = PerFedAvg;

    fn build(&self, _: &super::Population) -> PerFedAvg {
        PerFedAvg { spec: self.clone() }
    }

    fn validate(&self) -> Result<(), crate::FieldError> {
        if !(self.inner_lr > 0.0 && self.inner_lr.is_finite()) {
            return Err(crate::FieldError::new(
                "inner_lr".into(),
                format!("must be a positive number, got {}", self.inner_lr),
            ));
        }
        Ok(())
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

impl Algorithm for PerFedAvg {
    type Global = Vec<f32>;
    type ClientState = ();
    type Update = ModelUpdate;

    fn init_global(&self, arch: &Architecture, rng: &mut ChaCha20Rng) -> Vec<f32> {
        arch.init(rng)
    }

    fn init_client(&self, _: &Vec<f32>, _: u32) {}

    fn models(&self, global: &Vec<f32>) -> Vec<Vec<f32>> {
        vec![global.clone()]
    }

    fn broadcast_len(&self, global: &Vec<f32>) -> usize {
        global.len()
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        paired(plan).samples_processed(n_train)
    }

    fn local_update(
        &self,
        ctx: &LocalContext<'_>,
        global: &Vec<f32>,
        _: &mut (),
        rng: &mut ChaCha20Rng,
    ) -> ModelUpdate {
        let mut w = global.clone();
        let mut trial: Option<Vec<f32>> = None;
        let plan = paired(&ctx.training.plan);
        for_each_batch(
            ctx.arch,
            ctx.train_view(),
            &plan,
            rng,
            |batch| match trial.take() {
                None => {
                    let mut t = w.clone();
                    descend(&mut t, self.spec.inner_lr, &batch.gradient(&w));
                    trial = Some(t);
                }
                Some(t) => descend(&mut w, ctx.lr, &batch.gradient(&t)),
            },
        );
        ModelUpdate::of(ctx, w)
    }

    model_update_aggregation!();

    fn evaluate(
        &self,
        ctx: &LocalContext<'_>,
        global: &Vec<f32>,
        _: &(),
        rng: &mut ChaCha20Rng,
    ) -> Vec<Evaluation> {
        let one_step = LocalPlan {
            work: LocalWork::Steps(1),
            ..ctx.training.plan
        };
        let mut adapted = global.clone();
        for_each_batch(ctx.arch, ctx.train_view(), &one_step, rng, |batch| {
            descend(&mut adapted, self.spec.inner_lr, &batch.gradient(global))
        });
        ctx.evaluate_splits(ModelKind::Personalized, |view| {
            evaluate(ctx.arch, &adapted, view)
        })
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
        let up = alg.local_update(&kit.ctx(), &vec![0.0, 0.0], &mut (), &mut rng);
        let want = (-0.1 * (1.0 / (1.0 + (-1.0f64).exp()) - 1.0)) as f32;
        assert!(
            close(&up.params, &[want, want], 1e-6),
            "{:?} vs {want}",
            up.params
        );
    }
}
