//! AFL (Mohri et al. 2019, "Agnostic Federated Learning"): the model that does best for the
//! worst mixture of the clients, min_w max_λ Σ_k λ_k·F_k(w) over λ in the simplex, by
//! stochastic gradient descent on w and projected ascent on λ, as the authors' baseline in
//! the q-FFL code runs it.
//!
//! Each round, every sampled client k measures F_k(w), its mean training loss at the server's
//! model (in a cohort, in an E-step's stacked forward passes), and runs local SGD from w (one
//! step in the paper: its gradient). The server then
//! - moves w to the λ-weighted mean of the trained models, Σ λ_k·w̄_k / Σ λ_k (one local step:
//!   w − η·Σ λ_k g_k / Σ λ_k),
//! - moves each sampled client's weight by λ_k ← λ_k + γ_λ·F_k(w) and projects λ back onto the
//!   simplex of the participants (Wang & Carreira-Perpiñán 2013), from λ = 1/m,
//! - and averages the iterates: w̃ ← w̃ + (w − w̃)/t after t rounds.
//!
//! Clients are tested with the averaged model w̃, whose guarantee the paper gives; each
//! evaluated client reports its λ_k as the extra `afl_weight` (`extras.parquet`).

use super::{
    Algorithm, ClientReport, LocalContext, LocalUpdate, SentRuns, SgdRun, SgdUpdate, Summed,
    Tested, WeightedSum,
};
use crate::models::{Architecture, InitialModels};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AflSpec {
    /// γ_λ, the step of the mixture weights' ascent (the q-FFL code uses 0.01 and 0.1).
    pub lambda_lr: f64,
}

impl super::AlgorithmSettings for AflSpec {
    const EXAMPLE: &'static str = "{lambda_lr: 0.01}";

    type Algorithm = Afl;

    fn build(&self, population: &super::Population) -> Afl {
        Afl {
            lambda_lr: self.lambda_lr,
            clients: population.clients,
            unseen: population.unseen.clone(),
        }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        crate::settings::FieldError::positive("lambda_lr", self.lambda_lr)
    }
}

#[derive(Clone, Debug)]
pub struct Afl {
    pub lambda_lr: f64,
    /// All clients, held-out ones included.
    pub clients: usize,
    /// The held-out clients, sorted: their λ stays 0.
    pub unseen: Vec<u32>,
}

/// The server's iterate w, the average w̃ of the iterates so far, how many (t), and the mixture
/// weights λ, one per client (0 for held-out ones).
#[derive(Clone, Debug)]
pub struct AflGlobal {
    pub model: Vec<f32>,
    pub average: Vec<f32>,
    pub iterates: u64,
    pub lambdas: Vec<f64>,
}

impl super::Finite for AflGlobal {
    fn is_finite(&self) -> bool {
        self.model.is_finite() && self.average.is_finite() && self.lambdas.is_finite()
    }
}

/// A client's trained model with its λ_k (as it received it) and F_k(w).
pub struct AflUpdate {
    pub params: Vec<f32>,
    pub client: u32,
    pub lambda: f64,
    pub loss: f64,
}

impl super::Finite for AflUpdate {
    fn is_finite(&self) -> bool {
        self.params.is_finite() && self.lambda.is_finite() && self.loss.is_finite()
    }
}

impl crate::io::Floats for AflUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.params]
    }
}

/// The Euclidean projection of `y` onto the simplex {x ≥ 0, Σ x = 1} (Wang & Carreira-Perpiñán
/// 2013, Algorithm 1): with u the values sorted down, ρ the largest j with
/// u_j + (1 − Σ_{i≤j} u_i)/j > 0 and τ = (1 − Σ_{i≤ρ} u_i)/ρ, x_i = max(y_i + τ, 0). (The
/// q-FFL code leaves u_j out of the sum in the test, which can leave points off the simplex.)
pub fn project_onto_simplex(y: &[f64]) -> Vec<f64> {
    let mut u = y.to_vec();
    u.sort_by(|a, b| b.total_cmp(a));
    let (mut rho, mut prefix, mut kept) = (0, 0.0, 0.0);
    for (i, &v) in u.iter().enumerate() {
        prefix += v;
        if v + (1.0 - prefix) / (i + 1) as f64 > 0.0 {
            rho = i + 1;
            kept = prefix;
        }
    }
    let tau = (1.0 - kept) / rho.max(1) as f64;
    y.iter().map(|&v| (v + tau).max(0.0)).collect()
}

impl Algorithm for Afl {
    type Global = AflGlobal;
    /// The momentum buffer (empty unless momentum is kept across rounds).
    type ClientState = Vec<f32>;
    type Update = AflUpdate;

