//! The FedGMM synthetic benchmark (Wu et al. 2023, Sec. 4.1 and Table 3): every client's
//! inputs come from a mixture of M components and each component labels its own inputs.
//!
//! 1. Component m: a marginal P_m (by default N(μ_m, I_d), μ_m ~ U[−1, 1]^d) and a labelling
//!    function F_m(x) = 1{(x − c_m)ᵀ v_m > 0}, c_m the component's mean and
//!    v_m = ±(c_j − c_m) for another component j, sign and j drawn (the authors' choice; the
//!    paper only says they are fixed beforehand).
//! 2. π_t ~ Dir(α) for each client; every client has `samples` rows (the paper: about 3000).
//! 3. Each row: z ~ Cat(π_t), x ~ P_z, y = F_z(x).
//!
//! `marginal: laplace` draws x_j = μ_m,j + Laplace(0, 1/√2) (unit variance, like the Gaussian);
//! `marginal: beta` draws x_j ~ Beta(a_m,j, b_m,j) with a ~ Γ(3, 1), b ~ Γ(5, 1) per component
//! (the authors' code). With `gaussian_clients: K` (the paper's "partial" setting, 20 of 30) the
//! first K clients draw from M Gaussian components and the others from M components of
//! `marginal`; each client's π covers only its own family.
//!
//! `novel_samples: N` gives each client N extra rows from one more Gaussian component that no
//! client trains on: the held-out novel samples of the novelty-detection study (Table 4).
//! Every draw comes from the seed tree: the components from one stream, each client's π and
//! rows from its own, so `on_demand: true` can make a client's rows when a job needs them.

use super::{DataError, DatasetSettings, InputShape};
use super::{FederatedData, MixtureTruth, SplitSpec};
use crate::settings::FieldError;
use crate::sim::{Entity, SeedTree};
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Beta, Dirichlet, Distribution, Gamma, Normal};
use serde::{Deserialize, Serialize};

