//! FedDyn (Acar et al. 2021, "Federated Learning Based on Dynamic Regularization",
//! Algorithm 1): each client's local objective is corrected so that its stationary points agree
//! with the global objective's.
//!
//! Client k minimizes L_k(θ) − ⟨∇L_k(θ_k^{t−1}), θ⟩ + (α/2)‖θ − θ^{t−1}‖², by local SGD from
//! the server's model θ^{t−1}. It keeps λ_k = −∇L_k(θ_k^{t−1})/α, which the first-order
//! condition of its last solve gives as λ_k ← λ_k + (θ_k^t − θ^{t−1}) (0 before it first
//! trains). The linear term and the proximal term together are one proximal term of weight α
//! around θ^{t−1} − λ_k, which is how the run trains it. The server keeps the mean drift
//! d = Σ_k λ_k / m over all m participants (the paper's −h/α):
//!
//!   d ← d + (1/m) Σ_{k∈P_t} (θ_k^t − θ^{t−1}),  θ^t = mean_{k∈P_t} θ_k^t + d.
//!
//! As in the paper, each client counts the same and α is one number; the authors' code also
//! divides α by each client's share of the rows and clips local gradients to norm 10, which
//! this does not. Clients are tested with the server's model θ.

use super::{
    Algorithm, LocalContext, LocalUpdate, ProximalTerm, SentRuns, SgdRun, SgdUpdate, Summed,
    Tested, WeightedSum,
};
use crate::algorithms::fedavg::ModelUpdate;
use crate::models::{Architecture, InitialModels};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedDynSpec {
    /// α, the weight of the dynamic regularizer (the paper uses 0.01 and 0.1).
    pub alpha: f64,
}

impl super::AlgorithmSettings for FedDynSpec {
    const EXAMPLE: &'static str = "{alpha: 0.01}";

    type Algorithm = FedDyn;

    fn build(&self, population: &super::Population) -> FedDyn {
        FedDyn {
            alpha: self.alpha,
            participants: (population.clients - population.unseen.len()).max(1) as f64,
        }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        crate::settings::FieldError::positive("alpha", self.alpha)
    }
}

#[derive(Clone, Debug)]
pub struct FedDyn {
    pub alpha: f64,
    /// m, the clients that take part (the held-out ones left out).
    pub participants: f64,
}

/// The server's model θ and the mean drift d of all participants (what θ^t adds to the
/// round's mean model).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct DynGlobal {
    pub model: Vec<f32>,
    pub drift: Vec<f32>,
}

impl super::Finite for DynGlobal {
    fn is_finite(&self) -> bool {
        self.model.is_finite() && self.drift.is_finite()
    }
}

/// A client's λ_k (empty until it first trains: 0) and its local run's momentum.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct DynClient {
    pub drift: Vec<f32>,
    pub momentum: Vec<f32>,
}

impl super::Finite for DynClient {
    fn is_finite(&self) -> bool {
        self.drift.is_finite() && self.momentum.is_finite()
    }
}

impl crate::io::Floats for DynClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.drift, &mut self.momentum]
    }
}

/// λ_k + (θ_k − θ), coordinate by coordinate (from λ_k = 0 where `drift` is empty).
pub fn moved_drift(drift: &[f32], trained: &[f32], model: &[f32]) -> Vec<f32> {
    let zero = std::iter::repeat(&0.0f32);
    let before = drift.iter().chain(zero).take(model.len());
    (before.zip(trained).zip(model))
        .map(|((&l, &t), &x)| (l as f64 + (t as f64 - x as f64)) as f32)
        .collect()
}

impl Algorithm for FedDyn {
    /// λ_k.
    const CLIENT_MODELS: usize = 1;

    type Global = DynGlobal;
    type ClientState = DynClient;
    type Update = ModelUpdate;

