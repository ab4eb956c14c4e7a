//! `strategy: power_of_choice`: power-of-choice in its rpow-d form (Cho, Wang and Joshi 2022):
//! d candidates drawn by n_t, of which the K with the highest loss last reported are selected.

use super::weighted::by_weight;
use super::{Draw, StrategySettings};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Power-of-choice's settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerOfChoiceSpec {
    /// How many clients d are drawn (by n_t) to choose the K from, at least K (2·K when not
    /// given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<usize>,
}

impl PowerOfChoiceSpec {
    /// d when a round selects `count` of `total` candidates: `candidates` or 2·`count`, at
    /// least `count` and at most `total`.
    pub fn candidates_for(&self, count: usize, total: usize) -> usize {
        self.candidates.unwrap_or(2 * count).max(count).min(total)
    }
}

impl StrategySettings for PowerOfChoiceSpec {
    const USES_FEEDBACK: bool = true;

    fn validate(&self) -> Result<(), FieldError> {
        match self.candidates {
            Some(d) => FieldError::at_least_one("candidates", d),
            None => Ok(()),
        }
    }

    /// d candidates drawn by n_t, of which the `count` with the highest loss last heard are
    /// chosen; a candidate not heard from yet ranks above every one heard from (its loss is
    /// unknown, so taken as the highest), ties go to the lower id.
    fn draw(&self, d: &Draw<'_>, rng: &mut ChaCha20Rng) -> Vec<u32> {
        let candidates = d.candidates.to_vec();
        let draws = self.candidates_for(d.count, candidates.len());
        let mut drawn = by_weight(&candidates, d.weight, draws, rng);
        let loss = |c: u32| d.feedback.get(c).map_or(f64::INFINITY, |h| h.loss.mean);
        drawn.sort_by(|&a, &b| loss(b).total_cmp(&loss(a)).then(a.cmp(&b)));
        drawn.truncate(d.count);
        drawn
    }
}
