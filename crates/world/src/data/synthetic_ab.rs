//! Synthetic(α, β), the heterogeneous multinomial-regression data of FedProx (Li et al. 2020)
//! as pFedMe (Dinh et al. 2020) uses it: 100 clients, d = 60, 10 classes.
//!
//! Client k draws u_k ~ N(0, α²) and B_k ~ N(0, β²); its model W_k ~ N(u_k, 1)^{d×C},
//! b_k ~ N(u_k, 1)^C; its feature mean v_k ~ N(B_k, 1)^d; its rows x ~ N(v_k, Σ) with
//! Σ = diag(j^{−1.2}), and y = argmax(x·W_k + b_k). α and β are standard deviations, as in
//! the authors' generator (`np.random.normal(0, alpha)`). Sizes follow pFedMe's generator:
//! n_k = (⌊LogNormal(4, 2)⌋ + 50) · 5, so 250 and up.
//!
//! Draws come from the seed tree, unless `numpy_seed` is set: then they come from numpy's legacy
//! `RandomState(numpy_seed)` in the order of pFedMe's `generate_synthetic_05_05.py`. Its seed 0
//! is the paper's data set (client sizes 250 to 25 810, as the paper states).

use super::{DataError, DatasetSettings, InputShape};
use super::{FederatedData, NumpyRandomState, SplitSpec};
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
use rand::Rng;
use rand_distr::{Distribution, LogNormal, Normal, StandardNormal};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyntheticAbSpec {
    /// The number of clients.
    #[serde(default = "d_clients")]
    pub clients: usize,
    /// α: how much the clients' models differ.
    #[serde(default = "d_half")]
    pub alpha: f64,
    /// β: how much the clients' feature distributions differ.
    #[serde(default = "d_half")]
    pub beta: f64,
    /// Features per row.
    #[serde(default = "d_dim")]
    pub dim: usize,
    /// The number of classes.
    #[serde(default = "d_classes")]
    pub classes: usize,
    /// n_k = (min_samples + ⌊LogNormal(lognormal_mean, lognormal_sigma)⌋) · size_factor.
    #[serde(default = "d_min_samples")]
    pub min_samples: usize,
    /// μ of the log-normal law of extra rows per client.
    #[serde(default = "d_ln_mean")]
    pub lognormal_mean: f64,
    /// σ of the log-normal law of extra rows per client.
    #[serde(default = "d_ln_sigma")]
    pub lognormal_sigma: f64,
    /// Multiplies each client's row count.
    #[serde(default = "d_size_factor")]
    pub size_factor: usize,
    /// Cap on n_k [default: none].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_samples: Option<usize>,
    /// Draw everything from numpy's legacy `RandomState(numpy_seed)` in the order of the pFedMe
    /// authors' generator (0 = the paper's data) instead of the seed tree [default: none].
    /// With a `fractions` split the rows are exactly theirs; an `extra_test` split draws its
    /// extra rows right after each client's own, which their generator never does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numpy_seed: Option<u32>,
    /// Make each client's rows when a job needs them instead of holding them all (the same
    /// rows, so the same results): for populations too large to hold. Only the sizes are kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_demand: bool,
}

fn d_clients() -> usize {
    100
}
fn d_half() -> f64 {
    0.5
}
fn d_dim() -> usize {
    60
}
fn d_classes() -> usize {
    10
}
fn d_min_samples() -> usize {
    50
}
fn d_ln_mean() -> f64 {
    4.0
}
fn d_ln_sigma() -> f64 {
    2.0
}
fn d_size_factor() -> usize {
    5
}

impl Default for SyntheticAbSpec {
    fn default() -> Self {
        serde_yaml::from_str("{}").expect("every field has a default")
    }
}