/// The family of the components' input distributions.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Marginal {
    #[default]
    Gaussian,
    Laplace,
    Beta,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedgmmSyntheticSpec {
    /// C, the number of clients.
    #[serde(default = "d_clients")]
    pub clients: usize,
    /// M, the number of components (per family).
    #[serde(default = "d_components")]
    pub components: usize,
    /// d, the input dimension.
    #[serde(default = "d_dim")]
    pub dim: usize,
    /// α of the symmetric Dirichlet prior on each client's mixture weights.
    #[serde(default = "d_alpha")]
    pub alpha: f64,
    /// Rows per client (before the split).
    #[serde(default = "d_samples")]
    pub samples: usize,
    /// The family of the components' input distributions.
    #[serde(default)]
    pub marginal: Marginal,
    /// The first this many clients draw from Gaussian components whatever `marginal` says
    /// (the paper's "partial" setting: 20 of 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaussian_clients: Option<usize>,
    /// Rows per client from a component no client trains on (novelty detection).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub novel_samples: usize,
    /// Make each client's rows when a job needs them instead of holding them all (the same
    /// rows, so the same results): for populations too large to hold. The true mixture is
    /// not kept, so `describe` gives no Bayes or oracle figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_demand: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
fn d_clients() -> usize {
    300
}
fn d_components() -> usize {
    3
}
fn d_dim() -> usize {
    32
}
fn d_alpha() -> f64 {
    0.4
}
fn d_samples() -> usize {
    3000
}

impl FedgmmSyntheticSpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        let err = |f: &str, m: String| Err(FieldError::new(f.to_string(), m));
        FieldError::at_least_one("clients", self.clients)?;
        if self.components < 2 {
            return err(
                "components",
                "must be at least 2 (each labelling direction points at another component)".into(),
            );
        }
        FieldError::at_least_one("dim", self.dim)?;
        FieldError::positive("alpha", self.alpha)?;
        if self.samples < 2 {
            return err("samples", "must be at least 2".into());
        }
        if let Some(k) = self.gaussian_clients {
            if k > self.clients {
                return err(
                    "gaussian_clients",
                    format!("must be at most `clients` ({}), got {k}", self.clients),
                );
            }
        }
        Ok(())
    }

    /// The family of client `t`.
    fn family_of(&self, t: usize) -> Marginal {
        match self.gaussian_clients {
            Some(k) if t < k => Marginal::Gaussian,
            _ => self.marginal,
        }
    }

    pub fn generate(&self, split: &SplitSpec, seeds: &SeedTree) -> FederatedData {
        let laws = self.laws(seeds);
        if self.on_demand {
            let rows = OnDemandGmm {
                spec: self.clone(),
                split: split.clone(),
                seeds: *seeds,
                laws,
            };
            return FederatedData::made_on_demand(super::Layout::Flat, self.dim, 2, rows);
        }
        let d = self.dim;
        let per_client = self.samples + split.extra_samples() + self.novel_samples;
        let mut features = Vec::with_capacity(self.clients * per_client * d);
        let mut labels = Vec::with_capacity(self.clients * per_client);
        let mut clients = Vec::with_capacity(self.clients);
        let mut novel_rows = Vec::new();
        let mut weights = Vec::with_capacity(self.clients);
        for t in 0..self.clients {
            let start = labels.len();
            let pi = laws.client_rows(self, split, seeds, t, &mut features, &mut labels);
            clients.push(split.shard(start, self.samples));
            if self.novel_samples > 0 {
                novel_rows.push(labels.len() - self.novel_samples..labels.len());
            }
            weights.push(pi);
        }
        FederatedData {
            layout: super::Layout::Flat,
            dim: d,
            classes: 2,
            features,
            labels,
            clients,
            truth: Some(MixtureTruth {
                components: laws.components.iter().map(|l| l.center.clone()).collect(),
                weights,
                labels: None,
                inputs: Some(laws.components),
            }),
            novel: novel_rows,
            backdoor: Vec::new(),
            on_demand: None,
            lead: 0,
        }
    }

    /// The components' laws, from the data set's own stream: M per family in use, then the
    /// novel component.
    fn laws(&self, seeds: &SeedTree) -> Laws {
        let (d, m) = (self.dim, self.components);
        let mut families = vec![self.family_of(0)];
        if self.family_of(self.clients - 1) != families[0] {
            families.push(self.family_of(self.clients - 1));
        }
        let mut rng = seeds.rng(Entity::Data, "fedgmm_synthetic/components", 0);
        let mut components: Vec<ComponentLaw> = Vec::new();
        for &family in &families {
            let marginals: Vec<InputLaw> = (0..m)
                .map(|_| InputLaw::draw(family, d, &mut rng))
                .collect();
            components.extend(labelled(marginals, &mut rng));
        }
        let novel = (self.novel_samples > 0).then(|| {
            let pair: Vec<InputLaw> = (0..2)
                .map(|_| InputLaw::draw(Marginal::Gaussian, d, &mut rng))
                .collect();
            labelled(pair, &mut rng).swap_remove(0)
        });
        Laws {
            components,
            novel,
            second_family: families.get(1).copied(),
        }
    }
}

/// The laws rows are drawn from ([`FedgmmSyntheticSpec::laws`]).
#[derive(Clone, Debug)]
struct Laws {
    components: Vec<ComponentLaw>,
    novel: Option<ComponentLaw>,
    /// With `gaussian_clients`, the family of the clients after them (components M..2M).
    second_family: Option<Marginal>,
}

impl Laws {
    /// Appends client `t`'s rows, its own and extra test rows then its novel rows, each
    /// client from its own streams; returns its mixture weights over all components.
    fn client_rows(
        &self,
        spec: &FedgmmSyntheticSpec,
        split: &SplitSpec,
        seeds: &SeedTree,
        t: usize,
        features: &mut Vec<f32>,
        labels: &mut Vec<i64>,
    ) -> Vec<f64> {
        let m = spec.components;
        let mut rng = seeds.rng(Entity::Data, "fedgmm_synthetic/mixture", t as u64);
        let offset = match self.second_family {
            Some(family) if spec.family_of(t) == family => m,
            _ => 0,
        };
        let pi = Dirichlet::new(&vec![spec.alpha; m])
            .expect("validated")
            .sample(&mut rng);
        let mut w = vec![0.0; self.components.len()];
        w[offset..offset + m].copy_from_slice(&pi);
        let mut rng = seeds.rng(Entity::Data, "fedgmm_synthetic/samples", t as u64);
        for _ in 0..spec.samples + split.extra_samples() {
            let z = sample_categorical(&w, &mut rng);
            self.components[z].draw_row(&mut rng, features, labels);
        }
        if let Some(law) = &self.novel {
            for _ in 0..spec.novel_samples {
                law.draw_row(&mut rng, features, labels);
            }
        }
        w
    }
}

