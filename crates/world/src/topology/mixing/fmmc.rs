//! `fmmc`: the Fastest Mixing Markov Chain weights on the graph (Boyd, Diaconis, Xiao 2004).

use super::catalogue::MixingRuleSettings;
use super::metropolis_hastings::metropolis_hastings;
use super::Weights;
use crate::settings::FieldError;
use crate::topology::Graph;
use nalgebra::{DMatrix, SymmetricEigen};
use serde::{Deserialize, Serialize};

/// The settings of `fmmc` (what it does: its entry in [`super::MIXING_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FmmcSpec {
    /// Subgradient iterations.
    #[serde(default = "default_iterations")]
    pub iterations: u32,
    /// Step length of iteration k is `step / √k` (along the normalised subgradient).
    #[serde(default = "default_step")]
    pub step: f64,
}

fn default_iterations() -> u32 {
    100
}
fn default_step() -> f64 {
    0.05
}

impl MixingRuleSettings for FmmcSpec {
    /// The optimum may leave some links without weight.
    const FULL_SUPPORT: bool = false;

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("iterations", self.iterations as usize)?;
        FieldError::positive("step", self.step)
    }

    fn weights(&self, graph: &Graph, edges: &[(u32, u32)]) -> Weights {
        Weights::OnLinks(fmmc(graph, edges, self.iterations, self.step))
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

    #[test]
    fn the_projection_caps_each_node() {
        let mut w = vec![0.8, 0.6, 0.1];
        cap_node(&mut w, &[0, 1, 2]);
        // δ = 0.2 on the two largest brings them to (0.6, 0.4); 0.1 − δ is clipped to 0.
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12, "{w:?}");
        assert!((w[0] - 0.6).abs() < 1e-12 && (w[1] - 0.4).abs() < 1e-12 && w[2] == 0.0);
    }
}
