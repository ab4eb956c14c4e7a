//! The FedEM synthetic benchmark (Marfoq et al. 2021, App. I.1.5): every client's distribution
//! is a mixture of M linear-logistic components over a shared uniform marginal.
//!
//! 1. π_t ~ Dir(α) for each client t;  2. θ_m ~ U[−1, 1]^d;
//! 3. n_t = min(min_samples + ⌊LogNormal(μ, σ)⌋, max_samples);
//! 4. x ~ U[−1, 1]^d, z ~ Cat(π_t), ε ~ N(0, noise²);  5. y from ⟨x, θ_z⟩ + ε (see [`LabelRule`]).
//!
//! The authors' generator never advances the index into its label array, so only the first
//! `max_m count_m` samples get labels and the others stay 0 (about 27% of labels forced to 0).
//! `authors_label_bug: true` reproduces that for comparison; by default every sample is labelled
//! by its own component, as the paper describes.
//!
//! Draws come from the seed tree, unless `numpy_seed` is set: then they come from numpy's legacy
//! MT19937 stream in the order of the authors' `generate_data.py`, which rebuilds their data set
//! exactly (their files used seed 12345), so that fedsim and their code can be compared on the
//! same data.

use super::{DataError, FederatedData, MixtureTruth, NumpyRandomState, SplitSpec};
use super::{DatasetSettings, InputShape};
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Dirichlet, Distribution, LogNormal, Normal};
use serde::{Deserialize, Serialize};

/// How a label follows from the noisy logit v = ⟨x, θ_z⟩ + ε.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LabelRule {
    /// y = round(sigmoid(v)) = 1{v > 0}: what the authors' generator does (default).
    #[default]
    RoundedSigmoid,
    /// y ~ Bernoulli(sigmoid(v)): the paper's text.
    Bernoulli,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedemSyntheticSpec {
    /// T, the number of clients.
    #[serde(default = "d_clients")]
    pub clients: usize,
    /// M, the number of mixture components.
    #[serde(default = "d_components")]
    pub components: usize,
    /// d, the feature dimension.
    #[serde(default = "d_dim")]
    pub dim: usize,
    /// α of the symmetric Dirichlet prior on mixture weights.
    #[serde(default = "d_alpha")]
    pub alpha: f64,
    /// Standard deviation of the logit noise ε.
    #[serde(default = "d_noise")]
    pub noise: f64,
    /// The fewest rows a client has (before the split).
    #[serde(default = "d_min_samples")]
    pub min_samples: usize,
    /// The most rows a client has (before the split).
    #[serde(default = "d_max_samples")]
    pub max_samples: usize,
    /// μ of the log-normal law of extra samples per client.
    #[serde(default = "d_ln_mean")]
    pub lognormal_mean: f64,
    /// σ of the log-normal law of extra samples per client.
    #[serde(default = "d_ln_sigma")]
    pub lognormal_sigma: f64,
    /// How a label follows from the noisy logit v = ⟨x, θ_z⟩ + ε.
    #[serde(default)]
    pub labels: LabelRule,
    /// Reproduce the authors' label bug (off by default).
    #[serde(default)]
    pub authors_label_bug: bool,
    /// Draw everything from numpy's legacy `RandomState(numpy_seed)` in the authors' order
    /// (their data: 12345) instead of the seed tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numpy_seed: Option<u32>,
    /// FedEM App. J.4: each client draws all its samples from one component (uniformly chosen)
    /// instead of a Dirichlet mixture.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub one_hot: bool,
    /// Make each client's rows when a job needs them instead of holding them all (the same
    /// rows, so the same results): for populations too large to hold. Only the sizes are kept
    /// (4 bytes per client); the true mixture weights are not, so `describe` gives no
    /// Bayes-optimal accuracy and `system.compute.slowest_to_component` is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_demand: bool,
    /// Each client's n_t from a population file instead of the lognormal law: the row of
    /// `client` t in `column` (CSV or Parquet; whole numbers ≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes_from: Option<ColumnFile>,
}

/// A per-client column of a population file (CSV or Parquet with a `client` column).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ColumnFile {
    /// The population file (CSV or Parquet), relative to the working directory.
    pub path: std::path::PathBuf,
    /// The column that holds each client's value.
    pub column: String,
}