/// The FedGMM benchmark made per client (`on_demand: true`): exactly the rows the resident
/// generator holds, from the same per-client streams.
#[derive(Debug)]
struct OnDemandGmm {
    spec: FedgmmSyntheticSpec,
    split: SplitSpec,
    seeds: SeedTree,
    laws: Laws,
}

impl super::OnDemandRows for OnDemandGmm {
    fn num_clients(&self) -> usize {
        self.spec.clients
    }

    fn split_sizes(&self, _client: usize) -> super::SplitSizes {
        self.split.sizes(self.spec.samples)
    }

    fn novel_len(&self, _client: usize) -> usize {
        self.spec.novel_samples
    }

    fn make_rows(&self, client: usize, features: &mut Vec<f32>, labels: &mut Vec<i64>) {
        self.laws.client_rows(
            &self.spec,
            &self.split,
            &self.seeds,
            client,
            features,
            labels,
        );
    }
}

/// Gives each marginal its labelling direction v_m = ±(c_j − c_m), j another component.
fn labelled(marginals: Vec<InputLaw>, rng: &mut ChaCha20Rng) -> Vec<ComponentLaw> {
    let centers: Vec<Vec<f64>> = marginals.iter().map(InputLaw::mean).collect();
    marginals
        .into_iter()
        .enumerate()
        .map(|(i, input)| {
            let others: Vec<usize> = (0..centers.len()).filter(|&j| j != i).collect();
            let j = *others.choose(rng).expect("at least two components");
            let sign = if rng.gen_bool(0.5) { 1.0 } else { -1.0 };
            let direction = centers[j]
                .iter()
                .zip(&centers[i])
                .map(|(a, b)| sign * (a - b))
                .collect();
            ComponentLaw {
                center: centers[i].clone(),
                direction,
                input,
            }
        })
        .collect()
}

/// One component's input law.
#[derive(Clone, Debug, PartialEq)]
pub enum InputLaw {
    /// N(mean, I).
    Gaussian { mean: Vec<f64> },
    /// mean + Laplace(0, scale) in each coordinate.
    Laplace { mean: Vec<f64>, scale: f64 },
    /// Beta(a_j, b_j) in each coordinate.
    Beta { a: Vec<f64>, b: Vec<f64> },
}

impl InputLaw {
    fn draw(family: Marginal, d: usize, rng: &mut ChaCha20Rng) -> InputLaw {
        match family {
            Marginal::Gaussian => InputLaw::Gaussian {
                mean: (0..d).map(|_| rng.gen_range(-1.0..1.0)).collect(),
            },
            Marginal::Laplace => InputLaw::Laplace {
                mean: (0..d).map(|_| rng.gen_range(-1.0..1.0)).collect(),
                scale: std::f64::consts::FRAC_1_SQRT_2,
            },
            Marginal::Beta => {
                let (ga, gb) = (
                    Gamma::new(3.0, 1.0).expect("valid"),
                    Gamma::new(5.0, 1.0).expect("valid"),
                );
                InputLaw::Beta {
                    a: (0..d).map(|_| ga.sample(rng)).collect(),
                    b: (0..d).map(|_| gb.sample(rng)).collect(),
                }
            }
        }
    }

    fn mean(&self) -> Vec<f64> {
        match self {
            InputLaw::Gaussian { mean } | InputLaw::Laplace { mean, .. } => mean.clone(),
            InputLaw::Beta { a, b } => a.iter().zip(b).map(|(a, b)| a / (a + b)).collect(),
        }
    }

    fn sample(&self, rng: &mut ChaCha20Rng) -> Vec<f64> {
        match self {
            InputLaw::Gaussian { mean } => {
                let n = Normal::new(0.0, 1.0).expect("valid");
                mean.iter().map(|m| m + n.sample(rng)).collect()
            }
            InputLaw::Laplace { mean, scale } => mean
                .iter()
                .map(|m| {
                    // Inverse CDF of Laplace(0, scale) at u ∈ (−1/2, 1/2).
                    let u: f64 = rng.gen::<f64>() - 0.5;
                    m - scale * u.signum() * (1.0 - 2.0 * u.abs()).max(f64::MIN_POSITIVE).ln()
                })
                .collect(),
            InputLaw::Beta { a, b } => a
                .iter()
                .zip(b)
                .map(|(&a, &b)| Beta::new(a, b).expect("positive").sample(rng))
                .collect(),
        }
    }

