//! Mixing matrices on a graph: the weight W_ij peer i gives peer j's model when it averages.
//! Every matrix is checked when it is built (non-negative, rows sum to 1, support on the graph
//! and the diagonal; symmetric, hence doubly stochastic, where the rule promises it), and its
//! spectral gap 1 − |λ₂| is computed once.

use super::{Graph, TopologyError};
use crate::spec::FieldError;
use nalgebra::{DMatrix, SymmetricEigen};
use serde::{Deserialize, Serialize};

/// How a round's mixing weights are set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "rule", rename_all = "snake_case", deny_unknown_fields)]
pub enum MixingRule {
    /// W_ij = 1 / (1 + max(d_i, d_j)) on each link; the rest on the diagonal. Symmetric.
    MetropolisHastings {},
    /// W_ij = 1 / (1 + d_max) on each link; the rest on the diagonal. Symmetric.
    MaxDegree {},
    /// W_ij = 1 / (1 + d_i) for each neighbour and for i itself. Rows sum to 1; symmetric only
    /// on regular graphs (on a complete graph: the uniform 1/n).
    UniformNeighbour {},
    /// Fastest Mixing Markov Chain (Boyd, Diaconis, Xiao 2004): the symmetric, doubly stochastic
    /// W on the graph (self weights allowed) with the smallest second-largest |eigenvalue|, by
    /// the projected subgradient method of their §5 started from Metropolis–Hastings weights;
    /// the best iterate is kept, so it never mixes slower than Metropolis–Hastings.
    Fmmc {
        /// Subgradient iterations.
        #[serde(default = "default_fmmc_iterations")]
        iterations: u32,
        /// Step length of iteration k is `step / √k` (along the normalised subgradient).
        #[serde(default = "default_fmmc_step")]
        step: f64,
    },
}

impl Default for MixingRule {
    /// Metropolis–Hastings weights.
    fn default() -> Self {
        MixingRule::MetropolisHastings {}
    }
}

fn default_fmmc_iterations() -> u32 {
    100
}
fn default_fmmc_step() -> f64 {
    0.05
}

impl MixingRule {
    pub fn validate(&self) -> Result<(), FieldError> {
        if let MixingRule::Fmmc { iterations, step } = self {
            if *iterations == 0 {
                return Err(FieldError::new(
                    "iterations".into(),
                    "must be at least 1".into(),
                ));
            }
            if !(*step > 0.0 && step.is_finite()) {
                return Err(FieldError::new(
                    "step".into(),
                    format!("must be a positive number, got {step}"),
                ));
            }
        }
        Ok(())
    }

    /// Whether the rule promises a symmetric (doubly stochastic) matrix on any graph.
    pub fn symmetric(&self) -> bool {
        !matches!(self, MixingRule::UniformNeighbour {})
    }
}

/// A checked mixing matrix, stored by rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Mixing {
    /// Row i: `(j, W_ij)` for every j with W_ij > 0 (i itself included), j increasing.
    rows: Vec<Vec<(u32, f64)>>,
    /// 1 − (second-largest |eigenvalue|); 0 on a disconnected graph.
    spectral_gap: f64,
}

/// Tolerance of the row, column and symmetry checks.
pub const MIXING_TOLERANCE: f64 = 1e-9;

impl Mixing {
    /// The matrix the rule gives on `graph`, checked.
    pub fn build(graph: &Graph, rule: &MixingRule) -> Result<Mixing, TopologyError> {
        let n = graph.len();
        let edges = graph.edges();
        let (weights, balance) = match rule {
            MixingRule::MetropolisHastings {} => (metropolis_hastings(graph, &edges), None),
            MixingRule::MaxDegree {} => {
                let w = 1.0 / (1.0 + graph.max_degree() as f64);
                (vec![w; edges.len()], None)
            }
            MixingRule::UniformNeighbour {} => {
                let balance: Vec<f64> = (0..n as u32)
                    .map(|i| 1.0 + graph.degree(i) as f64)
                    .collect();
                return Mixing::from_rows(
                    graph,
                    (0..n as u32)
                        .map(|i| {
                            let w = 1.0 / balance[i as usize];
                            let mut row: Vec<(u32, f64)> =
                                graph.neighbors(i).iter().map(|&j| (j, w)).collect();
                            row.push((i, w));
                            row.sort_by_key(|e| e.0);
                            row
                        })
                        .collect(),
                    Some(&balance),
                    true,
                );
            }
            MixingRule::Fmmc { iterations, step } => {
                (fmmc(graph, &edges, *iterations, *step), None)
            }
        };
        let full_support = !matches!(rule, MixingRule::Fmmc { .. });
        Mixing::from_rows(
            graph,
            symmetric_rows(n, &edges, &weights),
            balance,
            full_support,
        )
    }

