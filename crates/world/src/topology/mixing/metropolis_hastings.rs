//! `metropolis_hastings`: W_ij = 1 / (1 + max(d_i, d_j)) on each link.

use super::catalogue::MixingRuleSettings;
use super::Weights;
use crate::topology::Graph;
use serde::{Deserialize, Serialize};

/// The settings of `metropolis_hastings`: none (what it does: its entry in
/// [`super::MIXING_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetropolisHastingsSpec {}

impl MixingRuleSettings for MetropolisHastingsSpec {
    fn weights(&self, graph: &Graph, edges: &[(u32, u32)]) -> Weights {
        Weights::OnLinks(metropolis_hastings(graph, edges))
    }
}

/// 1 / (1 + max(d_a, d_b)) on each link (a, b) of `edges`.
pub(super) fn metropolis_hastings(graph: &Graph, edges: &[(u32, u32)]) -> Vec<f64> {
    edges
        .iter()
        .map(|&(a, b)| 1.0 / (1.0 + graph.degree(a).max(graph.degree(b)) as f64))
        .collect()
}