    fn init_global(
        &self,
        _: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> DynGlobal {
        let model = init.model();
        let drift = vec![0.0; model.len()];
        DynGlobal { model, drift }
    }

    fn init_client(&self, _: &DynGlobal, _: u32) -> DynClient {
        DynClient::default()
    }

    fn models(&self, global: &DynGlobal) -> Vec<Vec<f32>> {
        vec![global.model.clone()]
    }

    /// Only θ travels; the drift stays on the server.
    fn broadcast_len(&self, global: &DynGlobal) -> usize {
        global.model.len()
    }

    fn update_len(&self, update: &ModelUpdate) -> usize {
        update.params.len()
    }

    /// One run from θ with the client's momentum, the proximal term of weight α around
    /// θ − λ_k; then λ_k moves by the run's change, and the update is the trained model,
    /// every client weighing 1.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |alg, _, global, state, _| {
            let anchor = match state.drift.is_empty() {
                true => Cow::Borrowed(&global.model[..]),
                false => Cow::Owned(
                    (global.model.iter().zip(&state.drift))
                        .map(|(&x, &l)| (x as f64 - l as f64) as f32)
                        .collect(),
                ),
            };
            vec![SgdRun {
                params: Cow::Borrowed(&global.model),
                momentum: std::mem::take(&mut state.momentum),
                proximal: Some(ProximalTerm {
                    anchor,
                    mu: alg.alpha,
                }),
                ..SgdRun::default()
            }]
        },
        finish: |_, _, global, state, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            state.momentum = run.momentum;
            let params = run.params.into_owned();
            state.drift = moved_drift(&state.drift, &params, &global.model);
            ModelUpdate {
                params,
                weight: 1.0,
            }
        },
        sends: SentRuns::Computed,
        keeps: None,
    });

    /// The round's mean model ȳ (each client 1, summed in client order); d ← d + (|P|/m)·(ȳ −
    /// θ), θ ← ȳ + d. A round without updates leaves both as they are.
    const SUMMED: Option<Summed<Self>> = Some(Summed {
        weight: |_, _| 1.0,
        finish: |alg, global, sums, _| {
            let [sum] = <[WeightedSum; 1]>::try_from(sums).expect("one vector");
            let count = sum.total();
            if count <= 0.0 {
                return global.clone();
            }
            let share = count / alg.participants;
            let mean = sum.average();
            let drift: Vec<f32> = (global.drift.iter().zip(&mean).zip(&global.model))
                .map(|((&d, &y), &x)| (d as f64 + share * (y as f64 - x as f64)) as f32)
                .collect();
            let model = (mean.iter().zip(&drift))
                .map(|(&y, &d)| (y as f64 + d as f64) as f32)
                .collect();
            DynGlobal { model, drift }
        },
    });

    fn aggregate(&self, global: &DynGlobal, updates: super::Updates<ModelUpdate>) -> DynGlobal {
        super::summed_aggregate(self, global, updates)
    }

    /// Novelty is scored by the server model's confidence maxᵧ p(y | x).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> =
        Some(|_, global, _| &global.model);

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a DynGlobal,
        _: &'a DynClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested::params(ModelKind::Global, &global.model[..])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three clients with f_k(θ) = (a_k/2)(θ − e_k)², each solving its local objective
    /// exactly (as many local steps as it takes): θ_k = (a_k·e_k + α(θ − λ_k)) / (a_k + α).
    /// The global objective Σ f_k has its optimum at Σ a_k e_k / Σ a_k = (1·0 + 4·1 + 1·3)/6
    /// = 7/6. FedAvg's exact local solves return θ_k = e_k, so it stays at their mean 4/3;
    /// FedDyn's fixed point is the optimum (there θ_k = θ and λ_k = −∇f_k(θ)/α).
    #[test]
    fn feddyn_reaches_the_global_optimum_under_exact_local_solves() {
        let clients = [(1.0, 0.0), (4.0, 1.0), (1.0, 3.0)];
        let dyn_ = FedDyn {
            alpha: 0.5,
            participants: 3.0,
        };
        let mut global = DynGlobal {
            model: vec![2.0],
            drift: vec![0.0],
        };
        let mut states = vec![DynClient::default(); 3];
        for _ in 0..300 {
            let updates = (clients.iter().zip(&mut states).enumerate())
                .map(|(k, (&(a, e), state))| {
                    let x = global.model[0] as f64;
                    let lambda = state.drift.first().copied().unwrap_or(0.0) as f64;
                    let solved = (a * e + dyn_.alpha * (x - lambda)) / (a + dyn_.alpha);
                    let params = vec![solved as f32];
                    state.drift = moved_drift(&state.drift, &params, &global.model);
                    (
                        k as u32,
                        ModelUpdate {
                            params,
                            weight: 1.0,
                        },
                    )
                })
                .collect::<Vec<_>>();
            global = dyn_.aggregate(&global, super::super::Updates::from(updates));
        }
        let optimum = 7.0 / 6.0;
        assert!(
            (global.model[0] as f64 - optimum).abs() < 1e-5,
            "{:?}",
            global
        );
        // The drifts settle at λ_k = −a_k(θ − e_k)/α, which sum to 0.
        for (state, &(a, e)) in states.iter().zip(&clients) {
            let want = -a * (optimum - e) / dyn_.alpha;
            assert!(
                (state.drift[0] as f64 - want).abs() < 1e-4,
                "{state:?} vs {want}"
            );
        }
    }

    #[test]
    fn a_first_round_from_no_drift_moves_the_drift_by_the_change() {
        assert_eq!(moved_drift(&[], &[1.5, -2.0], &[1.0, 1.0]), [0.5, -3.0]);
        assert_eq!(
            moved_drift(&[0.25, 1.0], &[1.5, -2.0], &[1.0, 1.0]),
            [0.75, -2.0]
        );
    }
}
