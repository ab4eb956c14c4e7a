//! `trimmed_mean`: the coordinate-wise mean without each coordinate's extremes.

use super::catalogue::RobustRuleSettings;
use super::coordinatewise;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `trimmed_mean` (what it does: its entry in [`super::ROBUST_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrimmedMeanSpec {
    /// The share dropped at each end, in [0, 0.5).
    pub trim: f64,
}

impl RobustRuleSettings for TrimmedMeanSpec {
    const EXAMPLE: &'static str = "{trim: 0.1}";

    fn validate(&self) -> Result<(), FieldError> {
        if !(0.0..0.5).contains(&self.trim) {
            return Err(FieldError::new(
                "trim".into(),
                format!("must be in [0, 0.5), got {}", self.trim),
            ));
        }
        Ok(())
    }

    fn combine(&self, changes: &[&[f64]], _previous: &[f64]) -> Vec<f64> {
        let cut = (self.trim * changes.len() as f64).floor() as usize;
        coordinatewise(changes, |column| {
            let kept = &column[cut..column.len() - cut];
            kept.iter().sum::<f64>() / kept.len() as f64
        })
    }
}