impl SyntheticAbSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        let err = |f: &str, m: String| Err(FieldError::new(f.to_string(), m));
        FieldError::at_least_one("clients", self.clients)?;
        FieldError::at_least_one("dim", self.dim)?;
        if self.classes < 2 {
            return err(
                "classes",
                format!("must be at least 2, got {}", self.classes),
            );
        }
        FieldError::non_negative("alpha", self.alpha)?;
        FieldError::non_negative("beta", self.beta)?;
        FieldError::non_negative("lognormal_sigma", self.lognormal_sigma)?;
        if !self.lognormal_mean.is_finite() {
            return err("lognormal_mean", "must be a finite number".into());
        }
        FieldError::at_least_one("size_factor", self.size_factor)?;
        FieldError::at_least_one("min_samples", self.min_samples)?;
        if self.on_demand && self.numpy_seed.is_some() {
            return err(
                "on_demand",
                "cannot be combined with numpy_seed (the authors' generator draws every client \
                 from one stream, in order)"
                    .into(),
            );
        }
        if self.numpy_seed.is_some() && self.max_samples.is_some() {
            return err(
                "max_samples",
                "cannot be combined with numpy_seed (the authors' generator has no cap)".into(),
            );
        }
        if let Some(m) = self.max_samples {
            if m < self.min_samples.saturating_mul(self.size_factor) {
                return err(
                    "max_samples",
                    format!(
                        "must be at least min_samples · size_factor = {}, got {m}",
                        self.min_samples.saturating_mul(self.size_factor)
                    ),
                );
            }
        }
        Ok(())
    }

    /// n_k for every client.
    pub fn sample_sizes(&self, seeds: &SeedTree) -> Vec<usize> {
        if let Some(seed) = self.numpy_seed {
            return self.numpy_sizes(&mut NumpyRandomState::new(seed));
        }
        let mut rng = seeds.rng(Entity::Data, "synthetic_ab/sizes", 0);
        let law = LogNormal::new(self.lognormal_mean, self.lognormal_sigma).expect("validated");
        (0..self.clients)
            .map(|_| {
                let extra = law.sample(&mut rng).floor().min(1e9) as usize;
                let n = (self.min_samples + extra) * self.size_factor;
                self.max_samples.map_or(n, |m| n.min(m))
            })
            .collect()
    }

    pub fn generate(&self, split: &SplitSpec, seeds: &SeedTree) -> FederatedData {
        if let Some(seed) = self.numpy_seed {
            return self.generate_numpy(split, seed);
        }
        let sizes = self.sample_sizes(seeds);
        if self.on_demand {
            let rows = OnDemandAb {
                spec: self.clone(),
                split: split.clone(),
                seeds: *seeds,
                sizes,
            };
            return FederatedData::made_on_demand(
                super::Layout::Flat,
                self.dim,
                self.classes,
                rows,
            );
        }
        self.assemble(&sizes, split, |k, rows, features, labels| {
            self.client_rows(seeds, k, rows, features, labels)
        })
    }

    /// Client k's `rows` rows from its own stream: its model and feature mean, then the rows.
    fn client_rows(
        &self,
        seeds: &SeedTree,
        k: usize,
        rows: usize,
        features: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) {
        let (d, c) = (self.dim, self.classes);
        let mut rng = seeds.rng(Entity::Data, "synthetic_ab/client", k as u64);
        let u = self.alpha * rng.sample::<f64, _>(StandardNormal);
        let big_b = self.beta * rng.sample::<f64, _>(StandardNormal);
        let around_u = Normal::new(u, 1.0).expect("finite");
        let w: Vec<f64> = (0..d * c).map(|_| around_u.sample(&mut rng)).collect();
        let b: Vec<f64> = (0..c).map(|_| around_u.sample(&mut rng)).collect();
        let v: Vec<f64> = (0..d)
            .map(|_| big_b + rng.sample::<f64, _>(StandardNormal))
            .collect();
        // √Σ_jj, Σ = diag(j^{−1.2}), rounded to f32 as it always was.
        let sd: Vec<f64> = (1..=d)
            .map(|j| (j as f64).powf(-1.2).sqrt() as f32 as f64)
            .collect();
        for _ in 0..rows {
            let row = features.len();
            features.extend(
                (0..d).map(|j| (v[j] + sd[j] * rng.sample::<f64, _>(StandardNormal)) as f32),
            );
            let x: Vec<f64> = features[row..].iter().map(|&v| v as f64).collect();
            labels.push(argmax_affine(&x, &w, &b, c) as i64);
        }
    }

    /// Every client's rows, in client order: `draw(k, rows, features, labels)` appends client
    /// k's own samples and its extra test samples; the split then cuts its own samples.
    fn assemble(
        &self,
        sizes: &[usize],
        split: &SplitSpec,
        mut draw: impl FnMut(usize, usize, &mut Vec<f32>, &mut Vec<i64>),
    ) -> FederatedData {
        let total: usize = sizes.iter().map(|&n| n + split.extra_samples()).sum();
        let mut features = Vec::with_capacity(total * self.dim);
        let mut labels = Vec::with_capacity(total);
        let mut clients = Vec::with_capacity(self.clients);
        for (k, &n) in sizes.iter().enumerate() {
            let start = labels.len();
            draw(k, n + split.extra_samples(), &mut features, &mut labels);
            clients.push(split.shard(start, n));
        }
        FederatedData {
            layout: super::Layout::Flat,
            dim: self.dim,
            classes: self.classes,
            features,
            labels,
            clients,
            truth: None,
            novel: Vec::new(),
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        }
    }
}