    fn init_global(
        &self,
        _: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> AflGlobal {
        let model = init.model();
        let participants = (self.clients - self.unseen.len()).max(1) as f64;
        let lambdas = (0..self.clients as u32)
            .map(|c| match self.unseen.binary_search(&c) {
                Ok(_) => 0.0,
                Err(_) => 1.0 / participants,
            })
            .collect();
        AflGlobal {
            average: model.clone(),
            model,
            iterates: 0,
            lambdas,
        }
    }

    fn init_client(&self, _: &AflGlobal, _: u32) -> Vec<f32> {
        Vec::new()
    }

    /// The averaged model w̃, which clients are tested with.
    fn models(&self, global: &AflGlobal) -> Vec<Vec<f32>> {
        vec![global.average.clone()]
    }

    /// Only w travels.
    fn broadcast_len(&self, global: &AflGlobal) -> usize {
        global.model.len()
    }

    fn update_len(&self, update: &AflUpdate) -> usize {
        update.params.len()
    }

    /// F_k(w) from the training rows' losses under w; one run from w with the client's
    /// momentum.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: Some(|global| vec![&global.model[..]]),
        begin: |_, _, global, momentum, _| {
            vec![SgdRun {
                params: Cow::Borrowed(&global.model),
                momentum: std::mem::take(momentum),
                ..SgdRun::default()
            }]
        },
        finish: |_, ctx, global, momentum, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            *momentum = run.momentum;
            AflUpdate {
                params: run.params.into_owned(),
                client: ctx.client,
                lambda: global.lambdas[ctx.client as usize],
                loss: ctx.mean_train_loss(&global.model),
            }
        },
        sends: SentRuns::All,
        keeps: None,
    });

    /// w ← Σ λ_k·w̄_k / Σ λ_k summed in client order; λ_k ← λ_k + γ_λ·F_k for the round's
    /// clients, then projected onto the participants' simplex; w̃ ← w̃ + (w − w̃)/t. A round
    /// whose clients all weigh 0 leaves w as it is.
    const SUMMED: Option<Summed<Self>> = Some(Summed {
        weight: |update, _| update.lambda,
        finish: |alg, global, sums, updates| {
            let [sum] = <[WeightedSum; 1]>::try_from(sums).expect("one vector");
            let model = match sum.total() > 0.0 {
                true => sum.average(),
                false => global.model.clone(),
            };
            let mut lambdas = global.lambdas.clone();
            for u in &updates {
                lambdas[u.client as usize] += alg.lambda_lr * u.loss;
            }
            let seen: Vec<usize> = (0..alg.clients)
                .filter(|&c| alg.unseen.binary_search(&(c as u32)).is_err())
                .collect();
            let projected =
                project_onto_simplex(&seen.iter().map(|&c| lambdas[c]).collect::<Vec<_>>());
            for (&c, l) in seen.iter().zip(projected) {
                lambdas[c] = l;
            }
            let iterates = global.iterates + 1;
            let average = (global.average.iter().zip(&model))
                .map(|(&a, &w)| (a as f64 + (w as f64 - a as f64) / iterates as f64) as f32)
                .collect();
            AflGlobal {
                model,
                average,
                iterates,
                lambdas,
            }
        },
    });

    fn aggregate(&self, global: &AflGlobal, updates: super::Updates<AflUpdate>) -> AflGlobal {
        super::summed_aggregate(self, global, updates)
    }

    /// λ_k as `afl_weight`.
    fn report(&self, global: &AflGlobal, _: &Vec<f32>, client: u32) -> ClientReport {
        ClientReport {
            extras: vec![("afl_weight".into(), vec![global.lambdas[client as usize]])],
            ..ClientReport::default()
        }
    }

    /// Novelty is scored by the averaged model's confidence maxᵧ p(y | x).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> =
        Some(|_, global, _| &global.average);

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a AflGlobal,
        _: &'a Vec<f32>,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested::params(ModelKind::Global, &global.average[..])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projections_onto_the_simplex_by_hand() {
        // Already on it: unchanged.
        assert_eq!(project_onto_simplex(&[0.25, 0.75]), [0.25, 0.75]);
        // (0.5, 0.5, 0.5): τ = −1/6, each 1/3.
        let p = project_onto_simplex(&[0.5, 0.5, 0.5]);
        assert!(p.iter().all(|&x| (x - 1.0 / 3.0).abs() < 1e-12), "{p:?}");
        // (1, 0.1, 0): 1 + (1 − 1)/1 > 0 and 0.1 + (1 − 1.1)/2 > 0, but 0 + (1 − 1.1)/3 < 0,
        // so ρ = 2 and τ = (1 − 1.1)/2 = −0.05: (0.95, 0.05, 0).
        let p = project_onto_simplex(&[1.0, 0.1, 0.0]);
        for (a, b) in p.iter().zip([0.95, 0.05, 0.0]) {
            assert!((a - b).abs() < 1e-12, "{p:?}");
        }
        // (2, 0.6): 0.6 + (1 − 2.6)/2 < 0, so ρ = 1 and τ = −1: (1, 0). Leaving 0.6 out of the
        // sum (0.6 + (1 − 2)/2 > 0) would give ρ = 2 and (1.2, 0), off the simplex.
        assert_eq!(project_onto_simplex(&[2.0, 0.6]), [1.0, 0.0]);
    }

    /// Three clients, the third held out; a round of clients 0 and 1 with losses 2 and 1 at
    /// γ_λ = 0.1 from λ = (1/2, 1/2, 0): λ = (0.7, 0.6) projected, τ = −0.15, so (0.55, 0.45,
    /// 0). The model moves to the λ-weighted mean of the trained ones (as received: 1/2 each),
    /// and the average of the iterates is that model after one round.
    #[test]
    fn a_round_by_hand() {
        let afl = Afl {
            lambda_lr: 0.1,
            clients: 3,
            unseen: vec![2],
        };
        let global = AflGlobal {
            model: vec![0.0],
            average: vec![0.0],
            iterates: 0,
            lambdas: vec![0.5, 0.5, 0.0],
        };
        let update = |client: u32, w: f32, loss: f64| AflUpdate {
            params: vec![w],
            client,
            lambda: global.lambdas[client as usize],
            loss,
        };
        let updates = vec![(0, update(0, 1.0, 2.0)), (1, update(1, 3.0, 1.0))];
        let next = afl.aggregate(&global, super::super::Updates::from(updates));
        assert_eq!(next.model, [2.0]);
        assert_eq!(next.average, [2.0]);
        for (a, b) in next.lambdas.iter().zip([0.55, 0.45, 0.0]) {
            assert!((a - b).abs() < 1e-12, "{:?}", next.lambdas);
        }
    }
}
