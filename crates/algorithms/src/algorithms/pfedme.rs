//! pFedMe (Dinh et al. 2020, Algorithm 1): personalization with Moreau envelopes.
//!
//! Every round the server sends w; every client (sampled or not, as Algorithm 1 has it) sets its
//! local model w_i = w and runs R local rounds. Each takes a minibatch D and approximately
//! solves the personal problem min_θ f(θ; D) + (λ/2)‖θ − w_i‖² with K gradient steps
//! θ ← θ − η_p·(∇f(θ; D) + λ(θ − w_i)), then moves w_i ← w_i − η·λ·(w_i − θ). The server
//! samples S clients and sets w ← (1 − β)·w + β·(mean of their w_i). A client's personalized
//! model (PM) is its last θ; the global model (GM) is w. Both are evaluated.
//!
//! Settings: R = `training.local_steps`, |D| = `training.batch_size`, η = `training.lr` (and
//! its schedule), S = `sampling`; λ, K, η_p and β here. Plain SGD: momentum is not used.

use super::LocalUpdate;
use super::{
    descend, Algorithm, BatchwiseClient, BatchwiseUpdate, Gradients, LocalContext, Tested, Updates,
    WeightedSum,
};
use crate::models::LocalPlan;
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PFedMeSpec {
    /// λ, the weight of (λ/2)‖θ − w‖² (the paper: 15 on MNIST, 20 on Synthetic with MLR).
    #[serde(default = "d_lambda")]
    pub lambda: f64,
    /// K, gradient steps on θ per minibatch.
    #[serde(default = "d_inner_steps")]
    pub inner_steps: u32,
    /// η_p, the personal learning rate of those steps.
    #[serde(default = "d_personal_lr")]
    pub personal_lr: f64,
    /// β, the server's step: w ← (1 − β)·w + β·mean(w_i). β = 1 is plain averaging.
    #[serde(default = "d_beta")]
    pub beta: f64,
    /// Every client trains each round and only the sampled ones are aggregated (Algorithm 1);
    /// `false`: only the sampled clients train (cheaper; their θ is then as old as their last
    /// round).
    #[serde(default = "d_true")]
    pub all_clients_train: bool,
}

fn d_lambda() -> f64 {
    15.0
}
fn d_inner_steps() -> u32 {
    5
}
fn d_personal_lr() -> f64 {
    0.01
}
fn d_beta() -> f64 {
    1.0
}
fn d_true() -> bool {
    true
}

impl super::AlgorithmSettings for PFedMeSpec {
    type Algorithm = PFedMe;

    fn build(&self, _: &super::Population) -> PFedMe {
        PFedMe { spec: self.clone() }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        use crate::settings::FieldError;
        FieldError::positive("lambda", self.lambda)?;
        FieldError::positive("personal_lr", self.personal_lr)?;
        FieldError::positive("beta", self.beta)?;
        FieldError::at_least_one("inner_steps", self.inner_steps as usize)
    }
}

#[derive(Clone, Debug)]
pub struct PFedMe {
    pub spec: PFedMeSpec,
}

/// What a pFedMe client keeps: θ, its personalized model of its last round (empty before it
/// first trains); and, during an update only, its local model w_i.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PFedMeClient {
    pub theta: Vec<f32>,
    pub local: Vec<f32>,
}

impl super::Finite for PFedMeClient {
    fn is_finite(&self) -> bool {
        self.theta.is_finite() && self.local.is_finite()
    }
}

impl crate::io::Floats for PFedMeClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.theta, &mut self.local]
    }
}

impl Algorithm for PFedMe {
    /// The personalized model θ.
    const CLIENT_MODELS: usize = 1;

    type Global = Vec<f32>;
    type ClientState = PFedMeClient;
    /// The local model w_i after R local rounds.
    type Update = Vec<f32>;

    one_global_model!();

    fn init_client(&self, _: &Vec<f32>, _: u32) -> PFedMeClient {
        PFedMeClient::default()
    }

    fn update_len(&self, update: &Vec<f32>) -> usize {
        update.len()
    }

    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        self.spec.inner_steps as u64 * plan.samples_processed(n_train)
    }

    fn trains_unsampled(&self) -> bool {
        self.spec.all_clients_train
    }

    /// θ and w_i start from w; each minibatch, K steps on θ then one on w_i.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Batchwise(BatchwiseUpdate {
        plan: |_, plan| *plan,
        begin: |_, _, global, client| {
            client.theta = global.clone();
            client.local = global.clone();
        },
        step: Self::step,
        finish: |_, _, _, client| std::mem::take(&mut client.local),
    });

    fn aggregate(&self, global: &Vec<f32>, updates: Updates<Vec<f32>>) -> Vec<f32> {
        let mut sum = WeightedSum::default();
        updates.for_each(|_, w| sum.add(1.0, w));
        let mean = sum.average();
        let beta = self.spec.beta;
        global
            .iter()
            .zip(&mean)
            .map(|(&g, &m)| ((1.0 - beta) * g as f64 + beta * m as f64) as f32)
            .collect()
    }

    /// A newcomer runs one round of local personalization (R local rounds from w) and is tested
    /// with the θ it reaches (and with w).
    fn adapt_unseen(
        &self,
        ctx: &LocalContext<'_>,
        global: &Vec<f32>,
        rng: &mut ChaCha20Rng,
    ) -> PFedMeClient {
        let mut client = PFedMeClient::default();
        self.local_update(ctx, global, &mut client, rng);
        client
    }

    /// Novelty is scored by the personalized model's confidence maxᵧ p(y | x) (the global
    /// one's before the client has trained).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> =
        Some(|_, global, client| personal(global, client));

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a Vec<f32>,
        client: &'a PFedMeClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![
            Tested::params(ModelKind::Global, &global[..]),
            Tested::params(ModelKind::Personalized, personal(global, client)),
        ]
    }
}