impl SyntheticAbSpec {
    /// `(np.random.lognormal(mean, sigma, clients).astype(int) + min_samples) * size_factor`.
    fn numpy_sizes(&self, np: &mut NumpyRandomState) -> Vec<usize> {
        (0..self.clients)
            .map(|_| {
                let extra = np
                    .lognormal(self.lognormal_mean, self.lognormal_sigma)
                    .min(1e9) as usize;
                (extra + self.min_samples) * self.size_factor
            })
            .collect()
    }

    /// pFedMe's `generate_synthetic(alpha, beta, iid=0)`, draw for draw: sizes, the clients'
    /// u_k (`mean_W`) and B_k, every client's feature mean, then per client W, b and its rows
    /// (`multivariate_normal` with a diagonal covariance: standard normals, row-major, times
    /// √Σ_jj, plus the mean). Labels are the argmax of x·W + b in float64, before the features
    /// are stored as float32 (as the authors' JSON files then are).
    fn generate_numpy(&self, split: &SplitSpec, seed: u32) -> FederatedData {
        let (d, c) = (self.dim, self.classes);
        let mut np = NumpyRandomState::new(seed);
        let sizes = self.numpy_sizes(&mut np);
        let mean_w: Vec<f64> = (0..self.clients)
            .map(|_| np.normal(0.0, self.alpha))
            .collect();
        let big_b: Vec<f64> = (0..self.clients)
            .map(|_| np.normal(0.0, self.beta))
            .collect();
        let mean_x: Vec<Vec<f64>> = big_b
            .iter()
            .map(|&b| (0..d).map(|_| np.normal(b, 1.0)).collect())
            .collect();
        let sd: Vec<f64> = (1..=d).map(|j| (j as f64).powf(-1.2).sqrt()).collect();
        let mut x = vec![0.0f64; d];
        self.assemble(&sizes, split, |k, rows, features, labels| {
            let w: Vec<f64> = (0..d * c).map(|_| np.normal(mean_w[k], 1.0)).collect();
            let b: Vec<f64> = (0..c).map(|_| np.normal(mean_w[k], 1.0)).collect();
            for _ in 0..rows {
                for j in 0..d {
                    x[j] = np.normal(0.0, 1.0) * sd[j] + mean_x[k][j];
                }
                features.extend(x.iter().map(|&v| v as f32));
                labels.push(argmax_affine(&x, &w, &b, c) as i64);
            }
        })
    }
}

/// Synthetic(α, β) made per client (`on_demand: true`): exactly the rows the resident generator
/// holds, from the same per-client streams.
#[derive(Debug)]
struct OnDemandAb {
    spec: SyntheticAbSpec,
    split: SplitSpec,
    seeds: SeedTree,
    /// n_k, each client's own samples.
    sizes: Vec<usize>,
}

impl super::OnDemandRows for OnDemandAb {
    fn num_clients(&self) -> usize {
        self.sizes.len()
    }

    fn split_sizes(&self, client: usize) -> super::SplitSizes {
        self.split.sizes(self.sizes[client])
    }

    fn make_rows(&self, client: usize, features: &mut Vec<f32>, labels: &mut Vec<i64>) {
        let rows = self.sizes[client] + self.split.extra_samples();
        self.spec
            .client_rows(&self.seeds, client, rows, features, labels);
    }
}

/// argmax over classes of b_c + Σ_j x_j W_jc (W row-major d × C; first maximum wins, as numpy's).
fn argmax_affine(x: &[f64], w: &[f64], b: &[f64], c: usize) -> usize {
    (0..c)
        .map(|class| {
            b[class]
                + x.iter()
                    .enumerate()
                    .map(|(j, &xj)| xj * w[j * c + class])
                    .sum::<f64>()
        })
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |best, (class, s)| {
            if s > best.1 {
                (class, s)
            } else {
                best
            }
        })
        .0
}