    /// log density at `x`.
    pub fn log_density(&self, x: &[f32]) -> f64 {
        match self {
            InputLaw::Gaussian { mean } => {
                let sq: f64 = x
                    .iter()
                    .zip(mean)
                    .map(|(&a, b)| (a as f64 - b).powi(2))
                    .sum();
                -0.5 * sq - 0.5 * mean.len() as f64 * (2.0 * std::f64::consts::PI).ln()
            }
            InputLaw::Laplace { mean, scale } => x
                .iter()
                .zip(mean)
                .map(|(&a, m)| -(a as f64 - m).abs() / scale - (2.0 * scale).ln())
                .sum(),
            InputLaw::Beta { a, b } => x
                .iter()
                .zip(a.iter().zip(b))
                .map(|(&v, (&a, &b))| {
                    let v = (v as f64).clamp(1e-12, 1.0 - 1e-12);
                    (a - 1.0) * v.ln() + (b - 1.0) * (1.0 - v).ln() - ln_beta(a, b)
                })
                .sum(),
        }
    }
}

fn ln_beta(a: f64, b: f64) -> f64 {
    libm::lgamma(a) + libm::lgamma(b) - libm::lgamma(a + b)
}

/// A component: its input law and its labelling function 1{(x − center)ᵀ direction > 0}.
#[derive(Clone, Debug, PartialEq)]
pub struct ComponentLaw {
    pub center: Vec<f64>,
    pub direction: Vec<f64>,
    pub input: InputLaw,
}

impl ComponentLaw {
    /// F(x), the component's label for `x`.
    pub fn label(&self, x: &[f32]) -> i64 {
        let s: f64 = x
            .iter()
            .zip(&self.center)
            .zip(&self.direction)
            .map(|((&xi, c), v)| (xi as f64 - c) * v)
            .sum();
        (s > 0.0) as i64
    }

    fn draw_row(&self, rng: &mut ChaCha20Rng, features: &mut Vec<f32>, labels: &mut Vec<i64>) {
        let row = features.len();
        features.extend(self.input.sample(rng).into_iter().map(|v| v as f32));
        let y = self.label(&features[row..]);
        labels.push(y);
    }
}

/// P(y = 1 | x) for a client with weights `pi` over the components `laws`: the posterior over
/// components given x, summed over those that label x with 1.
pub fn positive_probability(laws: &[ComponentLaw], pi: &[f64], x: &[f32]) -> f64 {
    let logs: Vec<(f64, i64)> = laws
        .iter()
        .zip(pi)
        .filter(|(_, &p)| p > 0.0)
        .map(|(law, &p)| (p.ln() + law.input.log_density(x), law.label(x)))
        .collect();
    let top = logs.iter().map(|l| l.0).fold(f64::NEG_INFINITY, f64::max);
    let (mut one, mut all) = (0.0, 0.0);
    for (l, y) in logs {
        let w = (l - top).exp();
        all += w;
        if y == 1 {
            one += w;
        }
    }
    one / all
}

/// The true log p(x) of a client with weights `pi` over `laws` (`y: Some`: log p(x, y), the
/// components that label x otherwise left out): the oracle's novelty score.
pub fn log_density(laws: &[ComponentLaw], pi: &[f64], x: &[f32], y: Option<i64>) -> f64 {
    let logs: Vec<f64> = laws
        .iter()
        .zip(pi)
        .filter(|(law, &p)| p > 0.0 && y.is_none_or(|y| law.label(x) == y))
        .map(|(law, &p)| p.ln() + law.input.log_density(x))
        .collect();
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !top.is_finite() {
        return top;
    }
    top + logs.iter().map(|l| (l - top).exp()).sum::<f64>().ln()
}

fn sample_categorical(p: &[f64], rng: &mut ChaCha20Rng) -> usize {
    let u: f64 = rng.gen::<f64>() * p.iter().sum::<f64>();
    let mut acc = 0.0;
    for (i, &pi) in p.iter().enumerate() {
        acc += pi;
        if pi > 0.0 && u < acc {
            return i;
        }
    }
    p.iter().rposition(|&w| w > 0.0).unwrap_or(0)
}