fn d_clients() -> usize {
    300
}
fn d_components() -> usize {
    3
}
fn d_dim() -> usize {
    150
}
fn d_alpha() -> f64 {
    0.4
}
fn d_noise() -> f64 {
    0.1
}
fn d_min_samples() -> usize {
    50
}
fn d_max_samples() -> usize {
    1000
}
fn d_ln_mean() -> f64 {
    4.0
}
fn d_ln_sigma() -> f64 {
    2.0
}

impl Default for FedemSyntheticSpec {
    fn default() -> Self {
        FedemSyntheticSpec {
            clients: d_clients(),
            components: d_components(),
            dim: d_dim(),
            alpha: d_alpha(),
            noise: d_noise(),
            min_samples: d_min_samples(),
            max_samples: d_max_samples(),
            lognormal_mean: d_ln_mean(),
            lognormal_sigma: d_ln_sigma(),
            labels: LabelRule::default(),
            authors_label_bug: false,
            numpy_seed: None,
            one_hot: false,
            on_demand: false,
            sizes_from: None,
        }
    }
}

impl FedemSyntheticSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        let err = |f: &str, m: String| Err(FieldError::new(f.to_string(), m));
        FieldError::at_least_one("clients", self.clients)?;
        FieldError::at_least_one("components", self.components)?;
        FieldError::at_least_one("dim", self.dim)?;
        FieldError::positive("alpha", self.alpha)?;
        FieldError::non_negative("noise", self.noise)?;
        FieldError::at_least_one("min_samples", self.min_samples)?;
        if self.sizes_from.is_some() && self.numpy_seed.is_some() {
            return err(
                "sizes_from",
                "cannot be combined with `numpy_seed` (the authors' generator draws the sizes)"
                    .into(),
            );
        }
        if self.one_hot && self.numpy_seed.is_some() {
            return err(
                "one_hot",
                "cannot be combined with numpy_seed (the authors' generator draws Dirichlet \
                 weights)"
                    .into(),
            );
        }
        if self.on_demand && self.numpy_seed.is_some() {
            return err(
                "on_demand",
                "cannot be combined with numpy_seed (numpy's stream draws every client in turn; \
                 on-demand rows need each client's own stream)"
                    .into(),
            );
        }
        if self.on_demand && self.max_samples > u32::MAX as usize {
            return err(
                "max_samples",
                format!("must be at most {} with on_demand", u32::MAX),
            );
        }
        if self.max_samples < self.min_samples {
            return err(
                "max_samples",
                format!("must be at least min_samples ({})", self.min_samples),
            );
        }
        FieldError::positive("lognormal_sigma", self.lognormal_sigma)?;
        if !self.lognormal_mean.is_finite() {
            return err("lognormal_mean", "must be a finite number".into());
        }
        if self.numpy_seed.is_some() && self.labels != LabelRule::RoundedSigmoid {
            return err(
                "labels",
                "must be rounded_sigmoid when numpy_seed is set (the authors' generator rounds)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Draws n_t for every client.
    pub fn sample_sizes(&self, seeds: &SeedTree) -> Vec<usize> {
        let mut rng = seeds.rng(Entity::Data, "fedem_synthetic/sizes", 0);
        let law = LogNormal::new(self.lognormal_mean, self.lognormal_sigma).expect("validated");
        (0..self.clients)
            .map(|_| {
                let extra = law.sample(&mut rng).floor();
                let extra = if extra.is_finite() {
                    extra.min(1e12) as usize
                } else {
                    usize::MAX
                };
                self.min_samples.saturating_add(extra).min(self.max_samples)
            })
            .collect()
    }

    /// The data set, with the sizes read from `sizes_from` when it is given.
    pub fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        let Some(file) = &self.sizes_from else {
            return Ok(self.generate(split, seeds));
        };
        // Messages say which setting read the file.
        let content = |message: String| DataError::Content {
            path: file.path.clone(),
            message: format!("data.sizes_from: {message}"),
        };
        let sizes = self.read_sizes(file)?;
        // Before anything is allocated: the rows must fit this process's memory.
        if let Some(available) = crate::io::machine_memory() {
            let (rows, _) = self.rows_held(&sizes, split);
            let bytes = rows * (4.0 * self.dim as f64 + 8.0);
            if bytes > available {
                let (largest, n) = (sizes.iter().enumerate())
                    .max_by_key(|(_, n)| **n)
                    .map(|(c, n)| (c, *n))
                    .unwrap_or_default();
                return Err(content(format!(
                    "the clients' rows ({rows} of {} features{}) take {}, more than this \
                     machine's {} (the largest, client {largest}, has {n}); use smaller sizes{}",
                    self.dim,
                    if self.on_demand {
                        ", the largest client's made at once on demand"
                    } else {
                        ""
                    },
                    crate::io::input::human_bytes(bytes),
                    crate::io::input::human_bytes(available),
                    if self.on_demand {
                        ""
                    } else {
                        ", or `data.on_demand: true` to make each client's rows only when a job \
                         needs them"
                    }
                )));
            }
        }
        Ok(self.generate_sized(split, seeds, sizes))
    }

    /// The rows held at once for clients of `sizes` and the features per row: every client's
    /// (with the split's extra test rows), or with rows on demand the largest client's.
    fn rows_held(&self, sizes: &[usize], split: &SplitSpec) -> (f64, usize) {
        let rows = |n: usize| (n + split.extra_samples()) as f64;
        let held = if self.on_demand {
            sizes.iter().map(|&n| rows(n)).fold(0.0, f64::max)
        } else {
            sizes.iter().map(|&n| rows(n)).sum()
        };
        (held, self.dim)
    }

    /// Each client's n_t from `sizes_from`: whole numbers from 1 to 2³² − 1.
    fn read_sizes(&self, file: &ColumnFile) -> Result<Vec<usize>, DataError> {
        let content = |message: String| DataError::Content {
            path: file.path.clone(),
            message: format!("data.sizes_from: {message}"),
        };
        let whole = |n: &f64| {
            if *n >= 1.0 && n.fract() == 0.0 && *n <= u32::MAX as f64 {
                Ok(())
            } else {
                Err(format!(
                    "must be a whole number of samples from 1 to {} (a client's rows are \
                     counted in 32 bits)",
                    u32::MAX
                ))
            }
        };
        Ok(
            crate::io::per_client_column(&file.path, &file.column, self.clients, &whole)
                .map_err(|e| content(e.message))?
                .into_iter()
                .map(|n| n as usize)
                .collect(),
        )
    }

    /// The data set, sizes drawn from the lognormal law.
    pub fn generate(&self, split: &SplitSpec, seeds: &SeedTree) -> FederatedData {
        if let Some(seed) = self.numpy_seed {
            return self.generate_numpy(split, seed);
        }
        self.generate_sized(split, seeds, self.sample_sizes(seeds))
    }

    fn generate_sized(
        &self,
        split: &SplitSpec,
        seeds: &SeedTree,
        sizes: Vec<usize>,
    ) -> FederatedData {
        let components = self.components(seeds);
        if self.on_demand {
            return self.on_demand_data(split, seeds, components, sizes);
        }
        let weights: Vec<Vec<f64>> = (0..self.clients)
            .map(|t| self.mixture_weights(seeds, t))
            .collect();
        let total: usize = sizes.iter().map(|&n| n + split.extra_samples()).sum();
        let mut features = Vec::with_capacity(total * self.dim);
        let mut labels = Vec::with_capacity(total);
        let mut clients = Vec::with_capacity(self.clients);
        for (t, &n) in sizes.iter().enumerate() {
            let start = labels.len();
            let client = ClientDraw {
                n,
                extra: split.extra_samples(),
                pi: &weights[t],
            };
            self.client_rows(seeds, t, client, &components, &mut features, &mut labels);
            clients.push(split.shard(start, n));
        }
        self.binary_mixture(features, labels, clients, components, weights)
    }

    /// θ_1 … θ_M.
    fn components(&self, seeds: &SeedTree) -> Vec<Vec<f64>> {
        let mut rng = seeds.rng(Entity::Data, "fedem_synthetic/components", 0);
        (0..self.components)
            .map(|_| (0..self.dim).map(|_| rng.gen_range(-1.0..1.0)).collect())
            .collect()
    }

    /// π_t, from client `t`'s own stream.
    fn mixture_weights(&self, seeds: &SeedTree, t: usize) -> Vec<f64> {
        let m = self.components;
        if m == 1 {
            return vec![1.0];
        }
        let mut rng = seeds.rng(Entity::Data, "fedem_synthetic/mixture", t as u64);
        if self.one_hot {
            let mut w = vec![0.0; m];
            w[rng.gen_range(0..m)] = 1.0;
            return w;
        }
        Dirichlet::new(&vec![self.alpha; m])
            .expect("validated")
            .sample(&mut rng)
    }

    /// Client `t`'s rows from its own stream: its `n` own samples (train, val, test in that
    /// order), then `extra` test samples.
    fn client_rows(
        &self,
        seeds: &SeedTree,
        t: usize,
        client: ClientDraw<'_>,
        components: &[Vec<f64>],
        features: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) {
        let noise = Normal::new(0.0, self.noise).expect("validated");
        let mut rng = seeds.rng(Entity::Data, "fedem_synthetic/samples", t as u64);
        for count in [client.n, client.extra] {
            self.draw_samples(
                count, components, client.pi, &noise, &mut rng, features, labels,
            );
        }
    }

    /// The data set with only the sizes held; rows are made per client when asked.
    fn on_demand_data(
        &self,
        split: &SplitSpec,
        seeds: &SeedTree,
        components: Vec<Vec<f64>>,
        sizes: Vec<usize>,
    ) -> FederatedData {
        let rows = OnDemandMixture {
            spec: self.clone(),
            split: split.clone(),
            seeds: *seeds,
            components,
            sizes: sizes.into_iter().map(|n| n as u32).collect(),
        };
        FederatedData::made_on_demand(super::Layout::Flat, self.dim, 2, rows)
    }

    fn label(&self, logit: f64, rng: &mut ChaCha20Rng) -> i64 {
        match self.labels {
            LabelRule::RoundedSigmoid => (logit > 0.0) as i64,
            LabelRule::Bernoulli => rng.gen_bool(sigmoid(logit)) as i64,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn draw_samples(
        &self,
        count: usize,
        components: &[Vec<f64>],
        pi: &[f64],
        noise: &Normal<f64>,
        rng: &mut ChaCha20Rng,
        features: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) {
        let first = labels.len();
        let mut latent = Vec::with_capacity(count);
        for _ in 0..count {
            let row = features.len();
            features.extend((0..self.dim).map(|_| rng.gen_range(-1.0f32..1.0)));
            let z = sample_categorical(pi, rng);
            let x = &features[row..row + self.dim];
            let logit: f64 = x
                .iter()
                .zip(&components[z])
                .map(|(&xi, &ti)| xi as f64 * ti)
                .sum::<f64>()
                + noise.sample(rng);
            let y = self.label(logit, rng);
            latent.push(z);
            labels.push(y);
        }
        if self.authors_label_bug {
            // The authors write component m's labels into y[0..count_m] for every m in turn,
            // computed from x[0..count_m]; rows past the largest count stay 0.
            let mut counts = vec![0usize; components.len()];
            for &z in &latent {
                counts[z] += 1;
            }
            let ys = &mut labels[first..];
            ys.iter_mut().for_each(|y| *y = 0);
            for (m, &c) in counts.iter().enumerate() {
                for (i, y) in ys.iter_mut().enumerate().take(c) {
                    let x = &features[(first + i) * self.dim..(first + i + 1) * self.dim];
                    let logit: f64 = x
                        .iter()
                        .zip(&components[m])
                        .map(|(&xi, &ti)| xi as f64 * ti)
                        .sum::<f64>()
                        + noise.sample(rng);
                    *y = self.label(logit, rng);
                }
            }
        }
    }
}

impl FedemSyntheticSpec {
    /// The authors' generator, draw for draw: sizes, mixture weights, components, then for each
    /// client its own samples and its extra test samples (multinomial counts, features, noise
    /// per component, shuffle).
    ///
    /// The stream is walked once, in order, taking every draw but the features: each block of
    /// rows keeps a copy of the state its features start from ([`NumpyBlock`]). The blocks'
    /// rows are then made on every core at once, each into its own place; no block's rows
    /// depend on which thread makes them or when.
    fn generate_numpy(&self, split: &SplitSpec, seed: u32) -> FederatedData {
        let (d, m) = (self.dim, self.components);
        let mut rs = NumpyRandomState::new(seed);
        let sizes: Vec<usize> = (0..self.clients)
            .map(|_| {
                let extra = rs
                    .lognormal(self.lognormal_mean, self.lognormal_sigma)
                    .trunc();
                (self.min_samples as f64 + extra).min(self.max_samples as f64) as usize
            })
            .collect();
        let weights: Vec<Vec<f64>> = (0..self.clients)
            .map(|_| rs.dirichlet(&vec![self.alpha; m]))
            .collect();
        let components: Vec<Vec<f64>> = (0..m)
            .map(|_| (0..d).map(|_| rs.uniform(-1.0, 1.0)).collect())
            .collect();
        let mut blocks = Vec::with_capacity(2 * self.clients);
        let mut clients = Vec::with_capacity(self.clients);
        let mut rows = 0;
        for (t, &n) in sizes.iter().enumerate() {
            for count in [n, split.extra_samples()] {
                if count == 0 {
                    continue;
                }
                let counts = rs.multinomial(count as i64, &weights[t]);
                let features = rs.clone();
                rs.skip_uniform(count * d);
                // One logit noise per row (the counts sum to `count`).
                let noise = (0..count).map(|_| rs.normal(0.0, self.noise)).collect();
                let mut order: Vec<usize> = (0..count).collect();
                rs.shuffle(&mut order);
                blocks.push(NumpyBlock {
                    features,
                    counts,
                    noise,
                    order,
                });
            }
            clients.push(split.shard(rows, n));
            rows += n + split.extra_samples();
        }
        let mut features = vec![0f32; rows * d];
        let mut labels = vec![0i64; rows];
        let mut places = Vec::with_capacity(blocks.len());
        let (mut rest_x, mut rest_y) = (&mut features[..], &mut labels[..]);
        for block in &blocks {
            let count = block.order.len();
            let (x, more_x) = std::mem::take(&mut rest_x).split_at_mut(count * d);
            let (y, more_y) = std::mem::take(&mut rest_y).split_at_mut(count);
            (rest_x, rest_y) = (more_x, more_y);
            places.push((block, x, y));
        }
        let work = std::sync::Mutex::new(places.into_iter());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let next = work.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((block, x, y)) = next else { break };
                    self.make_numpy_block(block, &components, x, y);
                });
            }
        });
        self.binary_mixture(features, labels, clients, components, weights)
    }

    /// One block's rows, as the authors' loop makes them: features, each component's labels
    /// from ⟨x, θ⟩ plus its noise, then the rows in shuffled order.
    fn make_numpy_block(
        &self,
        block: &NumpyBlock,
        components: &[Vec<f64>],
        features: &mut [f32],
        labels: &mut [i64],
    ) {
        let (d, count) = (self.dim, block.order.len());
        let mut rs = block.features.clone();
        let mut x = vec![0.0; count * d];
        rs.fill_uniform(&mut x, -1.0, 1.0);
        let mut y = vec![0i64; count];
        let (mut at, mut noise) = (0, block.noise.iter());
        for (comp, &c) in block.counts.iter().enumerate() {
            let c = c as usize;
            let dots = row_dots(&x[at * d..(at + c) * d], &components[comp]);
            for ((i, dot), eps) in (at..at + c).zip(dots).zip(&mut noise) {
                let p = sigmoid(dot + eps);
                y[i] = p.round_ties_even() as i64;
            }
            if !self.authors_label_bug {
                at += c;
            }
        }
        for ((&i, out), label) in block
            .order
            .iter()
            .zip(features.chunks_exact_mut(d))
            .zip(labels)
        {
            for (o, &v) in out.iter_mut().zip(&x[i * d..(i + 1) * d]) {
                *o = v as f32;
            }
            *label = y[i];
        }
    }
}

