//! FedGMM (Wu et al. 2023, Alg. 1): each client's joint distribution is a mixture over pairs
//! (k, m) of K Gaussian components over the inputs and M shared classifiers,
//! p_t(x, y) = Σ_{k,m} π_t(k, m) N(x; μ_k, Σ_k) p(y | x; θ_m).
//!
//! Each round a client runs an E-step on its training data over all K·M pairs, in log space:
//! r(i, k, m) ∝ π(k, m) N(x_i; μ_k, Σ_k) exp(−ℓ_m(i)); sets π to the mean of r; then its local
//! M-step: μ_k and Σ_k in closed form from the weights Σ_m r (with ε·I added to Σ_k), and each
//! classifier one pass of local SGD with per-sample weights Σ_k r. The server pools the
//! Gaussians exactly (the between-client spread of the means included, which the authors' code
//! leaves out) with weights γ_tk = Σ_i Σ_m r, and averages classifier m with weights
//! Σ_i Σ_k r. A client predicts p(y | x) = Σ_{k,m} p(k, m | x) p(y | x; θ_m) with
//! p(k, m | x) ∝ π(k, m) N(x; μ_k, Σ_k) (the authors' code adds π instead of log π: a bug we do
//! not copy), and scores novelty by log p(x) = log Σ_{k,m} π(k, m) N(x; μ_k, Σ_k).
//!
//! The Gaussians model an input representation z: the raw features (default), z = x·P for a
//! matrix P read from a CSV file or fitted by PCA on the participants' training rows before
//! the run, or a trained network's hidden layer h(x), optionally reduced the same way to
//! h(x)·P (`projection:`; the paper modelled a pretrained ResNet-18's embeddings reduced by
//! PCA to 48 dimensions). It cannot take stale updates (FedBuff, late updates):
//! closed-form statistics of older models do not combine by deltas.

mod projection;

use super::fedem::{trained_models, weighted_runs};
use super::AlgorithmSettings;
use super::LocalUpdate;
use super::Tested;
use super::{e_step, fit_mixture_weights, log_sum_exp, Algorithm, ClientReport, LocalContext};
use super::{SentRuns, SgdUpdate, Summed, Updates, WeightedSum, MIN_MIXTURE_WEIGHT};
use crate::data::SplitView;
use crate::models::{
    sample_losses, Architecture, Encoder, GaussianInputs, InitialModels, InputShape, LocalPlan,
    MixtureGates, Predictor,
};
use crate::records::ModelKind;
use projection::NO_WEIGHTS;
use projection::{Matrix, Projection};
use rand_chacha::ChaCha20Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The shape of each Gaussian's covariance.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Covariance {
    /// A full d × d matrix (the authors' default).
    #[default]
    Full,
    /// Only the variances.
    Diagonal,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedGmmSpec {
    /// K (the paper's M1), the Gaussian components over the inputs.
    #[serde(default = "d_three")]
    pub gaussians: usize,
    /// M (the paper's M2), the shared classifiers.
    #[serde(default = "d_three")]
    pub classifiers: usize,
    /// The shape of each Gaussian's covariance.
    #[serde(default)]
    pub covariance: Covariance,
    /// ε, added to each covariance's diagonal after the local M-step (the authors: 0.1).
    #[serde(default = "d_epsilon")]
    pub epsilon: f64,
    /// The Gaussians start at μ_k ~ N(0, I) and Σ_k = this · I (the authors used 100).
    #[serde(default = "d_init_variance")]
    pub init_variance: f64,
    /// The representation the Gaussians model: a CSV file of a matrix P, z = x·P (one line
    /// per input feature, one column per z dimension; a path relative to the working
    /// directory); `{kind: pca, dims: 48}`, the principal axes of the participants' training
    /// rows, fitted centrally before the run; or `{kind: features, network, classes, layer,
    /// dims}`, a trained network's layer output (the paper: a pretrained ResNet-18's
    /// embeddings, reduced by PCA to 48 dimensions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projection: Option<Projection>,
    /// How rows are scored for novelty: `joint`, log p(x, y) (the row's label counts too, as
    /// the authors' `ood.py` combines log p(x) and log p(y | x)), `input`, log p(x), or
    /// `label`, log p(y | x).
    #[serde(default)]
    pub novelty_score: NoveltyScore,
    /// Unseen clients fit π by EM with everything else frozen, for at most this many
    /// iterations ...
    #[serde(default = "d_unseen_iterations")]
    pub unseen_em_iterations: u32,
    /// ... or until no weight moves by more than this.
    #[serde(default = "d_unseen_tolerance")]
    pub unseen_em_tolerance: f64,
}

fn d_three() -> usize {
    3
}
fn d_epsilon() -> f64 {
    0.1
}
fn d_init_variance() -> f64 {
    1.0
}
fn d_unseen_iterations() -> u32 {
    100
}
fn d_unseen_tolerance() -> f64 {
    1e-6
}

/// What FedGMM's novelty score measures.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum NoveltyScore {
    /// log p(x, y) = log Σ_{k,m} π(k, m) N(z; μ_k, Σ_k) p(y | x; θ_m).
    #[default]
    Joint,
    /// log p(x) = log Σ_{k,m} π(k, m) N(z; μ_k, Σ_k).
    Input,
    /// log p(y | x) = log p(x, y) − log p(x): how well the row's label fits its input (the
    /// second half of the authors' `ood.py` score).
    Label,
}

impl AlgorithmSettings for FedGmmSpec {
    type Algorithm = FedGmm;

    fn check_files(&self, _: Option<usize>) -> Result<(), crate::settings::FieldError> {
        match &self.projection {
            Some(Projection::File(p)) => p
                .matrix()
                .map(|_| ())
                .map_err(|e| crate::settings::FieldError::new("projection".into(), e)),
            _ => Ok(()),
        }
    }

