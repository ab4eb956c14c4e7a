//! `bulyan`: Krum picks, then per coordinate a mean around the median.

use super::catalogue::RobustRuleSettings;
use super::{coordinatewise, krum_order, median_of_sorted, squared_distances};
use serde::{Deserialize, Serialize};

/// The settings of `bulyan` (what it does: its entry in [`super::ROBUST_RULES`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BulyanSpec {
    /// f: the malicious clients to tolerate.
    pub byzantine: usize,
}

impl RobustRuleSettings for BulyanSpec {
    const EXAMPLE: &'static str = "{byzantine: 1}";

    fn least_updates(&self) -> Option<(usize, String)> {
        let byzantine = self.byzantine;
        Some((
            4 * byzantine + 3,
            format!("Bulyan with byzantine: {byzantine} needs 4f + 3 updates a round"),
        ))
    }

    fn combine(&self, changes: &[&[f64]], _previous: &[f64]) -> Vec<f64> {
        let byzantine = self.byzantine;
        let theta = changes.len() - 2 * byzantine;
        let squares = squared_distances(changes);
        let mut left: Vec<usize> = (0..changes.len()).collect();
        let mut picked = Vec::with_capacity(theta);
        while picked.len() < theta {
            let best = krum_order(&squares, &left, byzantine)[0];
            left.retain(|&i| i != best);
            picked.push(changes[best]);
        }
        let beta = theta - 2 * byzantine;
        coordinatewise(&picked, |column| {
            let median = median_of_sorted(column);
            let mut by_distance = column.to_vec();
            by_distance.sort_by(|a, b| (a - median).abs().total_cmp(&(b - median).abs()));
            by_distance[..beta].iter().sum::<f64>() / beta as f64
        })
    }
}