/// One block of rows of the authors' generator (a client's own samples, or its extra test
/// samples) with the draws the sequential walk took for it.
struct NumpyBlock {
    /// The state its features are drawn from.
    features: NumpyRandomState,
    /// Its rows per component (multinomial).
    counts: Vec<i64>,
    /// The label noise, one draw per row in component order: `normal(0, noise)`.
    noise: Vec<f64>,
    /// Its shuffle.
    order: Vec<usize>,
}

/// ⟨x, θ⟩ for each row of `rows` (`θ.len()` values each), every sum from the left (the order
/// this generator's labels have always used); four rows at a time, so that the CPU overlaps
/// their sums (one row's adds wait for each other).
fn row_dots(rows: &[f64], theta: &[f64]) -> Vec<f64> {
    let d = theta.len();
    let mut dots = Vec::with_capacity(rows.len() / d.max(1));
    let mut quads = rows.chunks_exact(4 * d);
    for quad in &mut quads {
        let mut s = [0f64; 4];
        for (j, &t) in theta.iter().enumerate() {
            for (r, s) in s.iter_mut().enumerate() {
                *s += quad[r * d + j] * t;
            }
        }
        dots.extend(s);
    }
    for row in quads.remainder().chunks_exact(d) {
        dots.push(row.iter().zip(theta).map(|(a, b)| a * b).sum());
    }
    dots
}

