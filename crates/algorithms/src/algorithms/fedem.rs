//! FedEM (Marfoq et al. 2021, Alg. 2): every client's distribution is a mixture of M shared
//! components. Each round a client runs an E-step on its training data with the current global
//! components (q(i, m) ∝ π_m · exp(−ℓ_m(i)), computed in log space), sets π to the mean of q,
//! then runs a local M-step: one pass of local SGD per component, each sample's loss weighted by
//! q(i, m). The server averages each component with weights p_t = n_t / n. A client predicts with
//! Σ_m π_m · p(y | x; θ_m).

use super::LocalUpdate;
use super::{
    log_sum_exp, stale_delta_average, weighted_average, AggregateStale, Algorithm, ClientReport,
    LocalContext, PrivateUpdates, SentRuns, SgdRun, SgdUpdate, StaleUpdate, Summed, Tested,
    Updates, WeightedSum,
};
use crate::models::{
    confidence, sample_losses, Architecture, Gates, InitialModels, LocalPlan, MixtureGates,
    Predictor,
};
use crate::records::ModelKind;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// What the server does with the clients it did not sample this round.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Unsampled {
    /// They count with their weight p_t and the previous global components (the FedEM
    /// authors' aggregator).
    #[default]
    KeepGlobal,
    /// Weights are renormalised over the sampled clients.
    Renormalize,
}

/// How a client's E-step computes its responsibilities and mixture weights.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EStepPrecision {
    /// In f64, π kept at least 1e-8 so that a component a client has dropped can come back
    /// (the paper's intent).
    #[default]
    Float64,
    /// In f32 with no floor, as the authors' code computes it (a float32 softmax over m of
    /// log π − ℓ, π its mean): a client's π that underflows to exactly 0 stays 0, that
    /// component gone for the client for good.
    Float32,
}

impl EStepPrecision {
    /// The default (left out of the resolved scenario, so run ids stay as they were).
    pub fn is_float64(&self) -> bool {
        *self == EStepPrecision::Float64
    }
}

/// How a FedEM client scores a row's novelty (its typicality: higher, more like its training
/// data).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FedEmNovelty {
    /// The confidence maxᵧ p(y | x) of the client's mixture Σ_m π_m p(y | x; θ_m), as the
    /// FedGMM paper scores its baselines.
    #[default]
    Confidence,
    /// The log-likelihood of the row's label under the client's mixture, log Σ_m π_m p(y | x;
    /// θ_m), as the FedGMM authors' `ood_em.py` scores FedEM (they weigh the components by the
    /// training clients' mean π, one model for every client's rows: `evaluation.novelty:
    /// mean_weights`; by default each client uses its own π).
    Label,
}