/// The client's personalized model θ_i, or the global one before the client has trained.
fn personal<'a>(global: &'a [f32], client: &'a PFedMeClient) -> &'a [f32] {
    if client.theta.is_empty() {
        global
    } else {
        &client.theta
    }
}

impl PFedMe {
    /// One minibatch: K steps θ ← θ − η_p·(∇f(θ; D) + λ(θ − w_i)), then w_i ← w_i − η·λ·(w_i − θ).
    fn step(&self, clients: &mut [BatchwiseClient<'_, Self>], batch: &dyn Gradients) {
        let (lambda, eta_p) = (self.spec.lambda as f32, self.spec.personal_lr);
        for _ in 0..self.spec.inner_steps {
            let thetas: Vec<&[f32]> = clients.iter().map(|c| &c.state.theta[..]).collect();
            let gradients = batch.gradients(&thetas);
            for (c, mut direction) in clients.iter_mut().zip(gradients) {
                let PFedMeClient { theta, local } = &mut *c.state;
                direction
                    .iter_mut()
                    .zip(theta.iter().zip(local.iter()))
                    .for_each(|(d, (t, wi))| *d += lambda * (t - wi));
                descend(theta, eta_p, &direction);
            }
        }
        for c in clients {
            let PFedMeClient { theta, local } = &mut *c.state;
            let pull: Vec<f32> = local
                .iter()
                .zip(theta.iter())
                .map(|(wi, t)| lambda * (wi - t))
                .collect();
            descend(local, c.lr, &pull);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::testkit::{close, Kit};
    use rand::SeedableRng;

    #[test]
    fn one_local_round_by_hand() {
        // One row x = 1, y = 1, a 1-d logistic model (w, b) = (0, 0): ∇f = (σ(0) − 1)·(x, 1)
        // = (−½, −½). λ = 1, K = 1, η_p = 0.1: θ = 0 − 0.1·(−½ + 0) = 0.05 per coordinate.
        // Then η = 0.1: w = 0 − 0.1·1·(0 − 0.05) = 0.005.
        let kit = Kit::binary(&[(&[1.0], 1)], 1, 0.1);
        let alg = PFedMe {
            spec: PFedMeSpec {
                lambda: 1.0,
                inner_steps: 1,
                personal_lr: 0.1,
                beta: 1.0,
                all_clients_train: true,
            },
        };
        let mut client = PFedMeClient::default();
        let mut rng = ChaCha20Rng::seed_from_u64(0);
        let w = alg.local_update(&kit.ctx(), &vec![0.0, 0.0], &mut client, &mut rng);
        let theta = &client.theta;
        assert!(close(theta, &[0.05, 0.05], 1e-7), "{theta:?}");
        assert!(client.local.is_empty(), "w_i is not kept");
        assert!(close(&w, &[0.005, 0.005], 1e-7), "{w:?}");
        // K = 2: the second step sees θ = 0.05: ∇f = σ(0.1) − 1 per coordinate, plus λ·0.05.
        let alg2 = PFedMe {
            spec: PFedMeSpec {
                inner_steps: 2,
                ..alg.spec.clone()
            },
        };
        alg2.local_update(&kit.ctx(), &vec![0.0, 0.0], &mut client, &mut rng);
        let g = 1.0 / (1.0 + (-0.1f64).exp()) - 1.0 + 0.05;
        let want = (0.05 - 0.1 * g) as f32;
        let theta = &client.theta;
        assert!(close(theta, &[want, want], 1e-6), "{theta:?} vs {want}");
    }

    #[test]
    fn server_moves_by_beta_towards_the_plain_mean() {
        let alg = PFedMe {
            spec: PFedMeSpec {
                beta: 2.0,
                ..serde_yaml::from_str("{}").unwrap()
            },
        };
        // Mean of (1, 3) and (3, 5) = (2, 4); from w = (0, 0), β = 2: (4, 8). Sizes play no role.
        let w = alg.aggregate(
            &vec![0.0, 0.0],
            vec![(0, vec![1.0, 3.0]), (4, vec![3.0, 5.0])].into(),
        );
        assert_eq!(w, vec![4.0, 8.0]);
    }
}
