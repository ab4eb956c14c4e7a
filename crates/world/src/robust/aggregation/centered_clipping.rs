//! `centered_clipping`: clipped steps from the previous round's combined change.

use super::catalogue::RobustRuleSettings;
use super::distance;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `centered_clipping` (what it does: its entry in [`super::ROBUST_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CenteredClippingSpec {
    /// τ.
    pub radius: f64,
    /// The clipped steps from the previous round's combined change.
    #[serde(default = "one")]
    pub iterations: usize,
}

fn one() -> usize {
    1
}

impl RobustRuleSettings for CenteredClippingSpec {
    const EXAMPLE: &'static str = "{radius: 1.0}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::positive("radius", self.radius)?;
        FieldError::at_least_one("iterations", self.iterations)
    }

    fn combine(&self, changes: &[&[f64]], previous: &[f64]) -> Vec<f64> {
        let (n, d) = (changes.len(), changes[0].len());
        let mut v = if previous.len() == d {
            previous.to_vec()
        } else {
            vec![0.0; d]
        };
        for _ in 0..self.iterations {
            let mut step = vec![0.0; d];
            for x in changes {
                let norm = distance(&v, x);
                let scale = if norm > self.radius {
                    self.radius / norm
                } else {
                    1.0
                };
                for j in 0..d {
                    step[j] += scale * (x[j] - v[j]) / n as f64;
                }
            }
            v.iter_mut().zip(step).for_each(|(a, s)| *a += s);
        }
        v
    }
}