    /// Checks rows made by a rule and computes the spectral gap. `balance` is a positive π with
    /// π_i W_ij = π_j W_ji when W is not symmetric (then W is similar to a symmetric matrix and
    /// has real eigenvalues); `None` requires W symmetric. `full_support`: every link carries a
    /// positive weight (FMMC may set some to zero).
    fn from_rows(
        graph: &Graph,
        rows: Vec<Vec<(u32, f64)>>,
        balance: Option<&[f64]>,
        full_support: bool,
    ) -> Result<Mixing, TopologyError> {
        let n = graph.len();
        let bad = |message: String| Err(TopologyError::Mixing(message));
        let mut columns = vec![0f64; n];
        for (i, row) in rows.iter().enumerate() {
            let i = i as u32;
            let mut sum = 0.0;
            for &(j, w) in row {
                if !(w >= 0.0 && w.is_finite()) {
                    return bad(format!("W[{i}][{j}] = {w} is not a non-negative number"));
                }
                if j != i && !graph.has_edge(i, j) {
                    return bad(format!(
                        "W[{i}][{j}] = {w} but peers {i} and {j} are not linked"
                    ));
                }
                sum += w;
                columns[j as usize] += w;
            }
            if (sum - 1.0).abs() > MIXING_TOLERANCE {
                return bad(format!("row {i} sums to {sum}, not 1"));
            }
            if full_support {
                let linked = row.iter().filter(|&&(j, w)| j != i && w > 0.0).count();
                if linked != graph.degree(i) {
                    return bad(format!(
                        "row {i} weights {linked} of its {} links",
                        graph.degree(i)
                    ));
                }
            }
        }
        let weight = |i: usize, j: u32| -> f64 {
            rows[i]
                .binary_search_by_key(&j, |e| e.0)
                .map_or(0.0, |k| rows[i][k].1)
        };
        if balance.is_none() {
            for (j, c) in columns.iter().enumerate() {
                if (c - 1.0).abs() > MIXING_TOLERANCE {
                    return bad(format!("column {j} sums to {c}, not 1"));
                }
            }
            for (i, row) in rows.iter().enumerate() {
                for &(j, w) in row {
                    if (w - weight(j as usize, i as u32)).abs() > MIXING_TOLERANCE {
                        return bad(format!("W is not symmetric at [{i}][{j}]"));
                    }
                }
            }
        }
        // S = D^{1/2} W D^{-1/2} with D = diag(π) is symmetric and has W's eigenvalues.
        let mut s = DMatrix::<f64>::zeros(n, n);
        for (i, row) in rows.iter().enumerate() {
            for &(j, w) in row {
                let scale = balance.map_or(1.0, |p| (p[i] / p[j as usize]).sqrt());
                s[(i, j as usize)] = w * scale;
            }
        }
        if balance.is_some() {
            s = (&s + s.transpose()) * 0.5;
        }
        let spectral_gap = 1.0 - second_largest_modulus(&sorted_eigenvalues(s));
        Ok(Mixing {
            rows,
            spectral_gap: spectral_gap.max(0.0),
        })
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Row i: `(j, W_ij)` for the j with W_ij > 0 (i included), j increasing.
    pub fn row(&self, i: u32) -> &[(u32, f64)] {
        &self.rows[i as usize]
    }

    /// W_ij (0 off the support).
    pub fn weight(&self, i: u32, j: u32) -> f64 {
        let row = self.row(i);
        row.binary_search_by_key(&j, |e| e.0)
            .map_or(0.0, |k| row[k].1)
    }

    /// 1 − (second-largest |eigenvalue|): how much one round of mixing shrinks disagreement.
    pub fn spectral_gap(&self) -> f64 {
        self.spectral_gap
    }

    /// The peers whose model peer i uses (W_ij > 0, j ≠ i), increasing.
    pub fn sources(&self, i: u32) -> impl Iterator<Item = u32> + '_ {
        self.row(i).iter().filter(move |e| e.0 != i).map(|e| e.0)
    }
}