impl DatasetSettings for SyntheticAbSpec {
    fn validate(&self) -> Result<(), FieldError> {
        SyntheticAbSpec::validate(self)
    }
    fn num_clients(&self) -> Option<usize> {
        Some(self.clients)
    }
    fn input_shape(&self) -> Option<InputShape> {
        Some(InputShape::Flat(self.dim))
    }
    fn classes(&self) -> Option<usize> {
        Some(self.classes)
    }
    fn least_rows(&self) -> Option<(f64, usize)> {
        let rows = if self.on_demand {
            0.0
        } else {
            self.clients as f64 * self.min_samples as f64 * self.size_factor as f64
        };
        Some((rows, self.dim))
    }
    const ON_DEMAND: bool = true;
    fn asks_on_demand(&self) -> bool {
        self.on_demand
    }
    fn build(&self, split: &SplitSpec, seeds: &SeedTree) -> Result<FederatedData, DataError> {
        Ok(self.generate(split, seeds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_shapes_and_labels() {
        let spec = SyntheticAbSpec {
            clients: 5,
            ..Default::default()
        };
        spec.validate().unwrap();
        let seeds = SeedTree::new(3);
        let split = SplitSpec::Fractions {
            train: 0.75,
            val: 0.0,
            test: 0.25,
        };
        let data = spec.generate(&split, &seeds);
        let sizes = spec.sample_sizes(&seeds);
        assert!(sizes.iter().all(|&n| n >= 250 && n % 5 == 0), "{sizes:?}");
        assert_eq!(data.labels.len(), sizes.iter().sum::<usize>());
        assert_eq!(data.features.len(), data.labels.len() * 60);
        assert!(data.labels.iter().all(|&y| (0..10).contains(&y)));
        // Heterogeneous models: no single label dominates every client the same way, and the
        // same seed gives the same data.
        assert_eq!(spec.generate(&split, &seeds).features, data.features);
        let again = spec.generate(&split, &SeedTree::new(4));
        assert_ne!(again.labels, data.labels);
    }

    #[test]
    fn rows_made_on_demand_are_the_resident_rows() {
        let small = SyntheticAbSpec {
            clients: 6,
            min_samples: 4,
            dim: 7,
            classes: 3,
            ..Default::default()
        };
        let seeds = SeedTree::new(5);
        for split in [
            SplitSpec::default(),
            SplitSpec::ExtraTest {
                test_samples: 3,
                val: 0.25,
            },
        ] {
            let resident = small.generate(&split, &seeds);
            let lazy = SyntheticAbSpec {
                on_demand: true,
                ..small.clone()
            }
            .generate(&split, &seeds);
            // Clients in any order, one of them twice.
            lazy.assert_makes_the_rows_of(&resident, &[4, 0, 5, 0]);
        }
        let both = SyntheticAbSpec {
            on_demand: true,
            numpy_seed: Some(0),
            ..small
        };
        assert_eq!(both.validate().unwrap_err().path, "on_demand");
        // Nothing is held, so a million clients fit.
        let many: crate::data::DatasetSpec =
            serde_yaml::from_str("{kind: synthetic_ab, clients: 1000000, on_demand: true}")
                .unwrap();
        assert_eq!(many.least_rows(), Some((0.0, 60)));
    }

    #[test]
    fn feature_variance_within_a_client_decays_as_j_to_the_minus_1_2() {
        let spec = SyntheticAbSpec {
            clients: 1,
            min_samples: 2000,
            size_factor: 1,
            ..Default::default()
        };
        let split = SplitSpec::Fractions {
            train: 1.0,
            val: 0.0,
            test: 0.0,
        };
        let data = spec.generate(&split, &SeedTree::new(1));
        let rows: Vec<&[f32]> = data.features.chunks(60).collect();
        let n = rows.len() as f64;
        for j in [0usize, 9, 59] {
            let mean = rows.iter().map(|r| r[j] as f64).sum::<f64>() / n;
            let var = rows
                .iter()
                .map(|r| (r[j] as f64 - mean).powi(2))
                .sum::<f64>()
                / n;
            let want = ((j + 1) as f64).powf(-1.2);
            assert!(
                (var / want - 1.0).abs() < 0.1,
                "feature {j}: {var} vs {want}"
            );
        }
    }

    #[test]
    fn numpy_seed_rebuilds_the_pfedme_authors_data() {
        // Checkpoints printed by numpy running the authors' generator with their seed 0
        // (scripts/dev/numpy_reference.py).
        use super::super::numpy_rng::reference::*;
        let spec = SyntheticAbSpec {
            numpy_seed: Some(0),
            ..Default::default()
        };
        let split = SplitSpec::Fractions {
            train: 1.0,
            val: 0.0,
            test: 0.0,
        };
        let data = spec.generate(&split, &SeedTree::new(7));
        let sizes: Vec<usize> = data.clients.iter().map(|c| c.train.len()).collect();
        assert_eq!(sizes, spec.sample_sizes(&SeedTree::new(8)));
        assert_eq!(sizes[..5], NP_PFEDME_SIZES);
        assert_eq!(sizes.iter().sum::<usize>(), NP_PFEDME_TOTAL);
        assert_eq!(data.features[..3], NP_PFEDME_FIRST_X);
        let end = data.features.len();
        assert_eq!(data.features[end - 3..], NP_PFEDME_LAST_X);
        let histogram = |rows: &[i64]| {
            let mut h = [0usize; 10];
            rows.iter().for_each(|&y| h[y as usize] += 1);
            h
        };
        assert_eq!(histogram(&data.labels[..sizes[0]]), NP_PFEDME_FIRST_LABELS);
        assert_eq!(
            histogram(&data.labels[data.labels.len() - sizes[99]..]),
            NP_PFEDME_LAST_LABELS
        );
        assert_eq!(histogram(&data.labels), NP_PFEDME_LABELS);
    }
}
