//! `krum`: the change closest to its nearest others (Multi-Krum: the mean of the best m).

use super::catalogue::RobustRuleSettings;
use super::{krum_order, mean_of, squared_distances};
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// The settings of `krum` (what it does: its entry in [`super::ROBUST_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KrumSpec {
    /// f: the malicious clients to tolerate.
    pub byzantine: usize,
    /// m: how many of the best-scored changes are averaged.
    #[serde(default = "one")]
    pub multi: usize,
}

fn one() -> usize {
    1
}

impl RobustRuleSettings for KrumSpec {
    const EXAMPLE: &'static str = "{byzantine: 1}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("multi", self.multi)
    }

    fn least_updates(&self) -> Option<(usize, String)> {
        let (byzantine, multi) = (self.byzantine, self.multi);
        Some((
            (2 * byzantine + 3).max(multi),
            format!(
                "Krum with byzantine: {byzantine} needs 2f + 3 updates a round (and at least \
                 multi: {multi})"
            ),
        ))
    }

    fn combine(&self, changes: &[&[f64]], _previous: &[f64]) -> Vec<f64> {
        let all: Vec<usize> = (0..changes.len()).collect();
        let chosen = krum_order(&squared_distances(changes), &all, self.byzantine);
        let best: Vec<&[f64]> = chosen[..self.multi].iter().map(|&i| changes[i]).collect();
        mean_of(&best)
    }
}