fn metropolis_hastings(graph: &Graph, edges: &[(u32, u32)]) -> Vec<f64> {
    edges
        .iter()
        .map(|&(a, b)| 1.0 / (1.0 + graph.degree(a).max(graph.degree(b)) as f64))
        .collect()
}

/// Rows of the symmetric W with `weights` on `edges` and the rest of each row on the diagonal.
fn symmetric_rows(n: usize, edges: &[(u32, u32)], weights: &[f64]) -> Vec<Vec<(u32, f64)>> {
    let mut rows: Vec<Vec<(u32, f64)>> = vec![Vec::new(); n];
    for (&(a, b), &w) in edges.iter().zip(weights) {
        if w > 0.0 {
            rows[a as usize].push((b, w));
            rows[b as usize].push((a, w));
        }
    }
    for (i, row) in rows.iter_mut().enumerate() {
        let off: f64 = row.iter().map(|e| e.1).sum();
        let diagonal = 1.0 - off;
        if diagonal > 0.0 {
            row.push((i as u32, diagonal));
        }
        row.sort_by_key(|e| e.0);
    }
    rows
}

/// Eigenvalues of a symmetric matrix, decreasing.
fn sorted_eigenvalues(m: DMatrix<f64>) -> Vec<f64> {
    let mut values: Vec<f64> = SymmetricEigen::new(m).eigenvalues.iter().copied().collect();
    values.sort_by(|a, b| b.total_cmp(a));
    values
}

/// max(|λ₂|, |λ_n|) of eigenvalues sorted decreasing (λ₁ = 1 for a stochastic matrix).
fn second_largest_modulus(values: &[f64]) -> f64 {
    match values {
        [] | [_] => 0.0,
        [_, second, ..] => second.abs().max(values[values.len() - 1].abs()),
    }
}

/// The dense symmetric W with `weights` on `edges`.
fn dense(n: usize, edges: &[(u32, u32)], weights: &[f64]) -> DMatrix<f64> {
    let mut m = DMatrix::<f64>::identity(n, n);
    for (&(a, b), &w) in edges.iter().zip(weights) {
        let (a, b) = (a as usize, b as usize);
        m[(a, b)] = w;
        m[(b, a)] = w;
        m[(a, a)] -= w;
        m[(b, b)] -= w;
    }
    m
}