impl FedemSyntheticSpec {
    /// How labels follow from ⟨x, θ_z⟩; `None` with `authors_label_bug`, whose labels do not
    /// follow the model.
    fn label_law(&self) -> Option<LabelLaw> {
        (!self.authors_label_bug).then_some(LabelLaw {
            rule: self.labels,
            noise: self.noise,
        })
    }

    fn binary_mixture(
        &self,
        features: Vec<f32>,
        labels: Vec<i64>,
        clients: Vec<super::ClientShard>,
        components: Vec<Vec<f64>>,
        weights: Vec<Vec<f64>>,
    ) -> FederatedData {
        FederatedData {
            layout: super::Layout::Flat,
            dim: self.dim,
            classes: 2,
            features,
            labels,
            clients,
            truth: Some(MixtureTruth {
                components,
                weights,
                labels: self.label_law(),
                inputs: None,
            }),
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        }
    }
}

/// The label law of the FedEM synthetic data: y from the logit ⟨x, θ_z⟩ + ε, ε ~ N(0, noise²).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LabelLaw {
    pub rule: LabelRule,
    pub noise: f64,
}

impl LabelLaw {
    /// P(y = 1 | ⟨x, θ_z⟩ = `mean_logit`), the noise integrated out.
    pub fn positive_probability(&self, mean_logit: f64) -> f64 {
        let sigma = self.noise;
        match self.rule {
            // P(mean + ε > 0) = Φ(mean / σ).
            LabelRule::RoundedSigmoid if sigma == 0.0 => (mean_logit > 0.0) as u8 as f64,
            LabelRule::RoundedSigmoid => {
                0.5 * libm::erfc(-mean_logit / (sigma * std::f64::consts::SQRT_2))
            }
            // E[sigmoid(mean + σu)], u ~ N(0, 1): composite Simpson over u ∈ [−8, 8].
            LabelRule::Bernoulli if sigma == 0.0 => sigmoid(mean_logit),
            LabelRule::Bernoulli => {
                const STEPS: usize = 128;
                let h = 16.0 / STEPS as f64;
                let f = |u: f64| {
                    (-0.5 * u * u).exp() / (2.0 * std::f64::consts::PI).sqrt()
                        * sigmoid(mean_logit + sigma * u)
                };
                let inner: f64 = (1..STEPS)
                    .map(|k| (if k % 2 == 1 { 4.0 } else { 2.0 }) * f(-8.0 + k as f64 * h))
                    .sum();
                h / 3.0 * (f(-8.0) + inner + f(8.0))
            }
        }
    }
}

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

