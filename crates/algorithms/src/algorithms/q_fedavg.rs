//! q-FedAvg (Li et al. 2020, "Fair Resource Allocation in Federated Learning", Algorithm 2):
//! FedAvg's local SGD for the q-FFL objective Σ_k p_k F_k^{q+1}/(q + 1), under which clients
//! with a higher loss weigh more; q = 0 is FedAvg's objective, and a larger q evens the
//! clients' losses out.
//!
//! Client k measures F_k(w), its mean training loss at the server's model w, before it trains
//! (in a cohort, in the stacked forward passes of an E-step), then runs local SGD to w̄_k. With
//! L = 1/η (the round's learning rate) and ΔW_k = L·(w − w̄_k), it sends w̄_k with
//! Δ_k = F_k^q·ΔW_k and h_k = q·F_k^{q−1}·‖ΔW_k‖² + L·F_k^q. The server moves to
//! w − Σ Δ_k / Σ h_k, which it computes as w + (Σ F_k^q / Σ η·h_k)·(w̄ − w), w̄ the F^q-weighted
//! mean of the w̄_k. As in the authors' code, F_k is F_k + 10⁻¹⁰ in the powers. With q = 0 the
//! step is the clients' plain mean, every client counting the same.

use super::{
    Algorithm, LocalContext, LocalUpdate, SentRuns, SgdRun, SgdUpdate, Summed, Tested, WeightedSum,
};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QFedAvgSpec {
    /// q ≥ 0, how much more clients with a higher loss weigh (the paper uses 0.001 to 15; 0 is
    /// FedAvg's objective with every client counting the same).
    pub q: f64,
}

impl super::AlgorithmSettings for QFedAvgSpec {
    const EXAMPLE: &'static str = "{q: 1}";

    type Algorithm = QFedAvg;

    fn build(&self, _: &super::Population) -> QFedAvg {
        QFedAvg { q: self.q }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        crate::settings::FieldError::non_negative("q", self.q)
    }
}

#[derive(Clone, Debug)]
pub struct QFedAvg {
    pub q: f64,
}

/// The client's trained model w̄_k, F_k^q and η·h_k.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct QUpdate {
    pub params: Vec<f32>,
    pub loss_power: f64,
    pub scaled_h: f64,
}

impl super::Finite for QUpdate {
    fn is_finite(&self) -> bool {
        self.params.is_finite() && self.loss_power.is_finite() && self.scaled_h.is_finite()
    }
}

impl crate::io::Floats for QUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.params]
    }
}

impl QFedAvg {
    /// (F^q, η·h) for mean training loss `loss` at the server's model, the model `global` and
    /// the trained `params` at learning rate `lr`: η·h = q·F^{q−1}·‖w − w̄‖²/η + F^q.
    pub fn weights(&self, loss: f64, global: &[f32], params: &[f32], lr: f64) -> (f64, f64) {
        let f = loss + 1e-10;
        let squared: f64 = (global.iter().zip(params))
            .map(|(&w, &p)| (w as f64 - p as f64).powi(2))
            .sum();
        let power = f.powf(self.q);
        let h = match self.q {
            0.0 => power,
            q => q * f.powf(q - 1.0) * squared / lr + power,
        };
        (power, h)
    }
}

impl Algorithm for QFedAvg {
    type Global = Vec<f32>;
    /// The momentum buffer (empty unless momentum is kept across rounds).
    type ClientState = Vec<f32>;
    type Update = QUpdate;

    one_global_model!();

    fn init_client(&self, _: &Vec<f32>, _: u32) -> Vec<f32> {
        Vec::new()
    }

    fn update_len(&self, update: &QUpdate) -> usize {
        update.params.len()
    }