/// FMMC edge weights by projected subgradient descent on s(w) = max(λ₂(W), −λ_n(W)), with
/// W = I − Σ_l w_l (e_a − e_b)(e_a − e_b)ᵀ. A subgradient is −(u_a − u_b)² (λ₂ active, unit
/// eigenvector u) or (v_a − v_b)² (−λ_n active, eigenvector v). After each step the weights are
/// projected back on {w ≥ 0, Σ_{l ∋ i} w_l ≤ 1 for every node i} as in Boyd et al.: clip at
/// zero, then at each over-full node subtract the δ that brings its links' sum to 1.
fn fmmc(graph: &Graph, edges: &[(u32, u32)], iterations: u32, step: f64) -> Vec<f64> {
    let n = graph.len();
    let mut w = metropolis_hastings(graph, edges);
    if n <= 2 || edges.is_empty() {
        return w;
    }
    let mut incident: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (l, &(a, b)) in edges.iter().enumerate() {
        incident[a as usize].push(l);
        incident[b as usize].push(l);
    }
    let mut best = (f64::INFINITY, w.clone());
    for k in 0..=iterations {
        let eig = SymmetricEigen::new(dense(n, edges, &w));
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| eig.eigenvalues[a].total_cmp(&eig.eigenvalues[b]));
        let (lowest, second) = (order[0], order[n - 2]);
        let (l2, ln) = (eig.eigenvalues[second], eig.eigenvalues[lowest]);
        let slem = l2.max(-ln);
        if slem < best.0 {
            best = (slem, w.clone());
        }
        if k == iterations {
            break;
        }
        let (vector, sign) = if l2 >= -ln {
            (eig.eigenvectors.column(second), -1.0)
        } else {
            (eig.eigenvectors.column(lowest), 1.0)
        };
        let g: Vec<f64> = edges
            .iter()
            .map(|&(a, b)| sign * (vector[a as usize] - vector[b as usize]).powi(2))
            .collect();
        let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm == 0.0 {
            break;
        }
        let alpha = step / ((k + 1) as f64).sqrt();
        for (wl, gl) in w.iter_mut().zip(&g) {
            *wl = (*wl - alpha * gl / norm).max(0.0);
        }
        for links in &incident {
            cap_node(&mut w, links);
        }
    }
    best.1
}