fn sample_categorical(p: &[f64], rng: &mut ChaCha20Rng) -> usize {
    let u: f64 = rng.gen::<f64>() * p.iter().sum::<f64>();
    let mut acc = 0.0;
    for (i, &pi) in p.iter().enumerate() {
        acc += pi;
        if u < acc {
            return i;
        }
    }
    p.len() - 1
}

/// What one client's draw needs besides its stream.
#[derive(Clone, Copy)]
struct ClientDraw<'a> {
    n: usize,
    extra: usize,
    pi: &'a [f64],
}

/// The FedEM synthetic data made per client (`on_demand: true`): exactly the rows the resident
/// generator holds, from the same per-client streams.
#[derive(Debug)]
struct OnDemandMixture {
    spec: FedemSyntheticSpec,
    split: SplitSpec,
    seeds: SeedTree,
    components: Vec<Vec<f64>>,
    /// n_t, each client's own samples.
    sizes: Vec<u32>,
}

impl super::OnDemandRows for OnDemandMixture {
    fn num_clients(&self) -> usize {
        self.sizes.len()
    }

    fn split_sizes(&self, client: usize) -> super::SplitSizes {
        self.split.sizes(self.sizes[client] as usize)
    }

    fn make_rows(&self, client: usize, features: &mut Vec<f32>, labels: &mut Vec<i64>) {
        let pi = self.spec.mixture_weights(&self.seeds, client);
        let draw = ClientDraw {
            n: self.sizes[client] as usize,
            extra: self.split.extra_samples(),
            pi: &pi,
        };
        let spec = &self.spec;
        spec.client_rows(
            &self.seeds,
            client,
            draw,
            &self.components,
            features,
            labels,
        );
    }
}