    fn check_input(&self, input: InputShape) -> Result<(), crate::settings::FieldError> {
        self.check_files(None)?;
        let input_dim = input.len();
        let problem = match &self.projection {
            Some(Projection::Features(f)) => {
                return f.check(input).map_err(|e| e.within("projection"))
            }
            Some(Projection::File(p)) if p.read_already().rows != input_dim => format!(
                "`{}` has {} rows; it needs one per input feature ({input_dim})",
                p.path,
                p.read_already().rows
            ),
            Some(Projection::Pca { dims }) if *dims > input_dim => format!(
                "`dims: {dims}` is more than the {input_dim} input features; at most {input_dim}"
            ),
            _ => return Ok(()),
        };
        Err(crate::settings::FieldError::new(
            "projection".into(),
            problem,
        ))
    }

    fn build(&self, population: &super::Population) -> FedGmm {
        let principal_axes = |dim: usize, dims: usize, rows: &dyn Fn(SplitView<'_>) -> Vec<f32>| {
            let mut moments = crate::models::Moments::new(dim);
            population.for_each_training_view(|v| moments.add(&rows(v)));
            let (values, _) = moments.principal_axes(dims);
            Matrix {
                rows: dim,
                cols: dims,
                values,
            }
        };
        let (encoder, projection) = match &self.projection {
            None => (None, None),
            Some(Projection::File(p)) => (None, Some(p.read_already().clone())),
            Some(Projection::Pca { dims }) => (
                None,
                Some(principal_axes(population.input_dim, *dims, &|v| {
                    v.features.to_vec()
                })),
            ),
            Some(Projection::Features(f)) => {
                let encoder = f.encoder(population.data.input_shape());
                let matrix = f
                    .dims
                    .map(|dims| principal_axes(encoder.values(), dims, &|v| encoder.represent(v)));
                (Some(encoder), matrix)
            }
        };
        FedGmm {
            spec: self.clone(),
            projection: projection.map(Arc::new),
            encoder: encoder.map(Arc::new),
        }
    }

    fn validate(&self) -> Result<(), crate::settings::FieldError> {
        use crate::settings::FieldError;
        let err = |f: &str, m: String| Err(FieldError::new(f.into(), m));
        FieldError::at_least_one("gaussians", self.gaussians)?;
        FieldError::at_least_one("classifiers", self.classifiers)?;
        if !(self.epsilon > 0.0 && self.epsilon.is_finite()) {
            return err(
                "epsilon",
                format!(
                    "must be a positive number (it keeps the covariances invertible), got {}",
                    self.epsilon
                ),
            );
        }
        FieldError::positive("init_variance", self.init_variance)?;
        match &self.projection {
            Some(Projection::Pca { dims: 0 }) => {
                return err("projection.dims", "must be at least 1".into());
            }
            Some(Projection::Features(f)) => {
                if f.dims == Some(0) {
                    return err("projection.dims", "must be at least 1".into());
                }
                if f.classes < 2 {
                    return err(
                        "projection.classes",
                        format!(
                            "must be at least 2 (the classes the network was trained for), got {}",
                            f.classes
                        ),
                    );
                }
                if f.network.init.is_none() {
                    return err("projection.network.init", NO_WEIGHTS.into());
                }
                f.network
                    .validate()
                    .map_err(|e| e.within("projection.network"))?;
            }
            _ => {}
        }
        FieldError::at_least_one("unseen_em_iterations", self.unseen_em_iterations as usize)?;
        FieldError::non_negative("unseen_em_tolerance", self.unseen_em_tolerance)
    }
}

#[derive(Clone, Debug)]
pub struct FedGmm {
    spec: FedGmmSpec,
    /// The Gaussians' projection P, read or fitted when the run starts.
    projection: Option<Arc<Matrix>>,
    /// The trained network whose layer output the Gaussians model (before P, if any).
    encoder: Option<Arc<Encoder>>,
}

pub use crate::models::Gaussian;

/// What the server holds: K Gaussians and M classifiers.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GmmGlobal {
    pub gaussians: Vec<Gaussian>,
    pub classifiers: Vec<Vec<f32>>,
}

impl super::Finite for GmmGlobal {
    fn is_finite(&self) -> bool {
        self.classifiers.is_finite()
            && self
                .gaussians
                .iter()
                .all(|g| g.mean.is_finite() && g.cov.is_finite())
    }
}

/// A client's joint weights π(k, m) (index k·M + m) and one momentum buffer per classifier
/// (FedEM's client state over pairs); while its classifiers train, the Gaussians its E-step
/// fitted (see its [`LocalUpdate::Sgd`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GmmClient {
    pub pi: Vec<f64>,
    pub momentum: Vec<Vec<f32>>,
    /// Set by the update's `begin`, taken by its `finish`: `None` between rounds.
    fitted: Option<FittedGaussians>,
}

/// The Gaussians of a client's local M-step with their weights γ_k = Σ_i Σ_m r.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct FittedGaussians {
    gaussians: Vec<Gaussian>,
    weights: Vec<f64>,
}

impl super::Finite for GmmClient {
    fn is_finite(&self) -> bool {
        self.pi.is_finite() && self.momentum.is_finite()
    }
}

impl crate::io::Floats for GmmClient {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        self.momentum.iter_mut().collect()
    }
}

/// A client's local estimates with their weights: γ_k = Σ_i Σ_m r for the Gaussians and
/// Σ_i Σ_k r for the classifiers.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct GmmUpdate {
    pub gaussians: Vec<Gaussian>,
    pub gaussian_weights: Vec<f64>,
    pub classifiers: Vec<Vec<f32>>,
    pub classifier_weights: Vec<f64>,
}

impl super::Finite for GmmUpdate {
    fn is_finite(&self) -> bool {
        self.classifiers.is_finite()
            && self.gaussian_weights.is_finite()
            && self.classifier_weights.is_finite()
            && self
                .gaussians
                .iter()
                .all(|g| g.mean.is_finite() && g.cov.is_finite())
    }
}

