//! FedNova (Wang et al. 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous
//! Federated Optimization"): FedAvg's local SGD, with each client's change normalized by its
//! number of local steps before the average.
//!
//! A client that takes more steps moves further, so FedAvg's weighted average of models
//! converges to a point weighted by the clients' steps. FedNova divides client i's change
//! y_i − x by a_i, the L1 norm of the weights its steps' gradients add up with
//! (`LocalPlan::steps_weight`: τ_i steps of plain SGD, a_i = τ_i; with momentum ρ from a zero
//! buffer, a_i = Σ_t (1 − ρᵗ)/(1 − ρ), as the authors' code counts it), and
//! moves by τ_eff = Σ p_i a_i times their p-weighted mean, p_i = n_i / Σ n (the round's
//! clients):
//!
//!   x ← x + τ_eff · Σ p_i (y_i − x) / a_i.
//!
//! With equal steps this is FedAvg. The steps are each client's own (`LocalPlan::steps` of
//! its training rows: with `local_epochs`, clients with more rows take more). Each round's
//! local runs start from zero momentum, as the authors' code resets the buffers after each
//! average, whatever `training.keep_momentum` says.

use super::{
    Algorithm, LocalContext, LocalUpdate, SentRuns, SgdRun, SgdUpdate, Summed, Tested, WeightedSum,
};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedNovaSpec {}

impl super::AlgorithmSettings for FedNovaSpec {
    type Algorithm = FedNova;

    fn build(&self, _: &super::Population) -> FedNova {
        FedNova
    }
}

#[derive(Clone, Debug, Default)]
pub struct FedNova;

/// A client's model after its local run, with its training-set size n_i and its normalizer
/// a_i.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct NovaUpdate {
    pub params: Vec<f32>,
    pub rows: f64,
    pub normalizer: f64,
}

impl super::Finite for NovaUpdate {
    fn is_finite(&self) -> bool {
        self.params.is_finite() && self.rows.is_finite() && self.normalizer.is_finite()
    }
}

impl crate::io::Floats for NovaUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![&mut self.params]
    }
}

impl Algorithm for FedNova {
    type Global = Vec<f32>;
    /// Nothing: every round's run starts from zero momentum.
    type ClientState = Vec<f32>;
    type Update = NovaUpdate;

    one_global_model!();

    fn init_client(&self, _: &Vec<f32>, _: u32) -> Vec<f32> {
        Vec::new()
    }

    fn update_len(&self, update: &NovaUpdate) -> usize {
        update.params.len()
    }

