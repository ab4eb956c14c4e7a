//! SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated
//! Learning", Algorithm 1): control variates correct each client's drift.
//!
//! The server holds the model x and its control variate c, and sends both. Client i keeps its
//! own c_i (0 before it first trains) and runs local SGD from x with every step's gradient
//! corrected by c − c_i: y ← y − η_l·(g_i(y) − c_i + c). Its new control variate c_i⁺ is
//! - Option I: g_i(x), the gradient of its loss at x over all its training rows (an extra pass,
//!   without dropout), or
//! - Option II (the default; the paper's experiments): c_i − c + (x − y)/(K·η_l), K its local
//!   steps.
//!
//! The paper's local solver is plain SGD. With `training.momentum` ρ, Option II divides by the
//! steps' L1 weight instead of K (`LocalPlan::steps_weight`, FedNova's a_i: the change is
//! −η_l times that weight times the mean corrected direction), and each round's run starts
//! from zero momentum, whatever `training.keep_momentum` says, so that the weight is exact.
//!
//! It sends y and Δc_i = c_i⁺ − c_i. The server moves to the mean of the y (each client
//! counting the same), x ← x + mean Δy, and c ← c + (1/N)·Σ Δc_i over the N participants. The
//! paper's global rate η_g is a server optimizer: `server_optimizer: {kind: sgd, lr: η_g}`.
//! Clients are tested with x.

use super::{
    Algorithm, LocalContext, LocalUpdate, SentRuns, SgdRun, SgdUpdate, Summed, Tested, WeightedSum,
};
use crate::models::{Architecture, InitialModels};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScaffoldSpec {
    /// How a client's control variate is updated: 1 (Option I, its full gradient at the
    /// server's model) or 2 (Option II, from its local change).
    #[serde(default = "default_option")]
    pub option: u8,
}

fn default_option() -> u8 {
    2
}

impl super::AlgorithmSettings for ScaffoldSpec {
    const EXAMPLE: &'static str = "{option: 2}";

    type Algorithm = Scaffold;

    fn build(&self, population: &super::Population) -> Scaffold {
        Scaffold {
            full_gradient: self.option == 1,
            participants: (population.clients - population.unseen.len()).max(1) as f64,
        }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        match self.option {
            1 | 2 => Ok(()),
            other => Err(crate::settings::FieldError::new(
                "option".into(),
                format!(
                    "must be 1 (Option I: c_i from the client's full gradient at the server's \
                     model) or 2 (Option II: from its local change), got {other}"
                ),
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Scaffold {
    /// Option I (else Option II).
    pub full_gradient: bool,
    /// N, the clients that take part (the held-out ones left out).
    pub participants: f64,
}

/// The server's model x and control variate c.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ScaffoldGlobal {
    pub model: Vec<f32>,
    pub control: Vec<f32>,
}

impl super::Finite for ScaffoldGlobal {
    fn is_finite(&self) -> bool {
        self.model.is_finite() && self.control.is_finite()
    }
}

/// A client's control variate c_i (empty until it first trains: 0).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ScaffoldClient {
    pub control: Vec<f32>,
}

impl super::Finite for ScaffoldClient {
    fn is_finite(&self) -> bool {
        self.control.is_finite()
    }
}

impl crate::io::Floats for ScaffoldClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.control]
    }
}

/// The trained model y and the change Δc_i of the client's control variate.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct ScaffoldUpdate {
    pub params: Vec<f32>,
    pub control_change: Vec<f32>,
}

impl super::Finite for ScaffoldUpdate {
    fn is_finite(&self) -> bool {
        self.params.is_finite() && self.control_change.is_finite()
    }
}

impl crate::io::Floats for ScaffoldUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.params, &mut self.control_change]
    }
}

/// c_i (0 where `own` is empty), coordinate `j` of a vector of `len`.
fn own_at(own: &[f32], j: usize) -> f64 {
    own.get(j).copied().unwrap_or(0.0) as f64
}

/// Option II: c_i⁺ = c_i − c + (x − y)/(K·η_l), coordinate by coordinate in f64 (c_i = 0 where
/// `own` is empty), K the steps' weight (their number without momentum); c_i itself after no
/// step.
pub fn control_from_change(
    own: &[f32],
    control: &[f32],
    model: &[f32],
    trained: &[f32],
    steps: f64,
    lr: f64,
) -> Vec<f32> {
    let scale = steps * lr;
    (0..model.len())
        .map(|j| match steps {
            0.0 => own_at(own, j) as f32,
            _ => {
                let moved = (model[j] as f64 - trained[j] as f64) / scale;
                (own_at(own, j) - control[j] as f64 + moved) as f32
            }
        })
        .collect()
}

impl Algorithm for Scaffold {
    /// c_i.
    const CLIENT_MODELS: usize = 1;