impl crate::io::Floats for GmmUpdate {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        self.classifiers.iter_mut().collect()
    }
}

impl FedGmm {
    /// The rows of `view` as the Gaussians see them (projected when the spec says so).
    fn inputs(&self, view: SplitView<'_>) -> GaussianInputs {
        let projection = self.projection.as_ref().map(|p| p.values.as_slice());
        match &self.encoder {
            None => GaussianInputs::new(&view, projection),
            Some(e) => e.inputs(view, projection),
        }
    }

    /// The dimension of the Gaussians' representation of rows of `input_dim` features.
    fn gaussian_dim(&self, input_dim: usize) -> usize {
        match (&self.projection, &self.encoder) {
            (Some(p), _) => p.cols,
            (None, Some(e)) => e.values(),
            (None, None) => input_dim,
        }
    }

    fn pairs(&self) -> usize {
        self.spec.gaussians * self.spec.classifiers
    }

    /// −log N(x_i; μ_k, Σ_k) + ℓ_m(i) for every pair (k, m) (index k·M + m) and row i: the
    /// "loss" of each pair, so that FedEM's E-step over pairs is FedGMM's.
    fn pair_losses(
        &self,
        arch: &Architecture,
        global: &GmmGlobal,
        view: SplitView<'_>,
        inputs: &GaussianInputs,
    ) -> Vec<Vec<f32>> {
        let losses = sample_losses(arch, &global.classifiers, view);
        self.pair_losses_of(global, &losses, inputs)
    }

    /// [`FedGmm::pair_losses`] from the classifiers' per-row `losses`.
    fn pair_losses_of(
        &self,
        global: &GmmGlobal,
        losses: &[Vec<f32>],
        inputs: &GaussianInputs,
    ) -> Vec<Vec<f32>> {
        let log_n = inputs.log_densities(&global.gaussians);
        let mut out = Vec::with_capacity(self.pairs());
        for ln in &log_n {
            for l in losses {
                out.push(
                    ln.iter()
                        .zip(l)
                        .map(|(&a, &b)| (b as f64 - a) as f32)
                        .collect(),
                );
            }
        }
        out
    }

    /// log π(k, m) + log N(x_i; μ_k, Σ_k) for every pair and row (index [k·M + m][i]).
    fn log_joint_inputs(
        &self,
        global: &GmmGlobal,
        pi: &[f64],
        inputs: &GaussianInputs,
    ) -> Vec<Vec<f64>> {
        let m = self.spec.classifiers;
        let mut out = Vec::with_capacity(self.pairs());
        for (k, ln) in inputs.log_densities(&global.gaussians).iter().enumerate() {
            for c in 0..m {
                let lp = pi[k * m + c].ln();
                out.push(ln.iter().map(|v| v + lp).collect());
            }
        }
        out
    }

    /// The local M-step of the Gaussians from row weights `w[k][i]` (ε added to each
    /// variance); a component with no weight here keeps the global estimate (its weight γ is
    /// 0 anyway).
    fn fit_gaussians(
        &self,
        global: &GmmGlobal,
        w: &[Vec<f64>],
        inputs: &GaussianInputs,
    ) -> Vec<Gaussian> {
        let diagonal = self.spec.covariance == Covariance::Diagonal;
        global
            .gaussians
            .iter()
            .zip(inputs.weighted_moments(w, diagonal))
            .map(|(g, moments)| match moments {
                None => g.clone(),
                Some((mean, mut cov)) => {
                    add_to_diagonal(&mut cov, mean.len(), self.spec.epsilon, diagonal);
                    Gaussian { mean, cov }
                }
            })
            .collect()
    }
}

/// cov += w · c cᵀ (only the diagonal when `diagonal`).
fn add_outer(cov: &mut [f64], c: &[f64], w: f64, diagonal: bool) {
    let d = c.len();
    if diagonal {
        cov.iter_mut().zip(c).for_each(|(v, ci)| *v += w * ci * ci);
        return;
    }
    for r in 0..d {
        let wr = w * c[r];
        for (v, cc) in cov[r * d..(r + 1) * d].iter_mut().zip(c) {
            *v += wr * cc;
        }
    }
}

fn add_to_diagonal(cov: &mut [f64], d: usize, eps: f64, diagonal: bool) {
    for j in 0..d {
        cov[if diagonal { j } else { j * d + j }] += eps;
    }
}

impl Algorithm for FedGmm {
    type Global = GmmGlobal;
    type ClientState = GmmClient;
    type Update = GmmUpdate;

    fn init_global(
        &self,
        arch: &Architecture,
        init: &mut InitialModels<'_, ChaCha20Rng>,
    ) -> GmmGlobal {
        let rng = init.rng();
        let d = self.gaussian_dim(arch.input_dim);
        let diagonal = self.spec.covariance == Covariance::Diagonal;
        let gaussians = (0..self.spec.gaussians)
            .map(|_| {
                let mean = (0..d).map(|_| StandardNormal.sample(rng)).collect();
                let mut cov = vec![0.0; if diagonal { d } else { d * d }];
                add_to_diagonal(&mut cov, d, self.spec.init_variance, diagonal);
                Gaussian { mean, cov }
            })
            .collect();
        let classifiers = (0..self.spec.classifiers).map(|_| init.model()).collect();
        GmmGlobal {
            gaussians,
            classifiers,
        }
    }

    fn init_client(&self, _: &GmmGlobal, _: u32) -> GmmClient {
        GmmClient {
            pi: vec![1.0 / self.pairs() as f64; self.pairs()],
            momentum: vec![Vec::new(); self.spec.classifiers],
            fitted: None,
        }
    }

    /// The classifiers, then each Gaussian as its mean followed by its covariance.
    fn models(&self, global: &GmmGlobal) -> Vec<Vec<f32>> {
        let gaussians = global.gaussians.iter().map(|g| {
            g.mean
                .iter()
                .chain(&g.cov)
                .map(|&v| v as f32)
                .collect::<Vec<f32>>()
        });
        global
            .classifiers
            .iter()
            .cloned()
            .chain(gaussians)
            .collect()
    }