impl DatasetSettings for FedemSyntheticSpec {
    fn validate(&self) -> Result<(), FieldError> {
        FedemSyntheticSpec::validate(self)
    }
    fn num_clients(&self) -> Option<usize> {
        Some(self.clients)
    }
    fn input_shape(&self) -> Option<InputShape> {
        Some(InputShape::Flat(self.dim))
    }
    fn classes(&self) -> Option<usize> {
        Some(2)
    }
    fn least_rows(&self) -> Option<(f64, usize)> {
        // Rows made on demand are not held.
        let rows = if self.on_demand {
            0.0
        } else {
            self.clients as f64 * self.min_samples as f64
        };
        Some((rows, self.dim))
    }
    fn planned_rows(&self, split: &SplitSpec) -> Result<Option<(f64, usize)>, DataError> {
        match &self.sizes_from {
            Some(file) => Ok(Some(self.rows_held(&self.read_sizes(file)?, split))),
            None => Ok(None),
        }
    }
    const ON_DEMAND: bool = true;
    fn asks_on_demand(&self) -> bool {
        self.on_demand
    }
    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        FedemSyntheticSpec::build(self, split, seeds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> FedemSyntheticSpec {
        FedemSyntheticSpec {
            clients: 20,
            dim: 10,
            ..Default::default()
        }
    }

    #[test]
    fn rows_made_on_demand_are_the_resident_rows_on_an_aligned_buffer() {
        let seeds = SeedTree::new(4);
        for split in [
            SplitSpec::default(),
            SplitSpec::ExtraTest {
                test_samples: 7,
                val: 0.25,
            },
        ] {
            let resident = small().generate(&split, &seeds);
            let lazy = FedemSyntheticSpec {
                on_demand: true,
                ..small()
            }
            .generate(&split, &seeds);
            // Clients in any order, one of them twice.
            lazy.assert_makes_the_rows_of(&resident, &[13, 2, 19, 2]);
        }
        let both = FedemSyntheticSpec {
            on_demand: true,
            numpy_seed: Some(1),
            ..small()
        };
        assert_eq!(both.validate().unwrap_err().path, "on_demand");
    }

    #[test]
    fn sizes_follow_the_clamped_lognormal_law() {
        let spec = FedemSyntheticSpec {
            clients: 3000,
            ..Default::default()
        };
        let sizes = spec.sample_sizes(&SeedTree::new(1));
        assert!(sizes.iter().all(|&n| (50..=1000).contains(&n)));
        let capped = sizes.iter().filter(|&&n| n == 1000).count() as f64 / 3000.0;
        // P(LogNormal(4, 2) >= 950) = P(Z >= (ln 950 - 4) / 2) ≈ 0.077.
        assert!((capped - 0.077).abs() < 0.02, "share at the cap {capped}");
        let median = {
            let mut s = sizes.clone();
            s.sort();
            s[1500]
        };
        // median = 50 + ⌊e^4⌋ ≈ 104.
        assert!((95..=115).contains(&median), "median {median}");
    }

    #[test]
    fn every_label_comes_from_a_component() {
        let spec = FedemSyntheticSpec {
            noise: 0.0,
            ..small()
        };
        let data = spec.generate(
            &SplitSpec::ExtraTest {
                test_samples: 50,
                val: 0.0,
            },
            &SeedTree::new(3),
        );
        let truth = data.truth.as_ref().unwrap();
        for row in 0..data.labels.len() {
            let x = &data.features[row * data.dim..(row + 1) * data.dim];
            let explained = truth.components.iter().any(|th| {
                let v: f64 = x.iter().zip(th).map(|(&a, &b)| a as f64 * b).sum();
                ((v > 0.0) as i64) == data.labels[row]
            });
            assert!(explained, "row {row} has a label no component gives");
        }
        let ones = data.labels.iter().filter(|&&y| y == 1).count() as f64;
        let share = ones / data.labels.len() as f64;
        assert!((share - 0.5).abs() < 0.05, "positive share {share}");
    }

    #[test]
    fn authors_bug_forces_zeros() {
        let spec = FedemSyntheticSpec {
            authors_label_bug: true,
            ..small()
        };
        let data = spec.generate(
            &SplitSpec::ExtraTest {
                test_samples: 2000,
                val: 0.0,
            },
            &SeedTree::new(3),
        );
        let ones = data.labels.iter().filter(|&&y| y == 1).count() as f64;
        let share = ones / data.labels.len() as f64;
        assert!(
            share < 0.45,
            "positive share {share} should be well below one half"
        );
    }

    #[test]
    fn numpy_seed_rebuilds_the_authors_data() {
        // Checkpoints printed by numpy running the authors' generator (scripts/dev/numpy_reference.py).
        use super::super::numpy_rng::reference::*;
        let spec = FedemSyntheticSpec {
            numpy_seed: Some(12345),
            ..Default::default()
        };
        let data = spec.generate(
            &SplitSpec::ExtraTest {
                test_samples: 1000,
                val: 0.0,
            },
            &SeedTree::new(0),
        );
        let sizes: Vec<usize> = data.clients.iter().map(|c| c.train.len()).collect();
        assert_eq!(sizes[..5], NP_AUTHORS_SIZES);
        assert_eq!(sizes.iter().sum::<usize>(), NP_AUTHORS_TOTAL_TRAIN);
        let positives = |r: std::ops::Range<usize>| data.labels[r].iter().sum::<i64>();
        let (first, last) = (&data.clients[0], &data.clients[299]);
        assert_eq!(
            data.features[first.train.start * 150..][..3],
            NP_AUTHORS_FIRST_X
        );
        assert_eq!(
            (
                positives(first.train.clone()),
                positives(first.test.clone())
            ),
            NP_AUTHORS_FIRST_POSITIVES
        );
        assert_eq!(
            data.features[last.test.end * 150 - 3..last.test.end * 150],
            NP_AUTHORS_LAST_X
        );
        assert_eq!(
            (positives(last.train.clone()), positives(last.test.clone())),
            NP_AUTHORS_LAST_POSITIVES
        );
    }

    #[test]
    fn layout_is_contiguous_and_reproducible() {
        let split = SplitSpec::default();
        let a = small().generate(&split, &SeedTree::new(9));
        let b = small().generate(&split, &SeedTree::new(9));
        assert_eq!(a.features, b.features);
        assert_eq!(a.labels, b.labels);
        let mut next = 0;
        for c in &a.clients {
            assert_eq!(c.train.start, next);
            assert_eq!(c.val.start, c.train.end);
            assert_eq!(c.test.start, c.val.end);
            next = c.test.end;
        }
        assert_eq!(next, a.labels.len());
        assert_eq!(a.features.len(), next * a.dim);
        let c = small().generate(&split, &SeedTree::new(10));
        assert_ne!(a.labels, c.labels);
    }
}
