//! Mixing matrices on a graph: the weight W_ij peer i gives peer j's model when it averages.
//! Every matrix is checked when it is built (non-negative, rows sum to 1, support on the graph
//! and the diagonal; symmetric, hence doubly stochastic, where the rule promises it), and its
//! spectral gap 1 − |λ₂| is computed once.

mod catalogue;
mod fmmc;
mod max_degree;
mod metropolis_hastings;
mod uniform_neighbour;

pub use catalogue::{
    MixingRuleSettings, MixingRuleSpec, Registration as MixingRuleRegistration, MIXING_RULES,
};
pub use fmmc::FmmcSpec;
pub use max_degree::MaxDegreeSpec;
pub use metropolis_hastings::MetropolisHastingsSpec;
pub use uniform_neighbour::UniformNeighbourSpec;

use super::{Graph, TopologyError};
use nalgebra::{DMatrix, SymmetricEigen};

/// The weights a rule gives on a graph, before [`Mixing::build`] checks them.
pub enum Weights {
    /// A symmetric W: these weights on the graph's links (in `graph.edges()` order), the rest
    /// of each row on the diagonal.
    OnLinks(Vec<f64>),
    /// Rows of W (`(j, W_ij)`, j increasing), and a positive π with π_i W_ij = π_j W_ji, so
    /// that W, not symmetric, has real eigenvalues.
    Rows {
        rows: Vec<Vec<(u32, f64)>>,
        balance: Vec<f64>,
    },
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
    pub fn build(graph: &Graph, rule: &MixingRuleSpec) -> Result<Mixing, TopologyError> {
        let edges = graph.edges();
        let full_support = rule.has_full_support();
        match rule.weights(graph, &edges) {
            Weights::OnLinks(weights) => Mixing::from_rows(
                graph,
                symmetric_rows(graph.len(), &edges, &weights),
                None,
                full_support,
            ),
            Weights::Rows { rows, balance } => {
                Mixing::from_rows(graph, rows, Some(&balance), full_support)
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha20Rng;

    /// Every rule; FMMC with fewer iterations than its default.
    fn rules() -> [MixingRuleSpec; 4] {
        [
            MixingRuleSpec::of(MetropolisHastingsSpec {}),
            MixingRuleSpec::of(MaxDegreeSpec {}),
            MixingRuleSpec::of(UniformNeighbourSpec {}),
            MixingRuleSpec::of(FmmcSpec {
                iterations: 60,
                step: 0.05,
            }),
        ]
    }

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
            for rule in &rules() {
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
                        if rule.is_symmetric() {
                            assert!((wij - w.weight(j, i)).abs() < 1e-12);
                        }
                    }
                    if rule.is_symmetric() {
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
            for rule in &rules() {
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
            let mh = Mixing::build(&graph, &MixingRuleSpec::of(MetropolisHastingsSpec {})).unwrap();
            let fast = Mixing::build(&graph, &rules()[3]).unwrap();
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
        let w = Mixing::build(
            &Graph::complete(5),
            &MixingRuleSpec::of(UniformNeighbourSpec {}),
        )
        .unwrap();
        assert!((w.weight(0, 3) - 0.2).abs() < 1e-15 && (w.spectral_gap() - 1.0).abs() < 1e-12);
        // Ring of n with weights 1/3: eigenvalues (1 + 2cos(2πk/n))/3; n = 6: second
        // largest modulus max(2/3, 1/3) = 2/3.
        let w = Mixing::build(&Graph::ring(6), &MixingRuleSpec::of(MaxDegreeSpec {})).unwrap();
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
            &MixingRuleSpec::of(FmmcSpec {
                iterations: 400,
                step: 0.1,
            }),
        )
        .unwrap();
        assert!(
            (w.spectral_gap() - 0.5).abs() < 1e-2,
            "{}",
            w.spectral_gap()
        );
        // A disconnected graph has no gap.
        let two = Graph::from_edges(4, [(0, 1), (2, 3)]);
        let w = Mixing::build(&two, &MixingRuleSpec::of(MetropolisHastingsSpec {})).unwrap();
        assert!(w.spectral_gap().abs() < 1e-12);
    }
}