    /// π(k, m) as the mixture weights, and its two marginals as extras: `gaussian_share`
    /// (Σ_m π(k, m), the client's weight on each Gaussian) and `classifier_share` (Σ_k π(k, m)).
    fn report(&self, _: &GmmGlobal, state: &GmmClient, _: u32) -> ClientReport {
        let m = self.spec.classifiers;
        let gaussian_share = state.pi.chunks(m).map(|row| row.iter().sum()).collect();
        let classifier_share = (0..m)
            .map(|c| state.pi.iter().skip(c).step_by(m).sum())
            .collect();
        ClientReport {
            mixture: Some(state.pi.clone()),
            extras: vec![
                ("gaussian_share".into(), gaussian_share),
                ("classifier_share".into(), classifier_share),
            ],
            ..Default::default()
        }
    }

    fn broadcast_len(&self, global: &GmmGlobal) -> usize {
        let gaussians: usize = global
            .gaussians
            .iter()
            .map(|g| g.mean.len() + g.cov.len())
            .sum();
        gaussians + global.classifiers.iter().map(Vec::len).sum::<usize>()
    }

    fn update_len(&self, update: &GmmUpdate) -> usize {
        let gaussians: usize = update
            .gaussians
            .iter()
            .map(|g| g.mean.len() + g.cov.len())
            .sum();
        gaussians
            + update.classifiers.iter().map(Vec::len).sum::<usize>()
            + update.gaussian_weights.len()
            + update.classifier_weights.len()
    }

    /// One pass of the plan per classifier (the E-step and the Gaussians' closed form are
    /// not charged).
    fn samples_processed(&self, plan: &LocalPlan, n_train: usize) -> u64 {
        self.spec.classifiers as u64 * plan.samples_processed(n_train)
    }

    /// E-step over all pairs (π moves) and the Gaussians' closed-form M-step, then one
    /// weighted run per classifier (rows weighted by Σ_k r), alone or stacked in a cohort.
    const UPDATE: LocalUpdate<Self> = LocalUpdate::Sgd(SgdUpdate {
        scores: Some(|global| global.classifiers.iter().map(Vec::as_slice).collect()),
        begin: |alg, ctx, global, state, _| {
            let view = ctx.train_view();
            let inputs = alg.inputs(view);
            let (k, m) = (alg.spec.gaussians, alg.spec.classifiers);
            let classified = ctx.train_losses(&global.classifiers);
            let losses = alg.pair_losses_of(global, &classified, &inputs);
            let (r, pi) = e_step(&state.pi, &losses);
            state.pi = pi;
            let n = view.len();
            // Row weights of each Gaussian (Σ_m r) and each classifier (Σ_k r).
            let mut w_gauss = vec![vec![0f64; n]; k];
            let mut w_class = vec![vec![0f32; n]; m];
            for a in 0..k {
                for b in 0..m {
                    for (i, &v) in r[a * m + b].iter().enumerate() {
                        w_gauss[a][i] += v as f64;
                        w_class[b][i] += v;
                    }
                }
            }
            state.fitted = Some(FittedGaussians {
                gaussians: alg.fit_gaussians(global, &w_gauss, &inputs),
                weights: w_gauss.iter().map(|w| w.iter().sum()).collect(),
            });
            weighted_runs(&global.classifiers, &w_class, &mut state.momentum)
        },
        finish: |_, _, _, state, runs| {
            let classifier_weights = runs
                .iter()
                .map(|run| {
                    let w = run.sample_weights.as_deref().unwrap_or_default();
                    w.iter().map(|&v| v as f64).sum()
                })
                .collect();
            let fitted = state
                .fitted
                .take()
                .expect("`begin` fits the Gaussians before `finish`");
            GmmUpdate {
                gaussians: fitted.gaussians,
                gaussian_weights: fitted.weights,
                classifiers: trained_models(runs, &mut state.momentum),
                classifier_weights,
            }
        },
        sends: SentRuns::All,
        keeps: None,
    });

    /// Every classifier, as averaged (the Gaussians are pooled moments, not stepped).
    const SERVER_OPTIMIZED: Option<super::AggregatedVectors<Self>> = Some(|global, next| {
        (global.classifiers.iter().zip(next.classifiers.iter_mut()))
            .map(|(g, n)| (&g[..], &mut n[..]))
            .collect()
    });

    /// μ_k = Σ_t γ_tk μ_tk / Σ_t γ_tk; Σ_k = Σ_t γ_tk (Σ_tk + (μ_tk − μ_k)(μ_tk − μ_k)ᵀ) /
    /// Σ_t γ_tk (the pooled covariance); θ_m weighted by Σ_i Σ_k r. All in client order, f64.
    /// Each Gaussian's moments pooled over the clients by their weights (from the updates'
    /// skeletons), and each classifier's weighted average (summed, where the updates' vectors
    /// are); a Gaussian or classifier that no client weighed keeps its global value.
    const SUMMED: Option<Summed<Self>> = Some(Summed {
        weight: |update, m| update.classifier_weights[m],
        finish: |fedgmm, global, sums, updates| {
            let diagonal = fedgmm.spec.covariance == Covariance::Diagonal;
            let gaussians = global
                .gaussians
                .iter()
                .enumerate()
                .map(|(k, g)| {
                    let total: f64 = updates.iter().map(|u| u.gaussian_weights[k]).sum();
                    if total.is_nan() || total <= 0.0 {
                        return g.clone();
                    }
                    let d = g.mean.len();
                    let mut mean = vec![0.0; d];
                    for u in &updates {
                        let w = u.gaussian_weights[k] / total;
                        mean.iter_mut()
                            .zip(&u.gaussians[k].mean)
                            .for_each(|(a, &b)| *a += w * b);
                    }
                    let mut cov = vec![0.0; g.cov.len()];
                    let mut c = vec![0.0; d];
                    for u in &updates {
                        let w = u.gaussian_weights[k] / total;
                        let local = &u.gaussians[k];
                        cov.iter_mut()
                            .zip(&local.cov)
                            .for_each(|(a, &b)| *a += w * b);
                        c.iter_mut()
                            .zip(local.mean.iter().zip(&mean))
                            .for_each(|(ci, (a, b))| *ci = a - b);
                        add_outer(&mut cov, &c, w, diagonal);
                    }
                    Gaussian { mean, cov }
                })
                .collect();
            let mut sums = sums;
            sums.resize(global.classifiers.len(), WeightedSum::default());
            let classifiers = (global.classifiers.iter().zip(sums))
                .map(|(theta, sum)| {
                    let total = sum.total();
                    match total.is_nan() || total <= 0.0 {
                        true => theta.clone(),
                        false => sum.average(),
                    }
                })
                .collect();
            GmmGlobal {
                gaussians,
                classifiers,
            }
        },
    });

