//! `ipm`: inner product manipulation, −ε·μ of the round's honest changes.

use super::catalogue::AttackSettings;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `ipm` (what it does: its entry in [`super::ATTACKS`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IpmSpec {
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
}

fn default_epsilon() -> f64 {
    0.1
}

impl AttackSettings for IpmSpec {
    const CRAFTED: bool = true;

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::positive("epsilon", self.epsilon)
    }

    fn crafted(&self, honest: &[&[f64]], _n: usize, _malicious: usize) -> Vec<f64> {
        let mean = super::mean_of(honest);
        mean.iter().map(|m| -self.epsilon * m).collect()
    }
}
