//! `median`: the coordinate-wise median.

use super::catalogue::RobustRuleSettings;
use super::{coordinatewise, median_of_sorted};
use serde::{Deserialize, Serialize};

/// The settings of `median`: none (what it does: its entry in [`super::ROBUST_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MedianSpec {}

impl RobustRuleSettings for MedianSpec {
    fn combine(&self, changes: &[&[f64]], _previous: &[f64]) -> Vec<f64> {
        coordinatewise(changes, median_of_sorted)
    }
}
