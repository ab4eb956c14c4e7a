//! APFL (Deng et al. 2020, Adaptive Personalized Federated Learning). Each client keeps a local
//! model v and a mixing weight α; its personalized model is v̄ = α·v + (1 − α)·w. On every
//! minibatch a client updates, all from the same point, the global model's local copy
//! w ← w − η·∇f(w) and its own v ← v − η·α·∇f(v̄); with `adaptive`, also
//! α ← α − η_α·⟨v − w, ∇f(v̄)⟩, kept in [0, 1]. The server averages the w's (weights n_t).
//! Clients are evaluated with α·v + (1 − α)·w_global. Plain SGD: momentum is not used.

use super::LocalUpdate;
use super::{
    descend, Algorithm, BatchwiseClient, BatchwiseUpdate, Gradients, LocalContext, Tested,
};
use crate::algorithms::fedavg::{model_update_aggregation, ModelUpdate};
use crate::models::LocalPlan;
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        if !(0.0..=1.0).contains(&self.alpha) {
            return Err(crate::settings::FieldError::new(
                "alpha".into(),
                format!("must be in [0, 1], got {}", self.alpha),
            ));
        }
        match self.alpha_lr {
            Some(lr) => crate::settings::FieldError::positive("alpha_lr", lr),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Apfl {
    pub spec: ApflSpec,
}

/// The client's local model v (empty until it first trains) and its α; during an update only,
/// its copy w of the global model.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ApflClient {
    pub local: Vec<f32>,
    pub alpha: f64,
    pub global_copy: Vec<f32>,
}

impl super::Finite for ApflClient {
    fn is_finite(&self) -> bool {
        self.local.is_finite() && self.alpha.is_finite() && self.global_copy.is_finite()
    }
}

impl crate::io::Floats for ApflClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.local, &mut self.global_copy]
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
    /// The local model and a copy of the global one.
    const CLIENT_MODELS: usize = 2;

    type Global = Vec<f32>;
    type ClientState = ApflClient;
    type Update = ModelUpdate;

    one_global_model!();

    fn init_client(&self, _: &Vec<f32>, _: u32) -> ApflClient {
        ApflClient {
            local: Vec::new(),
            alpha: self.spec.alpha,
            global_copy: Vec::new(),
        }
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    /// Two gradients per minibatch: at w and at v̄.
    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        2 * plan.samples_processed(n_train)
    }

    /// w starts from the global model and v from the client's last one (the global model at
    /// first); each minibatch moves both, and α.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Batchwise(BatchwiseUpdate {
        plan: |_, plan| *plan,
        begin: |_, _, global, client| {
            client.global_copy = global.clone();
            if client.local.is_empty() {
                client.local = global.clone();
            }
        },
        step: Self::step,
        finish: |_, ctx, _, client| ModelUpdate::of(ctx, std::mem::take(&mut client.global_copy)),
    });

    model_update_aggregation!();

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a Vec<f32>,
        state: &'a ApflClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        let personal = if state.local.is_empty() {
            global.clone()
        } else {
            mix(state.alpha, &state.local, global)
        };
        vec![Tested::params(ModelKind::Personalized, personal)]
    }
}

impl Apfl {
    /// One minibatch, every move from the same point: w ← w − η·∇f(w), v ← v − η·α·∇f(v̄), and
    /// with `adaptive` α ← α − η_α·⟨v − w, ∇f(v̄)⟩ in [0, 1].
    fn step(&self, clients: &mut [BatchwiseClient<'_, Self>], batch: &dyn Gradients) {
        let ws: Vec<&[f32]> = clients.iter().map(|c| &c.state.global_copy[..]).collect();
        let grads_w = batch.gradients(&ws);
        let mixed: Vec<Vec<f32>> = clients
            .iter()
            .map(|c| mix(c.state.alpha, &c.state.local, &c.state.global_copy))
            .collect();
        let mixed: Vec<&[f32]> = mixed.iter().map(|m| &m[..]).collect();
        let grads_mixed = batch.gradients(&mixed);
        for ((c, grad_w), grad_mixed) in clients.iter_mut().zip(grads_w).zip(grads_mixed) {
            let lr = c.lr;
            let alpha_lr = self.spec.alpha_lr.unwrap_or(lr);
            let ApflClient {
                local: v,
                alpha,
                global_copy: w,
            } = &mut *c.state;
            let grad_v: Vec<f32> = grad_mixed.iter().map(|g| g * *alpha as f32).collect();
            if self.spec.adaptive {
                let slope: f64 = v
                    .iter()
                    .zip(w.iter())
                    .zip(&grad_mixed)
                    .map(|((vi, wi), g)| ((vi - wi) * g) as f64)
                    .sum();
                *alpha = (*alpha - alpha_lr * slope).clamp(0.0, 1.0);
            }
            descend(v, lr, &grad_v);
            descend(w, lr, &grad_w);
        }
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
            global_copy: Vec::new(),
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