    fn aggregate(&self, global: &GmmGlobal, updates: Updates<GmmUpdate>) -> GmmGlobal {
        super::summed_aggregate(self, global, updates)
    }

    /// π fitted by EM on the client's training data with the Gaussians and classifiers frozen.
    fn adapt_unseen(
        &self,
        ctx: &LocalContext<'_>,
        global: &GmmGlobal,
        _: &mut ChaCha20Rng,
    ) -> GmmClient {
        let view = ctx.train_view();
        let classified = ctx.train_losses(&global.classifiers);
        let losses = self.pair_losses_of(global, &classified, &self.inputs(view));
        let pi = fit_mixture_weights(
            &losses,
            self.spec.unseen_em_iterations,
            self.spec.unseen_em_tolerance,
        );
        GmmClient {
            pi,
            momentum: Vec::new(),
            fitted: None,
        }
    }

    fn tested_models<'a>(
        &'a self,
        _: &LocalContext<'_>,
        global: &'a GmmGlobal,
        state: &'a GmmClient,
        _: &mut ChaCha20Rng,
    ) -> Vec<Tested<'a>> {
        vec![Tested {
            kind: ModelKind::Mixture,
            model: Predictor::Mixture {
                components: global.classifiers.iter().map(Vec::as_slice).collect(),
                gates: MixtureGates::PerRow(Box::new(|view| self.gates(global, &state.pi, view))),
            },
        }]
    }

    /// log p(x, y) (or log p(x)) under the client's mixture.
    fn typicality(
        &self,
        ctx: &LocalContext<'_>,
        global: &GmmGlobal,
        state: &GmmClient,
        view: SplitView<'_>,
    ) -> Option<Vec<f64>> {
        let pi: Vec<f64> = state.pi.iter().map(|p| p.max(MIN_MIXTURE_WEIGHT)).collect();
        let inputs = self.inputs(view);
        let log_px = || log_sum_exp(&self.log_joint_inputs(global, &pi, &inputs));
        // log π(k, m) + log N_k(i) − ℓ_m(i): −(the E-step's pair loss) + log π.
        let log_pxy = || {
            let terms: Vec<Vec<f64>> = (self.pair_losses(ctx.arch, global, view, &inputs))
                .iter()
                .zip(&pi)
                .map(|(losses, p)| losses.iter().map(|&l| p.ln() - l as f64).collect())
                .collect();
            log_sum_exp(&terms)
        };
        Some(match self.spec.novelty_score {
            NoveltyScore::Input => log_px(),
            NoveltyScore::Joint => log_pxy(),
            NoveltyScore::Label => (log_pxy().iter().zip(log_px()))
                .map(|(xy, x)| xy - x)
                .collect(),
        })
    }
}

