//! `geometric_median`: the smoothed Weiszfeld iteration (RFA).

use super::catalogue::RobustRuleSettings;
use super::{distance, mean_of};
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `geometric_median` (what it does: its entry in [`super::ROBUST_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GeometricMedianSpec {
    /// The Weiszfeld steps from the mean.
    #[serde(default = "default_iterations")]
    pub iterations: usize,
    /// ν, the smoothing that keeps a weight finite.
    #[serde(default = "default_smoothing")]
    pub smoothing: f64,
}

fn default_iterations() -> usize {
    8
}
fn default_smoothing() -> f64 {
    1e-6
}

impl RobustRuleSettings for GeometricMedianSpec {
    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("iterations", self.iterations)?;
        FieldError::positive("smoothing", self.smoothing)
    }

    fn combine(&self, changes: &[&[f64]], _previous: &[f64]) -> Vec<f64> {
        let d = changes[0].len();
        let mut z = mean_of(changes);
        for _ in 0..self.iterations {
            let weights: Vec<f64> = changes
                .iter()
                .map(|x| 1.0 / distance(&z, x).max(self.smoothing))
                .collect();
            let total: f64 = weights.iter().sum();
            z = (0..d)
                .map(|j| {
                    changes
                        .iter()
                        .zip(&weights)
                        .map(|(x, w)| w * x[j])
                        .sum::<f64>()
                        / total
                })
                .collect();
        }
        z
    }
}