impl FedEmNovelty {
    /// The default (left out of the resolved scenario, so run ids stay as they were).
    pub fn is_confidence(&self) -> bool {
        *self == FedEmNovelty::Confidence
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedEmSpec {
    /// M, the number of mixture components.
    #[serde(default = "default_components")]
    pub components: usize,
    /// How the aggregate counts the clients a round did not sample.
    #[serde(default)]
    pub unsampled: Unsampled,
    /// Unseen clients fit their mixture weights by EM with the components frozen, starting
    /// uniform, for at most this many iterations ...
    #[serde(default = "default_unseen_em_iterations")]
    pub unseen_em_iterations: u32,
    /// ... or until no weight moves by more than this.
    #[serde(default = "default_unseen_em_tolerance")]
    pub unseen_em_tolerance: f64,
    /// The training E-step's arithmetic (unseen clients' fit is always `float64`).
    #[serde(default, skip_serializing_if = "EStepPrecision::is_float64")]
    pub e_step: EStepPrecision,
    /// How a client scores a row's novelty (when the data have novel rows).
    #[serde(default, skip_serializing_if = "FedEmNovelty::is_confidence")]
    pub novelty_score: FedEmNovelty,
}

fn default_unseen_em_iterations() -> u32 {
    100
}
fn default_unseen_em_tolerance() -> f64 {
    1e-6
}

fn default_components() -> usize {
    3
}

impl Default for FedEmSpec {
    fn default() -> Self {
        FedEmSpec {
            components: default_components(),
            unsampled: Unsampled::default(),
            unseen_em_iterations: default_unseen_em_iterations(),
            unseen_em_tolerance: default_unseen_em_tolerance(),
            e_step: EStepPrecision::default(),
            novelty_score: FedEmNovelty::default(),
        }
    }
}

impl super::AlgorithmSettings for FedEmSpec {
    type Algorithm = FedEm;

    fn build(&self, population: &super::Population) -> FedEm {
        let participants = population.clients - population.unseen.len();
        FedEm::new(self.clone(), population.participants_train, participants)
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        use crate::settings::FieldError;
        FieldError::at_least_one("components", self.components)?;
        FieldError::at_least_one("unseen_em_iterations", self.unseen_em_iterations as usize)?;
        FieldError::non_negative("unseen_em_tolerance", self.unseen_em_tolerance)
    }
}

/// D-FedEM (Marfoq et al. 2021, Alg. 4) has FedEM's settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct DFedEmSpec(pub FedEmSpec);

impl super::AlgorithmSettings for DFedEmSpec {
    type Algorithm = FedEm;

    fn build(&self, population: &super::Population) -> FedEm {
        self.0.build(population)
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        self.0.validate()
    }
}

/// Mixture weights never go below this, so that log π stays finite and a component a client
/// has abandoned can still win it back.
pub const MIN_MIXTURE_WEIGHT: f64 = 1e-8;

#[derive(Clone, Debug)]
pub struct FedEm {
    spec: FedEmSpec,
    /// n, the training samples of all clients (for p_t = n_t / n).
    total_train: f64,
    /// The clients that take part (with privacy each weighs n / participants).
    participants: f64,
}

impl FedEm {
    pub fn new(spec: FedEmSpec, total_train: usize, participants: usize) -> Self {
        FedEm {
            spec,
            total_train: total_train as f64,
            participants: participants as f64,
        }
    }

    /// Each component moves by the p_t-weighted (and staleness-weighted) average change, with
    /// p_t = n_t / n as in [`FedEm::aggregate`] (over the arrived clients with `renormalize`).
    /// (`&Vec`: the signature of [`super::AggregateStale`] for this `Global`.)
    #[allow(clippy::ptr_arg)]
    fn aggregate_stale(
        &self,
        global: &Vec<Vec<f32>>,
        updates: &[StaleUpdate<'_, Vec<Vec<f32>>, FedEmUpdate>],
        server_lr: f64,
    ) -> Vec<Vec<f32>> {
        let arrived: f64 = updates.iter().map(|u| u.update.weight).sum();
        let total = match self.spec.unsampled {
            Unsampled::KeepGlobal => self.total_train.max(arrived),
            Unsampled::Renormalize => arrived,
        };
        (0..global.len())
            .map(|m| {
                let items = updates.iter().map(|u| {
                    let (x, b) = (&u.update.components[m][..], &u.base[m][..]);
                    (u.update.weight, u.factor, x, b)
                });
                stale_delta_average(&global[m], items, total, server_lr)
            })
            .collect()
    }
}

/// A client's mixture weights and one momentum buffer per component.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct FedEmClient {
    pub pi: Vec<f64>,
    pub momentum: Vec<Vec<f32>>,
}

impl super::Finite for FedEmClient {
    fn is_finite(&self) -> bool {
        self.pi.is_finite() && self.momentum.is_finite()
    }
}

impl crate::io::Floats for FedEmClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        self.momentum.iter_mut().collect()
    }
}

/// The client's M components after its local M-step, with its weight n_t.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct FedEmUpdate {
    pub components: Vec<Vec<f32>>,
    pub weight: f64,
}

impl super::Finite for FedEmUpdate {
    fn is_finite(&self) -> bool {
        self.components.is_finite() && self.weight.is_finite()
    }
}

impl crate::io::Floats for FedEmUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        self.components.iter_mut().collect()
    }
}