impl DatasetSettings for FedgmmSyntheticSpec {
    fn validate(&self) -> Result<(), FieldError> {
        FedgmmSyntheticSpec::validate(self)
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
        let rows = if self.on_demand {
            0.0
        } else {
            self.clients as f64 * (self.samples + self.novel_samples) as f64
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

    fn spec() -> FedgmmSyntheticSpec {
        serde_yaml::from_str("{clients: 4, dim: 3, samples: 50, novel_samples: 5}").unwrap()
    }

    #[test]
    fn labels_follow_each_rows_component_and_novel_rows_come_last() {
        let data = spec().generate(&SplitSpec::default(), &SeedTree::new(3));
        assert_eq!(data.num_clients(), 4);
        assert_eq!(data.novel.len(), 4);
        let truth = data.truth.as_ref().unwrap();
        let laws = truth.inputs.as_ref().unwrap();
        assert_eq!(laws.len(), 3);
        for c in 0..4 {
            assert_eq!(data.clients[c].test.end, data.novel[c].start);
            assert_eq!(data.novel[c].len(), 5);
        }
        // Every row's label is the label of one of the client's components.
        for (c, shard) in data.clients.iter().enumerate() {
            for i in shard.train.start..shard.test.end {
                let x = &data.features[i * 3..(i + 1) * 3];
                let ok = laws
                    .iter()
                    .zip(&truth.weights[c])
                    .any(|(l, &w)| w > 0.0 && l.label(x) == data.labels[i]);
                assert!(ok, "row {i}");
            }
        }
        // Same seed, same data.
        let again = spec().generate(&SplitSpec::default(), &SeedTree::new(3));
        assert_eq!(again.features, data.features);
        assert_eq!(again.labels, data.labels);
    }

    #[test]
    fn rows_made_on_demand_are_the_resident_rows() {
        for marginal in ["gaussian", "beta"] {
            let spec: FedgmmSyntheticSpec = serde_yaml::from_str(&format!(
                "{{clients: 6, dim: 3, samples: 40, novel_samples: 5, marginal: {marginal}, \
                 gaussian_clients: 3}}"
            ))
            .unwrap();
            let split = SplitSpec::default();
            let resident = spec.generate(&split, &SeedTree::new(7));
            let lazy = FedgmmSyntheticSpec {
                on_demand: true,
                ..spec.clone()
            }
            .generate(&split, &SeedTree::new(7));
            assert!(lazy.truth.is_none() && lazy.novel.is_empty());
            lazy.assert_makes_the_rows_of(&resident, &[5, 0, 3, 0]);
            let rows = lazy.rows_for(&[2]);
            assert_eq!(rows.data().novel_view(0).len(), 5);
        }
        let plain: FedgmmSyntheticSpec = serde_yaml::from_str("{on_demand: true}").unwrap();
        assert!(plain.on_demand);
        let data = plain.generate(&SplitSpec::default(), &SeedTree::new(1));
        let rows = data.rows_for(&[0]);
        assert!(rows.data().novel.is_empty(), "no novel rows asked for");
    }

    #[test]
    fn partial_setting_gives_each_family_its_own_components() {
        let mut s = spec();
        s.marginal = Marginal::Beta;
        s.gaussian_clients = Some(2);
        let data = s.generate(&SplitSpec::default(), &SeedTree::new(1));
        let truth = data.truth.unwrap();
        assert_eq!(truth.inputs.as_ref().unwrap().len(), 6);
        assert!(truth.weights[0][3..].iter().all(|&w| w == 0.0));
        assert!(truth.weights[3][..3].iter().all(|&w| w == 0.0));
        // Beta rows lie in [0, 1].
        let r = data.clients[3].train.clone();
        assert!(data.features[r.start * 3..r.end * 3]
            .iter()
            .all(|&v| (0.0..=1.0).contains(&v)));
    }

    #[test]
    fn densities_are_normalised_in_one_dimension() {
        let laws = [
            InputLaw::Gaussian { mean: vec![0.3] },
            InputLaw::Laplace {
                mean: vec![-0.2],
                scale: 0.7,
            },
            InputLaw::Beta {
                a: vec![3.0],
                b: vec![5.0],
            },
        ];
        for law in laws {
            let (lo, hi, n) = (-12.0f64, 12.0f64, 240_000);
            let h = (hi - lo) / n as f64;
            let total: f64 = (0..n)
                .map(|i| {
                    let x = lo + (i as f64 + 0.5) * h;
                    if matches!(law, InputLaw::Beta { .. }) && !(0.0..=1.0).contains(&x) {
                        return 0.0;
                    }
                    law.log_density(&[x as f32]).exp() * h
                })
                .sum();
            assert!((total - 1.0).abs() < 1e-3, "{law:?}: {total}");
        }
    }
}