/// Brings Σ w_l over `links` down to at most 1 by subtracting one δ ≥ 0 from each (clipped at
/// zero): the Euclidean projection of those weights onto {w ≥ 0, Σ w ≤ 1}.
fn cap_node(w: &mut [f64], links: &[usize]) {
    let sum: f64 = links.iter().map(|&l| w[l]).sum();
    if sum <= 1.0 {
        return;
    }
    let mut values: Vec<f64> = links.iter().map(|&l| w[l]).collect();
    values.sort_by(|a, b| b.total_cmp(a));
    let (mut cumulative, mut delta) = (0.0, 0.0);
    for (j, v) in values.iter().enumerate() {
        cumulative += v;
        let candidate = (cumulative - 1.0) / (j + 1) as f64;
        if *v > candidate {
            delta = candidate;
        }
    }
    for &l in links {
        w[l] = (w[l] - delta).max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    const RULES: [MixingRule; 4] = [
        MixingRule::MetropolisHastings {},
        MixingRule::MaxDegree {},
        MixingRule::UniformNeighbour {},
        MixingRule::Fmmc {
            iterations: 60,
            step: 0.05,
        },
    ];

    /// Random graphs of every family that can be random, with random sizes.
    fn random_graphs(count: usize) -> Vec<Graph> {
        let mut rng = ChaCha20Rng::seed_from_u64(2026);
        (0..count)
            .map(|k| {
                let n = rng.gen_range(3..40);
                match k % 3 {
                    0 => Graph::erdos_renyi(n, rng.gen_range(0.1..0.9), &mut rng),
                    1 => Graph::geometric(n, rng.gen_range(0.2..0.6), &mut rng),
                    _ => Graph::ring(n).filter_edges(|_, _| rng.gen_bool(0.9)),
                }
            })
            .collect()
    }

    #[test]
    fn every_rule_is_stochastic_on_the_graph_with_a_gap_iff_connected() {
        for graph in random_graphs(45) {
            for rule in &RULES {
                let w = Mixing::build(&graph, rule).expect("a rule's matrix passes its checks");
                let n = graph.len() as u32;
                for i in 0..n {
                    let row: f64 = w.row(i).iter().map(|e| e.1).sum();
                    assert!((row - 1.0).abs() < 1e-9);
                    for j in 0..n {
                        let wij = w.weight(i, j);
                        assert!(wij >= 0.0);
                        if i != j && wij > 0.0 {
                            assert!(graph.has_edge(i, j), "{rule:?} off the graph");
                        }
                        if rule.symmetric() {
                            assert!((wij - w.weight(j, i)).abs() < 1e-12);
                        }
                    }
                    if rule.symmetric() {
                        let col: f64 = (0..n).map(|k| w.weight(k, i)).sum();
                        assert!(
                            (col - 1.0).abs() < 1e-9,
                            "{rule:?}: column {i} sums to {col}"
                        );
                    }
                }
                if graph.is_connected() {
                    assert!(w.spectral_gap() > 1e-9, "{rule:?}: {}", w.spectral_gap());
                } else {
                    assert!(w.spectral_gap() < 1e-9, "{rule:?} on a disconnected graph");
                }
            }
        }
    }

    #[test]
    fn on_regular_graphs_every_rule_is_doubly_stochastic() {
        let regular = [
            Graph::complete(7),
            Graph::ring(9),
            Graph::torus(4, 5),
            Graph::exponential(16),
        ];
        for graph in &regular {
            let n = graph.len() as u32;
            for rule in &RULES {
                let w = Mixing::build(graph, rule).unwrap();
                for i in 0..n {
                    let col: f64 = (0..n).map(|k| w.weight(k, i)).sum();
                    assert!(
                        (col - 1.0).abs() < 1e-9,
                        "{rule:?}: column {i} sums to {col}"
                    );
                    for j in 0..n {
                        assert!((w.weight(i, j) - w.weight(j, i)).abs() < 1e-12);
                    }
                }
                assert!(w.spectral_gap() > 0.0);
            }
        }
    }

    #[test]
    fn fmmc_mixes_at_least_as_fast_as_metropolis_hastings() {
        let mut strictly_better = 0;
        for graph in random_graphs(30).into_iter().filter(Graph::is_connected) {
            let mh = Mixing::build(&graph, &MixingRule::MetropolisHastings {}).unwrap();
            let fast = Mixing::build(&graph, &RULES[3]).unwrap();
            assert!(fast.spectral_gap() >= mh.spectral_gap() - 1e-12);
            strictly_better += (fast.spectral_gap() > mh.spectral_gap() + 1e-6) as usize;
        }
        assert!(
            strictly_better > 10,
            "FMMC improved only {strictly_better} graphs"
        );
    }

    #[test]
    fn known_spectra() {
        // Complete graph: uniform-neighbour is 11ᵀ/n, which mixes in one step (gap 1).
        let w = Mixing::build(&Graph::complete(5), &MixingRule::UniformNeighbour {}).unwrap();
        assert!((w.weight(0, 3) - 0.2).abs() < 1e-15 && (w.spectral_gap() - 1.0).abs() < 1e-12);
        // Ring of n with weights 1/3: eigenvalues (1 + 2cos(2πk/n))/3; n = 6: second
        // largest modulus max(2/3, 1/3) = 2/3.
        let w = Mixing::build(&Graph::ring(6), &MixingRule::MaxDegree {}).unwrap();
        assert!(
            (w.spectral_gap() - 1.0 / 3.0).abs() < 1e-12,
            "{}",
            w.spectral_gap()
        );
        // FMMC on the path 0-1-2: the optimum puts 1/2 on both links (eigenvalues 1, 1/2,
        // −1/2: gap 1/2); Metropolis–Hastings (1/3 on each link) mixes slower.
        let path = Graph::from_edges(3, [(0, 1), (1, 2)]);
        let w = Mixing::build(
            &path,
            &MixingRule::Fmmc {
                iterations: 400,
                step: 0.1,
            },
        )
        .unwrap();
        assert!(
            (w.spectral_gap() - 0.5).abs() < 1e-2,
            "{}",
            w.spectral_gap()
        );
        // A disconnected graph has no gap.
        let two = Graph::from_edges(4, [(0, 1), (2, 3)]);
        let w = Mixing::build(&two, &MixingRule::MetropolisHastings {}).unwrap();
        assert!(w.spectral_gap().abs() < 1e-12);
    }

    #[test]
    fn the_projection_caps_each_node() {
        let mut w = vec![0.8, 0.6, 0.1];
        cap_node(&mut w, &[0, 1, 2]);
        // δ = 0.2 on the two largest brings them to (0.6, 0.4); 0.1 − δ is clipped to 0.
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{w:?}");
        assert!((w[0] - 0.6).abs() < 1e-12 && (w[1] - 0.4).abs() < 1e-12 && w[2] == 0.0);
    }
}