/// The E-step: responsibilities q(i, m) = softmax_m(log π_m − ℓ_m(i)) for `losses[m][i]`, and
/// the new mixture weights π_m = mean_i q(i, m) (kept at least [`MIN_MIXTURE_WEIGHT`] and
/// renormalised). Returns q by component: `q[m][i]`.
pub fn e_step(pi: &[f64], losses: &[Vec<f32>]) -> (Vec<Vec<f32>>, Vec<f64>) {
    let m = pi.len();
    let n = losses.first().map_or(0, Vec::len);
    let log_pi: Vec<f64> = pi.iter().map(|p| p.ln()).collect();
    let mut q = vec![vec![0f32; n]; m];
    let mut new_pi = vec![0f64; m];
    let mut row = vec![0f64; m];
    for i in 0..n {
        for c in 0..m {
            row[c] = log_pi[c] - losses[c][i] as f64;
        }
        let top = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        // e^(top − top) is 1 exactly: not worth an exp (a third of them with M = 3).
        row.iter_mut().for_each(|v| {
            *v = match *v == top && top.is_finite() {
                true => 1.0,
                false => (*v - top).exp(),
            }
        });
        let z: f64 = row.iter().sum();
        for c in 0..m {
            let qic = row[c] / z;
            q[c][i] = qic as f32;
            new_pi[c] += qic;
        }
    }
    if n == 0 {
        return (q, pi.to_vec());
    }
    for p in &mut new_pi {
        *p = (*p / n as f64).max(MIN_MIXTURE_WEIGHT);
    }
    let total: f64 = new_pi.iter().sum();
    new_pi.iter_mut().for_each(|p| *p /= total);
    (q, new_pi)
}

/// log Σ_m π_m exp(−ℓ_m(i)) for `losses[m][i]`: with the cross-entropy ℓ_m(i) = −log p(y_i |
/// x_i; θ_m), the log-likelihood of each row's label under the mixture (−∞ for a row every
/// component with π_m > 0 gives probability 0).
pub fn label_log_likelihood(pi: &[f64], losses: &[Vec<f32>]) -> Vec<f64> {
    let terms: Vec<Vec<f64>> = (losses.iter().zip(pi))
        .map(|(row_losses, p)| row_losses.iter().map(|&l| p.ln() - l as f64).collect())
        .collect();
    log_sum_exp(&terms)
}

/// [`e_step`] in f32 with no floor, as the FedEM authors' code computes it: q(i, ·) the
/// float32 softmax of log π − ℓ(i), π the mean of q rounded to f32 (summed in f64). A weight
/// that underflows to 0 makes log π = −∞, and that component's q and π stay 0 from then on.
pub fn e_step_f32(pi: &[f64], losses: &[Vec<f32>]) -> (Vec<Vec<f32>>, Vec<f64>) {
    let m = pi.len();
    let n = losses.first().map_or(0, Vec::len);
    let log_pi: Vec<f32> = pi.iter().map(|&p| (p as f32).ln()).collect();
    let mut q = vec![vec![0f32; n]; m];
    let mut sums = vec![0f64; m];
    let mut row = vec![0f32; m];
    for i in 0..n {
        for c in 0..m {
            row[c] = log_pi[c] - losses[c][i];
        }
        let top = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        row.iter_mut().for_each(|v| *v = (*v - top).exp());
        let z: f32 = row.iter().sum();
        for c in 0..m {
            q[c][i] = row[c] / z;
            sums[c] += q[c][i] as f64;
        }
    }
    if n == 0 {
        return (q, pi.to_vec());
    }
    let new_pi = sums.iter().map(|s| (s / n as f64) as f32 as f64).collect();
    (q, new_pi)
}

/// The local M-step of mixture models: one local run of the plan per model `models[m]`, each
/// row's loss weighted by `weights[m][i]`, with the model's own momentum buffer moved in.
pub(super) fn weighted_runs<'g>(
    models: &'g [Vec<f32>],
    weights: &[Vec<f32>],
    momenta: &mut [Vec<f32>],
) -> Vec<SgdRun<'g>> {
    models
        .iter()
        .zip(weights)
        .zip(momenta)
        .map(|((theta, w), momentum)| SgdRun {
            params: Cow::Borrowed(theta),
            momentum: std::mem::take(momentum),
            sample_weights: Some(w.clone()),
            ..SgdRun::default()
        })
        .collect()
}