    /// F_k(w) from the training rows' losses under w; one run from w with the client's
    /// momentum; the update is w̄_k with its weights.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: Some(|global| vec![&global[..]]),
        begin: |_, _, global, momentum, _| {
            vec![SgdRun {
                params: Cow::Borrowed(global),
                momentum: std::mem::take(momentum),
                ..SgdRun::default()
            }]
        },
        finish: |alg, ctx, global, momentum, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            *momentum = run.momentum;
            let loss = ctx.mean_train_loss(global);
            let params = run.params.into_owned();
            let (loss_power, scaled_h) = alg.weights(loss, global, &params, ctx.lr);
            QUpdate {
                params,
                loss_power,
                scaled_h,
            }
        },
        sends: SentRuns::Computed,
        keeps: None,
    });

    /// The model, as q-FedAvg moves it.
    const SERVER_OPTIMIZED: Option<super::AggregatedVectors<Self>> =
        Some(|global, next| vec![(&global[..], &mut next[..])]);

    /// w̄ = Σ F_k^q·w̄_k / Σ F_k^q summed in client order; then w + (Σ F_k^q / Σ η·h_k)·(w̄ − w)
    /// per coordinate in f64.
    const SUMMED: Option<Summed<Self>> = Some(Summed {
        weight: |update, _| update.loss_power,
        finish: |_, global, sums, updates| {
            let [sum] = <[WeightedSum; 1]>::try_from(sums).expect("one vector");
            let weighed = sum.total();
            let h: f64 = updates.iter().map(|u| u.scaled_h).sum();
            if weighed <= 0.0 || h <= 0.0 {
                return global.clone();
            }
            let scale = weighed / h;
            (global.iter().zip(sum.average()))
                .map(|(&w, m)| (w as f64 + scale * (m as f64 - w as f64)) as f32)
                .collect()
        },
    });

    fn aggregate(&self, global: &Vec<f32>, updates: super::Updates<QUpdate>) -> Vec<f32> {
        super::summed_aggregate(self, global, updates)
    }

    /// Novelty is scored by the global model's confidence maxᵧ p(y | x).
    const CONFIDENCE_MODEL: Option<super::ConfidenceModel<Self>> = Some(|_, global, _| global);

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a Vec<f32>,
        _: &'a Vec<f32>,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested::params(ModelKind::Global, &global[..])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(alg: &QFedAvg, loss: f64, global: &[f32], params: Vec<f32>, lr: f64) -> QUpdate {
        let (loss_power, scaled_h) = alg.weights(loss, global, &params, lr);
        QUpdate {
            params,
            loss_power,
            scaled_h,
        }
    }

    /// The authors' step w − Σ Δ_k / Σ h_k worked by hand: w = (1, 1), η = 0.5 (L = 2), q = 2;
    /// client 1 with F = 1 trained to (0, 1): ΔW = (2, 0), Δ = (2, 0), h = 2·1·4 + 2·1 = 10;
    /// client 2 with F = 2 trained to (1, 0.5): ΔW = (0, 1), Δ = 4·(0, 1), h = 2·2·1 + 2·4 =
    /// 12. w ← (1, 1) − (2, 4)/22 = (0.90909, 0.81818).
    #[test]
    fn the_step_by_hand() {
        let alg = QFedAvg { q: 2.0 };
        let w = vec![1.0f32, 1.0];
        let updates = vec![
            (0, update(&alg, 1.0, &w, vec![0.0, 1.0], 0.5)),
            (1, update(&alg, 2.0, &w, vec![1.0, 0.5], 0.5)),
        ];
        let next = alg.aggregate(&w, super::super::Updates::from(updates));
        for (a, b) in next.iter().zip([1.0 - 2.0 / 22.0, 1.0 - 4.0 / 22.0]) {
            assert!((*a as f64 - b).abs() < 1e-6, "{next:?}");
        }
    }

    /// q = 0: every client counts the same, and the step is their plain mean.
    #[test]
    fn q_zero_is_the_clients_mean() {
        let alg = QFedAvg { q: 0.0 };
        let w = vec![0.5f32];
        let updates = vec![
            (0, update(&alg, 0.3, &w, vec![1.0], 0.1)),
            (1, update(&alg, 2.0, &w, vec![2.0], 0.1)),
            (2, update(&alg, 0.7, &w, vec![0.0], 0.1)),
        ];
        let next = alg.aggregate(&w, super::super::Updates::from(updates));
        assert!((next[0] - 1.0).abs() < 1e-6, "{next:?}");
    }
}
