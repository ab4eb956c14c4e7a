//! `uniform_neighbour`: W_ij = 1 / (1 + d_i) for each neighbour and for i itself.

use super::catalogue::MixingRuleSettings;
use super::Weights;
use crate::topology::Graph;
use serde::{Deserialize, Serialize};

/// The settings of `uniform_neighbour`: none (what it does: its entry in
/// [`super::MIXING_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UniformNeighbourSpec {}

impl MixingRuleSettings for UniformNeighbourSpec {
    /// Symmetric only on regular graphs.
    const SYMMETRIC: bool = false;

    /// Row i gives 1 / (1 + d_i) to i and each neighbour; π_i = 1 + d_i balances it
    /// (π_i W_ij = 1 = π_j W_ji on a link).
    fn weights(&self, graph: &Graph, _edges: &[(u32, u32)]) -> Weights {
        let n = graph.len() as u32;
        let balance: Vec<f64> = (0..n).map(|i| 1.0 + graph.degree(i) as f64).collect();
        let rows = (0..n)
            .map(|i| {
                let w = 1.0 / balance[i as usize];
                let mut row: Vec<(u32, f64)> = graph.neighbors(i).iter().map(|&j| (j, w)).collect();
                row.push((i, w));
                row.sort_by_key(|e| e.0);
                row
            })
            .collect();
        Weights::Rows { rows, balance }
    }
}