    /// One run from the global model and zero momentum; the update is its model with n_i and
    /// a_i for the steps it took.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: None,
        begin: |_, _, global, _, _| {
            vec![SgdRun {
                params: Cow::Borrowed(global),
                fresh_momentum: true,
                ..SgdRun::default()
            }]
        },
        finish: |_, ctx, _, _, runs| {
            let [run] = <[SgdRun; 1]>::try_from(runs).expect("one run");
            let plan = &ctx.training.plan;
            let rows = ctx.train_view().len();
            NovaUpdate {
                params: run.params.into_owned(),
                rows: rows as f64,
                normalizer: plan.steps_weight(rows),
            }
        },
        sends: SentRuns::All,
        keeps: None,
    });

    /// The model, as FedNova moves it.
    const SERVER_OPTIMIZED: Option<super::AggregatedVectors<Self>> =
        Some(|global, next| vec![(&global[..], &mut next[..])]);

    /// Σ (n_i / a_i)·y_i summed in client order; then x + τ_eff·(W/N)·(ȳ − x) per coordinate,
    /// ȳ that sum's average, W = Σ n_i / a_i, N = Σ n_i and τ_eff = Σ n_i a_i / N. A client
    /// that took no step (no training rows) weighs nothing.
    const SUMMED: Option<Summed<Self>> = Some(Summed {
        weight: |update, _| match update.normalizer {
            0.0 => 0.0,
            a => update.rows / a,
        },
        finish: |_, global, sums, updates| {
            let [sum] = <[WeightedSum; 1]>::try_from(sums).expect("one vector");
            let weighed = sum.total();
            let rows: f64 = updates.iter().map(|u| u.rows).sum();
            if weighed <= 0.0 || rows <= 0.0 {
                return global.clone();
            }
            let tau_eff = updates.iter().map(|u| u.rows * u.normalizer).sum::<f64>() / rows;
            let scale = tau_eff * weighed / rows;
            let mean = sum.average();
            global
                .iter()
                .zip(mean)
                .map(|(&x, y)| (x as f64 + scale * (y as f64 - x as f64)) as f32)
                .collect()
        },
    });

    fn aggregate(&self, global: &Vec<f32>, updates: super::Updates<NovaUpdate>) -> Vec<f32> {
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

    /// The round's updates from `x` on two clients with f_i(y) = ½(y − e_i)², n_i rows and τ_i
    /// steps of gradient descent at rate η: y_i = e_i + (1 − η)^τ_i·(x − e_i).
    fn round(
        x: f32,
        clients: &[(f64, f64, u64)],
        eta: f64,
        aggregate: impl Fn(&Vec<f32>, Vec<(u32, NovaUpdate)>) -> Vec<f32>,
    ) -> f32 {
        let updates = (clients.iter().enumerate())
            .map(|(i, &(e, n, tau))| {
                let y = e + (1.0 - eta).powi(tau as i32) * (x as f64 - e);
                let update = NovaUpdate {
                    params: vec![y as f32],
                    rows: n,
                    normalizer: tau as f64,
                };
                (i as u32, update)
            })
            .collect();
        aggregate(&vec![x], updates)[0]
    }

    /// FedNova's Sec. 3 example: two quadratics with optima 0 and 1 and equal data, one
    /// client taking 1 step and the other 10. The global objective ½Σ(y − e_i)² has its optimum
    /// at 0.5. FedAvg's fixed point weighs each optimum by 1 − (1 − η)^τ_i (about η·τ_i),
    /// FedNova's by (1 − (1 − η)^τ_i)/τ_i (about η): at η = 0.001, 0.001 and 0.009955 for
    /// FedAvg, which settles at 0.9087 (about 10/11), and 0.001 and 0.0009955 for FedNova,
    /// which settles at 0.4989.
    #[test]
    fn fednova_reaches_the_global_optimum_where_fedavg_weighs_by_steps() {
        let (eta, clients): (f64, _) = (0.001, [(0.0, 50.0, 1), (1.0, 50.0, 10)]);
        let weight = |tau: u64| 1.0 - (1.0 - eta).powi(tau as i32);
        let fedavg_point = weight(10) / (weight(1) + weight(10));
        let nova_point = (weight(10) / 10.0) / (weight(1) + weight(10) / 10.0);
        assert!((fedavg_point - 10.0 / 11.0).abs() < 0.005, "{fedavg_point}");
        assert!((nova_point - 0.5).abs() < 0.003, "{nova_point}");
        let nova = |g: &Vec<f32>, u: Vec<(u32, NovaUpdate)>| {
            FedNova.aggregate(g, super::super::Updates::from(u))
        };
        // FedAvg's n_i-weighted average of the same models.
        let fedavg = |_: &Vec<f32>, u: Vec<(u32, NovaUpdate)>| {
            let total: f64 = u.iter().map(|(_, u)| u.rows).sum();
            let mean = u
                .iter()
                .map(|(_, u)| u.rows * u.params[0] as f64)
                .sum::<f64>()
                / total;
            vec![mean as f32]
        };
        let (mut x_nova, mut x_avg) = (0.0f32, 0.0f32);
        for _ in 0..20_000 {
            x_nova = round(x_nova, &clients, eta, nova);
            x_avg = round(x_avg, &clients, eta, fedavg);
        }
        assert!(
            (x_nova as f64 - nova_point).abs() < 1e-4,
            "{x_nova} vs {nova_point}"
        );
        assert!(
            (x_avg as f64 - fedavg_point).abs() < 1e-4,
            "{x_avg} vs {fedavg_point}"
        );
        // With equal steps FedNova is FedAvg.
        let equal = [(0.0, 30.0, 4), (1.0, 70.0, 4)];
        let (a, b) = (
            round(0.25, &equal, 0.1, nova),
            round(0.25, &equal, 0.1, fedavg),
        );
        assert!((a - b).abs() < 1e-7, "{a} vs {b}");
    }
}