/// The trained models of [`weighted_runs`]; the momentum buffers go back to `momenta`.
pub(super) fn trained_models(runs: Vec<SgdRun<'_>>, momenta: &mut [Vec<f32>]) -> Vec<Vec<f32>> {
    runs.into_iter()
        .zip(momenta)
        .map(|(run, momentum)| {
            *momentum = run.momentum;
            run.params.into_owned()
        })
        .collect()
}

/// Mixture weights for fixed components: EM from uniform weights on per-sample `losses[m][i]`,
/// until no weight moves by more than `tolerance` or after `max_iterations`.
pub fn fit_mixture_weights(losses: &[Vec<f32>], max_iterations: u32, tolerance: f64) -> Vec<f64> {
    let m = losses.len();
    let mut pi = vec![1.0 / m as f64; m];
    for _ in 0..max_iterations {
        let (_, next) = e_step(&pi, losses);
        let moved = next
            .iter()
            .zip(&pi)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        pi = next;
        if moved <= tolerance {
            break;
        }
    }
    pi
}

/// D-FedEM (Marfoq et al. 2021, App. D.2, Alg. 4): FedEM's E-step and local M-step on the
/// peer's own components, then each component averaged with the neighbours' (Σ_s w_ts θ_{m,s}).
impl super::Gossip for FedEm {
    fn local_model(&self, update: FedEmUpdate) -> Vec<Vec<f32>> {
        update.components
    }

    fn mix(&self, items: &[(f64, &Vec<Vec<f32>>)]) -> Vec<Vec<f32>> {
        let m = items.first().map_or(0, |(_, x)| x.len());
        (0..m)
            .map(|c| weighted_average(items.iter().map(|(w, x)| (*w, &x[c][..]))))
            .collect()
    }
}

impl Algorithm for FedEm {
    type Global = Vec<Vec<f32>>;
    type ClientState = FedEmClient;
    type Update = FedEmUpdate;

    fn init_global(
        &self,
        _: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> Vec<Vec<f32>> {
        (0..self.spec.components).map(|_| init.model()).collect()
    }

    fn init_client(&self, _: &Vec<Vec<f32>>, _: u32) -> FedEmClient {
        let m = self.spec.components;
        FedEmClient {
            pi: vec![1.0 / m as f64; m],
            momentum: vec![Vec::new(); m],
        }
    }

    fn models(&self, global: &Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        global.clone()
    }

    fn report(&self, _: &Vec<Vec<f32>>, state: &FedEmClient, _: u32) -> ClientReport {
        ClientReport {
            mixture: Some(state.pi.clone()),
            ..Default::default()
        }
    }

    fn broadcast_len(&self, global: &Vec<Vec<f32>>) -> usize {
        global.iter().map(Vec::len).sum()
    }

    fn update_len(&self, update: &FedEmUpdate) -> usize {
        update.components.iter().map(Vec::len).sum()
    }

    /// One pass of the plan per component.
    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        self.spec.components as u64 * plan.samples_processed(n_train)
    }

    /// π; scoring with other weights needs only them (`evaluation.novelty: mean_weights`).
    const MIXTURE_WEIGHTS: Option<super::MixtureWeights<Self>> = Some(super::MixtureWeights {
        of: |state| &state.pi,
        state: |pi| FedEmClient {
            pi,
            momentum: Vec::new(),
        },
    });

