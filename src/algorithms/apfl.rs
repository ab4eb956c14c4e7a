//! APFL (Deng et al. 2020, Adaptive Personalized Federated Learning). Each client keeps a local
//! model v and a mixing weight α; its personalized model is v̄ = α·v + (1 − α)·w. On every
//! minibatch a client updates, all from the same point, the global model's local copy
//! w ← w − η·∇f(w) and its own v ← v − η·α·∇f(v̄); with `adaptive`, also
//! α ← α − η_α·⟨v − w, ∇f(v̄)⟩, kept in [0, 1]. The server averages the w's (weights n_t).
//! Clients are evaluated with α·v + (1 − α)·w_global. Plain SGD: momentum is not used.

use super::{descend, Algorithm, Evaluation, LocalContext, ModelKind};
use crate::algorithms::fedavg::{model_update_aggregation, ModelUpdate};
use crate::models::{evaluate, Architecture, LocalPlan};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApflSpec {
    /// The initial (or, without `adaptive`, fixed) mixing weight α of the local model.
    #[serde(default = "d_alpha")]
    pub alpha: f64,
    /// Learn α per client by gradient descent.
    #[serde(default)]
    pub adaptive: bool,
    /// Learning rate of α [default: the round's `training.lr`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha_lr: Option<f64>,
}

fn d_alpha() -> f64 {
    0.5
}

impl super::AlgorithmSettings for ApflSpec {
    type Algorithm = Apfl;

    fn build(&self, _: &super::Population) -> Apfl {
        Apfl { spec: self.clone() }
    }

    fn validate(&self) -> Result<(), crate::FieldError> {
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err(crate::FieldError::new(
                "alpha".into(),
                format!("must be in [0, 1], got {}", self.alpha),
            ));
        }
        if let Some(lr) = self.alpha_lr {
            if !(lr > 0.0 && lr.is_finite()) {
                return Err(crate::FieldError::new(
                    "alpha_lr".into(),
                    format!("must be a positive number, got {lr}"),
                ));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct Apfl {
    pub spec: ApflSpec,
}

/// The client's local model v (empty until it first trains) and its α.
#[derive(Clone, Debug)]
pub struct ApflClient {
    pub local: Vec<f32>,
    pub alpha: f64,
}

impl super::Finite for ApflClient {
    fn is_finite(&self) -> bool {
        self.local.is_finite() && self.alpha.is_finite()
    }
}

/// α·v + (1 − α)·w.
fn mix(alpha: f64, v: &[f32], w: &[f32]) -> Vec<f32> {
    let a = alpha as f32;
    v.iter()
        .zip(w)
        .map(|(vi, wi)| a * vi + (1.0 - a) * wi)
        .collect()
}

impl Algorithm for Apfl {
    type Global = Vec<f32>;
    type ClientState = ApflClient;
    type Update = ModelUpdate;

    fn init_global(&self, arch: &Architecture, rng: &mut ChaCha20Rng) -> Vec<f32> {
        arch.init(rng)
    }

    fn init_client(&self, _: &Vec<f32>, _: u32) -> ApflClient {
        ApflClient {
            local: Vec::new(),
            alpha: self.spec.alpha,
        }
    }

    fn models(&self, global: &Vec<f32>) -> Vec<Vec<f32>> {
        vec![global.clone()]
    }

    fn broadcast_len(&self, global: &Vec<f32>) -> usize {
        global.len()
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    /// Two gradients per minibatch: at w and at v̄.
    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        2 * plan.samples_processed(n_train)
    }

    fn local_update(
        &self,
        ctx: &LocalContext<'_>,
        global: &Vec<f32>,
        state: &mut ApflClient,
        rng: &mut ChaCha20Rng,
    ) -> ModelUpdate {
        let mut w = global.clone();
        if state.local.is_empty() {
            state.local = global.clone();
        }
        let lr = ctx.lr;
        let alpha_lr = self.spec.alpha_lr.unwrap_or(lr);
        let (v, alpha) = (&mut state.local, &mut state.alpha);
        ctx.for_each_batch(rng, |batch| {
            let grad_w = batch.gradient(&w);
            let grad_mixed = batch.gradient(&mix(*alpha, v, &w));
            let grad_v: Vec<f32> = grad_mixed.iter().map(|g| g * *alpha as f32).collect();
            if self.spec.adaptive {
                let slope: f64 = v
                    .iter()
                    .zip(&w)
                    .zip(&grad_mixed)
                    .map(|((vi, wi), g)| ((vi - wi) * g) as f64)
                    .sum();
                *alpha = (*alpha - alpha_lr * slope).clamp(0.0, 1.0);
            }
            descend(v, lr, &grad_v);
            descend(&mut w, lr, &grad_w);
        });
        ModelUpdate::of(ctx, w)
    }

    model_update_aggregation!();

    fn evaluate(
        &self,
        ctx: &LocalContext<'_>,
        global: &Vec<f32>,
        state: &ApflClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Evaluation> {
        let personal = if state.local.is_empty() {
            global.clone()
        } else {
            mix(state.alpha, &state.local, global)
        };
        ctx.evaluate_splits(ModelKind::Personalized, |view| {
            evaluate(ctx.arch, &personal, view)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{close, Kit};
    use rand::SeedableRng;

    #[test]
    fn one_step_by_hand() {
        // One row x = 1, y = 1. w = (0, 0), v = (2, 2), α = 0.5: v̄ = (1, 1).
        // ∇f(w) = (σ(0) − 1)(1, 1) = −½; ∇f(v̄) = σ(2) − 1 =: g. lr 0.1:
        // w = 0.05; v = 2 − 0.1·0.5·g; adaptive α = 0.5 − 0.1·⟨v − w, ∇f(v̄)⟩ = 0.5 − 0.1·(2g + 2g).
        let kit = Kit::binary(&[(&[1.0], 1)], 1, 0.1);
        let alg = Apfl {
            spec: ApflSpec {
                alpha: 0.5,
                adaptive: true,
                alpha_lr: None,
            },
        };
        let mut state = ApflClient {
            local: vec![2.0, 2.0],
            alpha: 0.5,
        };
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let up = alg.local_update(&kit.ctx(), &vec![0.0, 0.0], &mut state, &mut rng);
        let g = 1.0 / (1.0 + (-2.0f64).exp()) - 1.0;
        let alpha = 0.5 - 0.1 * (4.0 * g);
        assert!(
            (state.alpha - alpha).abs() < 1e-6,
            "{} vs {alpha}",
            state.alpha
        );
        let v = (2.0 - 0.1 * 0.5 * g) as f32;
        assert!(
            close(&state.local, &[v, v], 1e-6),
            "{:?} vs {v}",
            state.local
        );
        assert!(close(&up.params, &[0.05, 0.05], 1e-7), "{:?}", up.params);
    }
}