    type Global = ScaffoldGlobal;
    type ClientState = ScaffoldClient;
    type Update = ScaffoldUpdate;

    fn init_global(
        &self,
        _: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> ScaffoldGlobal {
        let model = init.model();
        let control = vec![0.0; model.len()];
        ScaffoldGlobal { model, control }
    }

    fn init_client(&self, _: &ScaffoldGlobal, _: u32) -> ScaffoldClient {
        ScaffoldClient::default()
    }

    fn models(&self, global: &ScaffoldGlobal) -> Vec<Vec<f32>> {
        vec![global.model.clone()]
    }

    /// x and c.
    fn broadcast_len(&self, global: &ScaffoldGlobal) -> usize {
        global.model.len() + global.control.len()
    }

    /// y and Δc_i.
    fn update_len(&self, update: &ScaffoldUpdate) -> usize {
        update.params.len() + update.control_change.len()
    }

    /// One run from x and zero momentum with the correction c − c_i; then c_i⁺ by the option,
    /// and the update (y, Δc_i).
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |_, _, global, state, _| {
            let correction = (0..global.control.len())
                .map(|j| (global.control[j] as f64 - own_at(&state.control, j)) as f32)
                .collect();
            vec![SgdRun {
                params: Cow::Borrowed(&global.model),
                correction: Some(correction),
                fresh_momentum: true,
                ..SgdRun::default()
            }]
        },
        finish: |alg, ctx, global, state, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            let params = run.params.into_owned();
            let rows = ctx.train_view().len();
            let next = match (alg.full_gradient, rows) {
                (_, 0) => (0..params.len())
                    .map(|j| own_at(&state.control, j) as f32)
                    .collect(),
                (true, _) => crate::models::full_gradient(
                    ctx.arch,
                    &global.model,
                    ctx.train_view(),
                    ctx.training.plan.batch_size,
                ),
                (false, _) => control_from_change(
                    &state.control,
                    &global.control,
                    &global.model,
                    &params,
                    ctx.training.plan.steps_weight(rows),
                    run.lr.unwrap_or(ctx.lr),
                ),
            };
            let control_change = (0..next.len())
                .map(|j| (next[j] as f64 - own_at(&state.control, j)) as f32)
                .collect();
            state.control = next;
            ScaffoldUpdate {
                params,
                control_change,
            }
        },
        sends: SentRuns::Computed,
        keeps: None,
    });

    /// The model, as averaged (the paper's η_g).
    const SERVER_OPTIMIZED: Option<super::AggregatedVectors<Self>> =
        Some(|global, next| vec![(&global.model[..], &mut next.model[..])]);

    /// Both vectors summed in client order, each client 1: x ← the mean of the y, c ← c +
    /// (|S|/N)·(the mean of the Δc_i). A round without updates leaves both as they are.
    const SUMMED: Option<Summed<Self>> = Some(Summed {
        weight: |_, _| 1.0,
        finish: |alg, global, sums, _| {
            let [models, changes] = <[WeightedSum; 2]>::try_from(sums).expect("two vectors");
            let count = models.total();
            if count <= 0.0 {
                return global.clone();
            }
            let share = count / alg.participants;
            let control = (global.control.iter().zip(changes.average()))
                .map(|(&c, d)| (c as f64 + share * d as f64) as f32)
                .collect();
            ScaffoldGlobal {
                model: models.average(),
                control,
            }
        },
    });

    fn aggregate(
        &self,
        global: &ScaffoldGlobal,
        updates: super::Updates<ScaffoldUpdate>,
    ) -> ScaffoldGlobal {
        super::summed_aggregate(self, global, updates)
    }

    /// Novelty is scored by the server model's confidence maxᵧ p(y | x).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> =
        Some(|_, global, _| &global.model);

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a ScaffoldGlobal,
        _: &'a ScaffoldClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested::params(ModelKind::Global, &global.model[..])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clients f_k(y) = (a_k/2)(y − e_k)² take `steps[k]` steps of gradient descent at rate
    /// η from x with SCAFFOLD's correction (`corrected`) or without it (FedAvg), every client
    /// every round, Option II; the server aggregates with SCAFFOLD's rule (each counting 1).
    fn run(
        clients: &[(f64, f64)],
        steps: &[u64],
        eta: f64,
        rounds: usize,
        corrected: bool,
    ) -> (ScaffoldGlobal, Vec<ScaffoldClient>) {
        let scaffold = Scaffold {
            full_gradient: false,
            participants: clients.len() as f64,
        };
        let mut global = ScaffoldGlobal {
            model: vec![2.0],
            control: vec![0.0],
        };
        let mut states = vec![ScaffoldClient::default(); clients.len()];
        for _ in 0..rounds {
            let updates = (clients.iter().zip(steps).zip(&mut states).enumerate())
                .map(|(k, ((&(a, e), &tau), state))| {
                    let c_i = own_at(&state.control, 0);
                    let c = global.control[0] as f64;
                    let correction = if corrected { c - c_i } else { 0.0 };
                    let mut y = global.model[0] as f64;
                    for _ in 0..tau {
                        y -= eta * (a * (y - e) + correction);
                    }
                    let params = vec![y as f32];
                    let next = control_from_change(
                        &state.control,
                        &global.control,
                        &global.model,
                        &params,
                        tau as f64,
                        eta,
                    );
                    let control_change = vec![(next[0] as f64 - c_i) as f32];
                    state.control = next;
                    let update = ScaffoldUpdate {
                        params,
                        control_change,
                    };
                    (k as u32, update)
                })
                .collect::<Vec<_>>();
            global = scaffold.aggregate(&global, super::super::Updates::from(updates));
        }
        (global, states)
    }

    /// Three clients of curvatures 1, 4, 1 and optima 0, 1, 3 (global optimum Σ a_k e_k /
    /// Σ a_k = 7/6), 20 local steps at η = 0.1. A local run leaves r_k = (1 − η·a_k)^20 of its
    /// distance to its own optimum (0.1216, 0.0000366, 0.1216), so FedAvg settles where
    /// Σ (1 − r_k)(x − e_k) = 0: x = Σ (1 − r_k) e_k / Σ (1 − r_k) = 1.3186, near the optima's
    /// mean 4/3. SCAFFOLD's corrected runs settle at the global optimum, each c_i at ∇f_i there
    /// (7/6, 2/3, −11/6) and c at their mean, 0.
    #[test]
    fn scaffold_reaches_the_global_optimum_under_many_local_steps() {
        let clients = [(1.0, 0.0), (4.0, 1.0), (1.0, 3.0)];
        let left = |a: f64| (1.0 - 0.1 * a).powi(20);
        let kept: f64 = clients.iter().map(|&(a, _)| 1.0 - left(a)).sum();
        let fedavg_point = clients
            .iter()
            .map(|&(a, e)| (1.0 - left(a)) * e)
            .sum::<f64>()
            / kept;
        assert!((fedavg_point - 1.3186).abs() < 1e-4, "{fedavg_point}");
        let (fedavg, _) = run(&clients, &[20; 3], 0.1, 200, false);
        assert!(
            (fedavg.model[0] as f64 - fedavg_point).abs() < 1e-5,
            "{fedavg:?}"
        );
        let (scaffold, states) = run(&clients, &[20; 3], 0.1, 200, true);
        let optimum = 7.0 / 6.0;
        assert!(
            (scaffold.model[0] as f64 - optimum).abs() < 1e-5,
            "{scaffold:?}"
        );
        for (state, &(a, e)) in states.iter().zip(&clients) {
            let gradient = a * (optimum - e);
            assert!(
                (state.control[0] as f64 - gradient).abs() < 1e-4,
                "{state:?}"
            );
        }
        assert!(scaffold.control[0].abs() < 1e-5, "{scaffold:?}");
    }

    /// With one local step and every client every round, c stays the mean of the c_i (both
    /// start at 0), so the correction averages out: x ← x − η·mean ∇f_i(x), FedAvg's step
    /// with each client counting the same.
    #[test]
    fn one_local_step_with_full_participation_is_fedavg() {
        let clients = [(1.0, 0.0), (4.0, 1.0), (1.0, 3.0)];
        let (scaffold, _) = run(&clients, &[1; 3], 0.1, 5, true);
        let (fedavg, _) = run(&clients, &[1; 3], 0.1, 5, false);
        assert!((scaffold.model[0] - fedavg.model[0]).abs() < 1e-6);
        // By hand, x = 2: FedAvg's step moves by −0.1·mean(2, 4, −1) = −1/6 each round…
        let mut x: f64 = 2.0;
        for _ in 0..5 {
            x -= 0.1 * (clients.iter().map(|&(a, e)| a * (x - e)).sum::<f64>() / 3.0);
        }
        assert!(
            (fedavg.model[0] as f64 - x).abs() < 1e-6,
            "{fedavg:?} vs {x}"
        );
    }

    #[test]
    fn option_two_by_hand() {
        // c_i = 0.5, c = 0.25, x = 1, y = 0.4, K = 3, η = 0.1: 0.5 − 0.25 + 0.6/0.3 = 2.25.
        let next = control_from_change(&[0.5], &[0.25], &[1.0], &[0.4], 3.0, 0.1);
        assert!((next[0] - 2.25).abs() < 1e-6, "{next:?}");
        // No steps: c_i unchanged (0 before the first).
        assert_eq!(
            control_from_change(&[], &[0.25], &[1.0], &[1.0], 0.0, 0.1),
            [0.0]
        );
    }
}