impl FedGmm {
    /// g_m(x_i) = Σ_k p(k, m | x_i), for each classifier m and row i.
    fn gates(&self, global: &GmmGlobal, pi: &[f64], view: SplitView<'_>) -> Vec<Vec<f64>> {
        let m = self.spec.classifiers;
        let pi: Vec<f64> = pi.iter().map(|p| p.max(MIN_MIXTURE_WEIGHT)).collect();
        let log_joint = self.log_joint_inputs(global, &pi, &self.inputs(view));
        let log_px = log_sum_exp(&log_joint);
        let mut gates = vec![vec![0.0; view.len()]; m];
        for (pair, lj) in log_joint.iter().enumerate() {
            for (i, (&l, &z)) in lj.iter().zip(&log_px).enumerate() {
                gates[pair % m][i] += (l - z).exp();
            }
        }
        gates
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use projection::ProjectionFile;

    fn view<'a>(features: &'a [f32], labels: &'a [i64], dim: usize) -> SplitView<'a> {
        SplitView {
            features,
            labels,
            dim,
        }
    }

    #[test]
    fn log_density_by_hand() {
        let log_2pi = (2.0 * std::f64::consts::PI).ln();
        let gaussian = |cov: Vec<f64>| Gaussian {
            mean: vec![0.0, 0.0],
            cov,
        };
        // All at once, as a mixture's Gaussians are: diag(1, 4) full and diagonal, a
        // correlated one, and one that is not positive definite (NaN, which the divergence
        // watch catches, and only for its own rows).
        let gaussians = [
            gaussian(vec![1.0, 0.0, 0.0, 4.0]),
            gaussian(vec![1.0, 4.0]),
            gaussian(vec![2.0, 1.0, 1.0, 2.0]),
            gaussian(vec![1.0, 2.0, 2.0, 1.0]),
        ];
        let (x, y) = ([1.0f32, 2.0, 1.0, 1.0], [0i64; 2]);
        let got = GaussianInputs::new(&view(&x, &y, 2), None).log_densities(&gaussians);
        // N(x; 0, diag(1, 4)) at (1, 2): −½(1 + 1 + ln 4 + 2 ln 2π); at (1, 1): −½(1 + ¼ + …).
        let diag = [
            -0.5 * (2.0 + 4f64.ln() + 2.0 * log_2pi),
            -0.5 * (1.25 + 4f64.ln() + 2.0 * log_2pi),
        ];
        // Σ = [[2, 1], [1, 2]], det 3: xᵀΣ⁻¹x = (2·1 − 2·2 + 2·4)/3 = 2 at (1, 2), 2/3 at (1, 1).
        let correlated = [
            -0.5 * (2.0 + 3f64.ln() + 2.0 * log_2pi),
            -0.5 * (2.0 / 3.0 + 3f64.ln() + 2.0 * log_2pi),
        ];
        for (k, want) in [diag, diag, correlated].iter().enumerate() {
            for (i, want) in want.iter().enumerate() {
                // The n·d² products run in f32.
                let got = got[k][i];
                assert!(
                    (got - want).abs() < 1e-5,
                    "Gaussian {k}, row {i}: {got} vs {want}"
                );
            }
        }
        assert!(got[3].iter().all(|v| v.is_nan()));
    }

    #[test]
    fn a_projection_is_read_checked_and_applied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.csv");
        std::fs::write(&path, "# z = x0 + x1\n1.0\n1\n").unwrap();
        let p = ProjectionFile::new(path.to_str().unwrap().to_string());
        let m = p.matrix().unwrap();
        assert_eq!((m.rows, m.cols, m.values.clone()), (2, 1, vec![1.0, 1.0]));
        // x = (1, 2) → z = 3: log N(3; 0, 1).
        let g = Gaussian {
            mean: vec![0.0],
            cov: vec![1.0],
        };
        let got = GaussianInputs::new(&view(&[1.0, 2.0], &[0], 2), Some(&m.values))
            .log_densities(std::slice::from_ref(&g))[0][0];
        let want = -0.5 * (9.0 + (2.0 * std::f64::consts::PI).ln());
        assert!((got - want).abs() < 1e-5);
        std::fs::write(&path, "1, 2\n3\n").unwrap();
        let e = Matrix::read(path.to_str().unwrap()).unwrap_err();
        assert!(e.contains("line 2: 1 values, the first row has 2"), "{e}");
        std::fs::write(&path, "1, x\n").unwrap();
        let e = Matrix::read(path.to_str().unwrap()).unwrap_err();
        assert!(e.contains("`x` is not a finite number"), "{e}");
        let mut spec: FedGmmSpec = serde_yaml::from_str("{}").unwrap();
        let missing = ProjectionFile::new(dir.path().join("none.csv").display().to_string());
        assert!(missing.matrix().unwrap_err().contains("cannot read"));
        spec.projection = Some(Projection::File(p));
        let population = three_feature_population();
        use crate::algorithms::AlgorithmSettings;
        let e = spec.check_data(&population).unwrap_err();
        assert_eq!(e.path, "projection");
        assert!(
            e.message
                .contains("has 2 rows; it needs one per input feature (3)"),
            "{e:?}"
        );
    }

    /// Two clients of 2 training rows of three features: rows (3, 1, 0),
    /// (−3, −1, 0) and (3, −1, 0), (−3, 1, 0); client 1 held out when `unseen`.
    fn three_feature_population() -> crate::algorithms::Population {
        let data = crate::data::FederatedData {
            layout: crate::data::Layout::Flat,
            dim: 3,
            classes: 2,
            features: vec![3., 1., 0., -3., -1., 0., 3., -1., 0., -3., 1., 0.],
            labels: vec![0, 1, 0, 1],
            clients: vec![
                crate::data::ClientShard {
                    train: 0..2,
                    val: 2..2,
                    test: 2..2,
                },
                crate::data::ClientShard {
                    train: 2..4,
                    val: 4..4,
                    test: 4..4,
                },
            ],
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        };
        crate::algorithms::Population {
            clients: 2,
            participants_train: 4,
            input_dim: 3,
            data: Arc::new(data),
            unseen: Vec::new(),
            arch: Architecture::new(&crate::models::ModelSpec::default(), 3, 2),
        }
    }

    #[test]
    fn a_pca_projection_is_parsed_checked_and_fitted_on_participants_training_rows() {
        use crate::algorithms::AlgorithmSettings;
        let spec: FedGmmSpec = serde_yaml::from_str("{projection: {kind: pca, dims: 1}}").unwrap();
        assert_eq!(spec.projection, Some(Projection::Pca { dims: 1 }));
        let text = serde_yaml::to_string(&spec).unwrap();
        assert!(
            text.contains("projection:\n  kind: pca\n  dims: 1\n"),
            "{text}"
        );
        let file: FedGmmSpec = serde_yaml::from_str("{projection: p.csv}").unwrap();
        assert!(matches!(file.projection, Some(Projection::File(ref f)) if f.path == "p.csv"));
        let e = serde_yaml::from_str::<FedGmmSpec>("{projection: {kind: pca, dim: 4}}");
        assert!(e.unwrap_err().to_string().contains("unknown field `dim`"));
        let zero: FedGmmSpec = serde_yaml::from_str("{projection: {kind: pca, dims: 0}}").unwrap();
        assert_eq!(zero.validate().unwrap_err().path, "projection.dims");
        let mut population = three_feature_population();
        let wide: FedGmmSpec = serde_yaml::from_str("{projection: {kind: pca, dims: 4}}").unwrap();
        let e = wide.check_data(&population).unwrap_err();
        assert!(
            e.message.contains("more than the 3 input features"),
            "{e:?}"
        );
        // All four rows: variance 9 along x, 1 along y: the axis is x.
        let alg = spec.build(&population);
        assert_eq!(alg.projection.as_ref().unwrap().values, [1.0, 0.0, 0.0]);
        // Client 0 alone, (3, 1, 0) and (−3, −1, 0): the axis is (3, 1, 0)/√10.
        population.unseen = vec![1];
        let alg = spec.build(&population);
        let p = &alg.projection.as_ref().unwrap().values;
        let want = [3.0 / 10f64.sqrt(), 1.0 / 10f64.sqrt(), 0.0];
        assert!(
            p.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
            "{p:?}"
        );
    }