    /// E-step (the client's π moves), then one weighted run per component.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: Some(|global| global.iter().map(Vec::as_slice).collect()),
        begin: |fedem, ctx, global, state, _| {
            let losses = ctx.train_losses(global);
            let (q, pi) = match fedem.spec.e_step {
                EStepPrecision::Float64 => e_step(&state.pi, &losses),
                EStepPrecision::Float32 => e_step_f32(&state.pi, &losses),
            };
            state.pi = pi;
            weighted_runs(global, &q, &mut state.momentum)
        },
        finish: |_, ctx, _, state, runs| FedEmUpdate {
            components: trained_models(runs, &mut state.momentum),
            weight: ctx.train_view().len() as f64,
        },
        sends: SentRuns::All,
        keeps: None,
    });

    const STALE_UPDATES: Option<AggregateStale<Self>> = Some(FedEm::aggregate_stale);

    /// Every component sent, against its global component; every client weighs the mean
    /// training-set size n / N, so with `unsampled: keep_global` the components move by the
    /// sum of the changes over the N participants, with `renormalize` over those aggregated.
    const PRIVATE_UPDATES: Option<PrivateUpdates<Self>> = Some(PrivateUpdates {
        sent: |global, update| {
            (global.iter().zip(&mut update.components))
                .map(|(g, c)| (&g[..], &mut c[..]))
                .collect()
        },
        equal_weight: |fedem, update| update.weight = fedem.total_train / fedem.participants,
        divisor: |fedem, aggregated| match fedem.spec.unsampled {
            Unsampled::KeepGlobal => fedem.participants.max(aggregated),
            Unsampled::Renormalize => aggregated,
        },
        global: |global| global.iter_mut().map(|g| &mut g[..]).collect(),
    });

    /// Every component, as averaged.
    const SERVER_OPTIMIZED: Option<super::AggregatedVectors<Self>> = Some(|global, next| {
        (global.iter().zip(next.iter_mut()))
            .map(|(g, n)| (&g[..], &mut n[..]))
            .collect()
    });

    /// Each component's n_t-weighted average, visiting the updates once in client order; with
    /// `unsampled: keep_global`, the global component stands in for the clients not sampled
    /// (with their share of the training rows), added last.
    const SUMMED: Option<Summed<Self>> = Some(Summed {
        weight: |update, _| update.weight,
        finish: |fedem, global, mut sums, _| {
            sums.resize(global.len(), WeightedSum::default());
            let sampled = sums[0].total();
            let rest = match fedem.spec.unsampled {
                Unsampled::KeepGlobal => (fedem.total_train - sampled).max(0.0),
                Unsampled::Renormalize => 0.0,
            };
            sums.into_iter()
                .zip(global)
                .map(|(mut sum, g)| {
                    if rest > 0.0 {
                        sum.add(rest, g);
                    }
                    sum.average()
                })
                .collect()
        },
    });

    fn aggregate(&self, global: &Vec<Vec<f32>>, updates: Updates<FedEmUpdate>) -> Vec<Vec<f32>> {
        super::summed_aggregate(self, global, updates)
    }

    /// FedEM Table 3: the components stay fixed; π is fitted by EM on the client's training data.
    fn adapt_unseen(
        &self,
        ctx: &LocalContext<'_>,
        global: &Vec<Vec<f32>>,
        _: &mut ChaCha20Rng,
    ) -> FedEmClient {
        let losses = ctx.train_losses(global);
        let pi = fit_mixture_weights(
            &losses,
            self.spec.unseen_em_iterations,
            self.spec.unseen_em_tolerance,
        );
        FedEmClient {
            pi,
            momentum: Vec::new(),
        }
    }

    /// The confidence maxᵧ p(y | x) of the client's mixture Σ_m π_m p(y | x; θ_m), or the
    /// log-likelihood of the row's label under it ([`FedEmNovelty`]).
    fn typicality(
        &self,
        ctx: &LocalContext<'_>,
        global: &Vec<Vec<f32>>,
        state: &FedEmClient,
        view: crate::data::SplitView<'_>,
    ) -> Option<Vec<f64>> {
        Some(match self.spec.novelty_score {
            FedEmNovelty::Confidence => {
                let components: Vec<&[f32]> = global.iter().map(Vec::as_slice).collect();
                confidence(ctx.arch, &components, Gates::Fixed(&state.pi), view)
            }
            FedEmNovelty::Label => {
                label_log_likelihood(&state.pi, &sample_losses(ctx.arch, global, view))
            }
        })
    }

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a Vec<Vec<f32>>,
        state: &'a FedEmClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested {
            kind: ModelKind::Mixture,
            model: Predictor::Mixture {
                components: global.iter().map(Vec::as_slice).collect(),
                gates: MixtureGates::Fixed(&state.pi),
            },
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e_step_by_hand() {
        // Two components, π = (0.5, 0.5); sample 0 has losses (0, ln 3): q = (3/4, 1/4);
        // sample 1 has losses (ln 2, 0): q = (1/3, 2/3). New π = mean = (13/24, 11/24).
        let losses = vec![vec![0.0, 2f32.ln()], vec![3f32.ln(), 0.0]];
        let (q, pi) = e_step(&[0.5, 0.5], &losses);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(
            close(q[0][0] as f64, 0.75) && close(q[1][0] as f64, 0.25),
            "{q:?}"
        );
        assert!(
            close(q[0][1] as f64, 1.0 / 3.0) && close(q[1][1] as f64, 2.0 / 3.0),
            "{q:?}"
        );
        assert!(
            close(pi[0], 13.0 / 24.0) && close(pi[1], 11.0 / 24.0),
            "{pi:?}"
        );
        // The prior counts: with π = (0.9, 0.1) and equal losses, q = π.
        let (q, _) = e_step(&[0.9, 0.1], &[vec![1.0], vec![1.0]]);
        assert!(close(q[0][0] as f64, 0.9));
    }

    #[test]
    fn fitted_weights_follow_the_better_component() {
        // Component 0 explains sample 0 much better (loss 0 vs 10), component 1 explains
        // samples 1 and 2: EM converges to π ≈ (1/3, 2/3).
        let losses = vec![vec![0.0, 10.0, 10.0], vec![10.0, 0.0, 0.0]];
        let pi = fit_mixture_weights(&losses, 100, 1e-9);
        assert!(
            (pi[0] - 1.0 / 3.0).abs() < 1e-3 && (pi[1] - 2.0 / 3.0).abs() < 1e-3,
            "{pi:?}"
        );
        // One iteration is one E-step from uniform.
        let one = fit_mixture_weights(&losses, 1, 0.0);
        assert_eq!(one, e_step(&[0.5, 0.5], &losses).1);
    }

    #[test]
    fn e_step_survives_huge_losses_and_keeps_weights_positive() {
        let (q, pi) = e_step(&[0.5, 0.5], &[vec![1e4, 1e4], vec![0.0, 0.0]]);
        assert_eq!(q[1], vec![1.0, 1.0]);
        assert!(pi[0] >= MIN_MIXTURE_WEIGHT * 0.99 && pi[0] < 1e-7, "{pi:?}");
        assert!(((pi[0] + pi[1]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn label_log_likelihood_by_hand() {
        // π = (1/4, 3/4). Row 0: p(y | x) = (1/2, 1/4), mixture 1/8 + 3/16 = 5/16. Row 1:
        // p = (1, 1/2), mixture 1/4 + 3/8 = 5/8.
        let losses = vec![vec![2f32.ln(), 0.0], vec![4f32.ln(), 2f32.ln()]];
        let got = label_log_likelihood(&[0.25, 0.75], &losses);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(got[0], (5.0f64 / 16.0).ln()), "{got:?}");
        assert!(close(got[1], (5.0f64 / 8.0).ln()), "{got:?}");
        // A component with π = 0 (the f32 E-step's underflow) counts for nothing; a row no
        // remaining component can explain is −∞.
        let got = label_log_likelihood(&[0.0, 1.0], &[vec![0.0, 0.0], vec![f32::INFINITY, 0.0]]);
        assert_eq!(got, vec![f64::NEG_INFINITY, 0.0]);
    }

    #[test]
    fn float32_e_step_loses_an_underflowed_component_for_good() {
        // exp(−200) underflows in f32 (its least value is about e^−103): q = (1, 0) exactly,
        // so π = (1, 0), and from then on component 1 gets nothing even where it fits best.
        let (q, pi) = e_step_f32(&[0.5, 0.5], &[vec![0.0, 0.0], vec![200.0, 200.0]]);
        assert_eq!((q[1].clone(), pi.clone()), (vec![0.0, 0.0], vec![1.0, 0.0]));
        let (q, pi) = e_step_f32(&pi, &[vec![50.0], vec![0.0]]);
        assert_eq!((q, pi), (vec![vec![1.0], vec![0.0]], vec![1.0, 0.0]));
        // The f64 E-step keeps 1e-8 and lets the component win the sample back.
        let (_, pi) = e_step(&[0.5, 0.5], &[vec![0.0, 0.0], vec![200.0, 200.0]]);
        let (q, _) = e_step(&pi, &[vec![50.0], vec![0.0]]);
        assert!(q[1][0] > 0.99, "{q:?}");
        // Where nothing underflows the two agree to f32 rounding: losses (0, ln 3) from
        // π = (0.5, 0.5) give q = (3/4, 1/4).
        let (q, pi) = e_step_f32(&[0.5, 0.5], &[vec![0.0], vec![3f32.ln()]]);
        assert!((q[0][0] - 0.75).abs() < 1e-6 && (pi[1] - 0.25).abs() < 1e-6);
    }

    #[test]
    fn aggregation_keeps_or_renormalises_the_unsampled() {
        // n = 10; client 0 (n_t = 2) sampled with component values 1; global components 0.
        let update = FedEmUpdate {
            components: vec![vec![1.0], vec![3.0]],
            weight: 2.0,
        };
        let global = vec![vec![0.0], vec![0.0]];
        let keep = FedEm::new(FedEmSpec::default(), 10, 4);
        let agg = keep.aggregate(&global, vec![(0, update)].into());
        assert_eq!(agg, vec![vec![0.2], vec![0.6]]);
        let update = FedEmUpdate {
            components: vec![vec![1.0], vec![3.0]],
            weight: 2.0,
        };
        let renorm = FedEm::new(
            FedEmSpec {
                unsampled: Unsampled::Renormalize,
                ..Default::default()
            },
            10,
            4,
        );
        assert_eq!(
            renorm.aggregate(&global, vec![(0, update)].into()),
            vec![vec![1.0], vec![3.0]]
        );
    }

    /// With privacy every client weighs n / N = 10 / 4: two of four clients, changes (4, 0) and
    /// (0, 8) on both components from a global at 0, move the components by their sum over
    /// N = 4 (`keep_global`) or over the 2 aggregated (`renormalize`); `divisor` says the same.
    #[test]
    fn private_updates_weigh_alike_and_divide_the_sum_as_the_aggregation_does() {
        let hooks = FedEm::PRIVATE_UPDATES.expect("FedEM takes privacy");
        let global = vec![vec![0.0f32], vec![0.0]];
        for (unsampled, divisor) in [(Unsampled::KeepGlobal, 4.0), (Unsampled::Renormalize, 2.0)] {
            let fedem = FedEm::new(
                FedEmSpec {
                    unsampled,
                    ..Default::default()
                },
                10,
                4,
            );
            let updates: Vec<(u32, FedEmUpdate)> = [(0, 4.0f32, 7.0), (1, 8.0, 1.0)]
                .into_iter()
                .map(|(c, x, n_t)| {
                    let mut u = FedEmUpdate {
                        components: vec![vec![x], vec![x]],
                        weight: n_t,
                    };
                    (hooks.equal_weight)(&fedem, &mut u);
                    assert_eq!(u.weight, 2.5);
                    assert_eq!(
                        (hooks.sent)(&global, &mut u).len(),
                        2,
                        "both components sent"
                    );
                    (c, u)
                })
                .collect();
            assert_eq!((hooks.divisor)(&fedem, 2.0), divisor);
            let moved = 12.0 / divisor as f32;
            assert_eq!(
                fedem.aggregate(&global, updates.into()),
                vec![vec![moved], vec![moved]]
            );
        }
    }
}
