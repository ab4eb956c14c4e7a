//! `norm_bounding`: each change scaled to a bounded norm, then the mean.

use super::catalogue::RobustRuleSettings;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `norm_bounding` (what it does: its entry in [`super::ROBUST_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NormBoundingSpec {
    /// The largest L2 norm a change keeps.
    pub bound: f64,
}

impl RobustRuleSettings for NormBoundingSpec {
    const EXAMPLE: &'static str = "{bound: 1.0}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::positive("bound", self.bound)
    }

    fn combine(&self, changes: &[&[f64]], _previous: &[f64]) -> Vec<f64> {
        let (n, d) = (changes.len(), changes[0].len());
        let mut sum = vec![0.0; d];
        for x in changes {
            let norm = x.iter().map(|a| a * a).sum::<f64>().sqrt();
            let scale = if norm > self.bound {
                self.bound / norm
            } else {
                1.0
            };
            sum.iter_mut()
                .zip(x.iter())
                .for_each(|(s, a)| *s += scale * a);
        }
        sum.iter().map(|s| s / n as f64).collect()
    }
}