    /// A features projection's spec over `network` (a layer list) with its weights `params`
    /// written to a file in `dir`.
    fn features_spec(
        dir: &std::path::Path,
        network: &str,
        input: InputShape,
        fields: &str,
        params: &[f32],
    ) -> FedGmmSpec {
        let file = dir.join("net.safetensors");
        let text = format!(
            "{{projection: {{kind: features, network: {{kind: layers, layers: {network}, init: \
             {{from: {}}}}}, classes: 2, {fields}}}}}",
            file.display()
        );
        let spec: FedGmmSpec = serde_yaml::from_str(&text).unwrap();
        let Some(Projection::Features(f)) = &spec.projection else {
            panic!("{text}")
        };
        let arch = f.architecture(input);
        std::fs::write(
            &file,
            crate::models::models_to_safetensors(&arch, &[params.to_vec()]),
        )
        .unwrap();
        spec
    }

    fn rows_of(alg: &FedGmm, population: &crate::algorithms::Population, client: u32) -> Vec<f32> {
        let rows = population.data.rows_for(&[client]);
        let view = rows
            .data()
            .view(rows.index(0), crate::records::Split::Train);
        alg.inputs(view).values()
    }

    #[test]
    fn a_features_projection_is_read_checked_and_applied_by_hand() {
        use crate::algorithms::AlgorithmSettings;
        let dir = tempfile::tempdir().unwrap();
        let population = three_feature_population();
        let input = InputShape::Flat(3);
        // relu(x0, x1), then a dense layer of one output (two classes).
        let net = "[{kind: dense, units: 2}, relu, dense]";
        let params = [1., 0., 0., 0., 1., 0., 0., 0., 0.5, -0.5, 1.];
        let spec = features_spec(dir.path(), net, input, "layer: 1", &params);
        spec.validate().unwrap();
        spec.check_data(&population).unwrap();
        let text = serde_yaml::to_string(&spec).unwrap();
        assert!(
            text.contains("kind: features") && text.contains("layer: 1"),
            "{text}"
        );
        assert!(!text.contains("pool") && !text.contains("dims"), "{text}");
        let alg = spec.build(&population);
        assert_eq!(alg.gaussian_dim(3), 2);
        // Client 0's rows (3, 1, 0) and (−3, −1, 0).
        assert_eq!(rows_of(&alg, &population, 0), [3., 1., 0., 0.]);
        // With dims: 1, over all four rows' (3, 1), (0, 0), (3, 0), (0, 1): variance 2.25
        // along the first value, 0.25 along the second, no covariance: the axis is the first.
        let spec = features_spec(dir.path(), net, input, "layer: 1, dims: 1", &params);
        let alg = spec.build(&population);
        assert_eq!(alg.gaussian_dim(3), 1);
        let z = rows_of(&alg, &population, 1);
        assert_eq!(z.iter().map(|v| v.abs()).collect::<Vec<_>>(), [3., 0.]);
        // Each mistake at its field.
        let error = |fields: &str| {
            let spec = features_spec(dir.path(), net, input, fields, &params);
            spec.validate()
                .and_then(|_| spec.check_data(&population))
                .unwrap_err()
        };
        let e = error("layer: 3");
        assert_eq!(e.path, "projection.layer");
        assert!(e.message.contains("3 layers, 0 to 2"), "{e:?}");
        assert_eq!(error("layer: 1, pool: max").path, "projection.pool");
        let e = error("layer: 1, dims: 3");
        assert_eq!(e.path, "projection.dims");
        assert!(e.message.contains("more than the 2 values"), "{e:?}");
        assert_eq!(error("layer: 1, dims: 0").path, "projection.dims");
        let unknown = serde_yaml::from_str::<FedGmmSpec>(
            "{projection: {kind: features, network: {kind: linear}, classes: 2, layers: 1}}",
        );
        let e = unknown.unwrap_err().to_string();
        assert!(e.contains("unknown field `layers`"), "{e}");
        let bare: FedGmmSpec = serde_yaml::from_str(
            "{projection: {kind: features, network: {kind: linear}, classes: 2, layer: 0}}",
        )
        .unwrap();
        assert_eq!(bare.validate().unwrap_err().path, "projection.network.init");
        // A file for another network: its error names the tensor and the field.
        let spec = features_spec(dir.path(), net, input, "layer: 1", &params);
        let three = "[{kind: dense, units: 3}, relu, dense]";
        features_spec(dir.path(), three, input, "layer: 1", &[0.; 16]); // replaces the file
        let e = spec.check_data(&population).unwrap_err();
        assert_eq!(e.path, "projection.network.init.from");
        assert!(e.message.contains("expected shape [2, 3]"), "{e:?}");
    }

