//! `max_degree`: W_ij = 1 / (1 + d_max) on each link.

use super::catalogue::MixingRuleSettings;
use super::Weights;
use crate::topology::Graph;
use serde::{Deserialize, Serialize};

/// The settings of `max_degree`: none (what it does: its entry in [`super::MIXING_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaxDegreeSpec {}

impl MixingRuleSettings for MaxDegreeSpec {
    fn weights(&self, graph: &Graph, edges: &[(u32, u32)]) -> Weights {
        let w = 1.0 / (1.0 + graph.max_degree() as f64);
        Weights::OnLinks(vec![w; edges.len()])
    }
}