    #[test]
    fn a_features_projection_pools_each_channel_by_hand() {
        use crate::algorithms::AlgorithmSettings;
        let dir = tempfile::tempdir().unwrap();
        // One client, two 1×2×2 images: (1, 2, 3, 4) and (0, 0, 0, 8).
        let data = crate::data::FederatedData {
            layout: crate::data::Layout::Image([1, 2, 2]),
            dim: 4,
            classes: 2,
            features: vec![1., 2., 3., 4., 0., 0., 0., 8.],
            labels: vec![0, 1],
            clients: vec![crate::data::ClientShard {
                train: 0..2,
                val: 2..2,
                test: 2..2,
            }],
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        };
        let population = crate::algorithms::Population {
            clients: 1,
            participants_train: 2,
            input_dim: 4,
            data: Arc::new(data),
            unseen: Vec::new(),
            arch: Architecture::new(&crate::models::ModelSpec::default(), 4, 2),
        };
        let input = InputShape::Image([1, 2, 2]);
        // A 1×1 convolution to two channels, x and 0.5 − x; then a dense layer.
        let net = "[{kind: conv, channels: 2, kernel: 1}, dense]";
        let params: Vec<f32> = [1., -1., 0., 0.5].into_iter().chain([0.; 9]).collect();
        let cases = [
            ("max", [4.0, -0.5, 8.0, 0.5]),
            ("avg", [2.5, -2.0, 2.0, -1.5]),
        ];
        for (pool, want) in cases {
            let fields = format!("layer: 0, pool: {pool}");
            let spec = features_spec(dir.path(), net, input, &fields, &params);
            spec.check_data(&population).unwrap();
            let alg = spec.build(&population);
            assert_eq!(alg.gaussian_dim(4), 2, "{pool}");
            assert_eq!(rows_of(&alg, &population, 0), want, "{pool}");
        }
        let spec = features_spec(dir.path(), net, input, "layer: 0", &params);
        let alg = spec.build(&population);
        assert_eq!(alg.gaussian_dim(4), 8);
    }

    fn spec(covariance: Covariance) -> FedGmmSpec {
        let mut s: FedGmmSpec = serde_yaml::from_str("{gaussians: 1, classifiers: 1}").unwrap();
        s.covariance = covariance;
        s.epsilon = 0.5;
        s
    }

    #[test]
    fn local_gaussian_fit_by_hand() {
        // Rows (0, 0), (2, 0), (1, 3) with weights 1, 1, 2: mean (1, 1.5);
        // Σ = (1·(−1, −1.5)² + 1·(1, −1.5)² + 2·(0, 1.5)²) / 4 + ε I.
        let alg = FedGmm {
            spec: spec(Covariance::Full),
            projection: None,
            encoder: None,
        };
        let global = GmmGlobal {
            gaussians: vec![Gaussian {
                mean: vec![0.0, 0.0],
                cov: vec![1.0, 0.0, 0.0, 1.0],
            }],
            classifiers: vec![],
        };
        let f = [0.0f32, 0.0, 2.0, 0.0, 1.0, 3.0];
        let y = [0i64; 3];
        let g = &alg.fit_gaussians(
            &global,
            &[vec![1.0, 1.0, 2.0]],
            &GaussianInputs::new(&view(&f, &y, 2), None),
        )[0];
        assert_eq!(g.mean, vec![1.0, 1.5]);
        let want = [
            2.0 / 4.0 + 0.5,
            0.0,
            0.0,
            (2.25 * 2.0 + 2.0 * 2.25) / 4.0 + 0.5,
        ];
        for (a, b) in g.cov.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{:?}", g.cov);
        }
        // No weight: the global estimate is kept.
        let kept = &alg.fit_gaussians(
            &global,
            &[vec![0.0; 3]],
            &GaussianInputs::new(&view(&f, &y, 2), None),
        )[0];
        assert_eq!(kept, &global.gaussians[0]);
    }

    #[test]
    fn pooled_covariance_includes_the_spread_of_client_means() {
        // Two clients with equal weight, means −1 and 1 on one axis, variance 1 each: the
        // pooled variance is 1 + 1 = 2 (their code would say 1), the mean 0.
        let alg = FedGmm {
            spec: spec(Covariance::Diagonal),
            projection: None,
            encoder: None,
        };
        let global = GmmGlobal {
            gaussians: vec![Gaussian {
                mean: vec![5.0],
                cov: vec![9.0],
            }],
            classifiers: vec![vec![0.0]],
        };
        let update = |mean: f64, theta: f32, w: f64| GmmUpdate {
            gaussians: vec![Gaussian {
                mean: vec![mean],
                cov: vec![1.0],
            }],
            gaussian_weights: vec![3.0],
            classifiers: vec![vec![theta]],
            classifier_weights: vec![w],
        };
        let next = alg.aggregate(
            &global,
            vec![(0, update(-1.0, 1.0, 1.0)), (1, update(1.0, 4.0, 2.0))].into(),
        );
        assert_eq!(next.gaussians[0].mean, vec![0.0]);
        assert_eq!(next.gaussians[0].cov, vec![2.0]);
        assert_eq!(next.classifiers[0], vec![3.0]);
    }

    #[test]
    fn gates_follow_the_input_posterior() {
        // Two Gaussians far apart, π puts Gaussian 0 with classifier 0 and Gaussian 1 with
        // classifier 1: a row at Gaussian 1's mean is gated almost entirely to classifier 1.
        let s: FedGmmSpec = serde_yaml::from_str("{gaussians: 2, classifiers: 2}").unwrap();
        let alg = FedGmm {
            spec: s,
            projection: None,
            encoder: None,
        };
        let global = GmmGlobal {
            gaussians: vec![
                Gaussian {
                    mean: vec![-5.0],
                    cov: vec![1.0],
                },
                Gaussian {
                    mean: vec![5.0],
                    cov: vec![1.0],
                },
            ],
            classifiers: vec![vec![0.0, 0.0], vec![0.0, 0.0]],
        };
        let pi = [0.5, 0.0, 0.0, 0.5];
        let (x, y) = ([5.0f32], [0i64]);
        let g = alg.gates(&global, &pi, view(&x, &y, 1));
        assert!(g[1][0] > 0.999_999 && g[0][0] < 1e-6, "{g:?}");
        // log p(x) = log(½ N(5; −5, 1) + ½ N(5; 5, 1)) ≈ log ½ + log N(0; 0, 1).
        let lp = log_sum_exp(&alg.log_joint_inputs(
            &global,
            &pi,
            &GaussianInputs::new(&view(&x, &y, 1), None),
        ))[0];
        let want = 0.5f64.ln() - 0.5 * (2.0 * std::f64::consts::PI).ln();
        assert!((lp - want).abs() < 1e-9, "{lp} vs {want}");
    }
}
