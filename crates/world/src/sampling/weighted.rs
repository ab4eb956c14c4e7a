//! `strategy: weighted`: clients drawn with probability proportional to their training-set
//! sizes n_t, without replacement or (`replacement: true`) with it.

use super::{Draw, StrategySettings};
use rand::distributions::{Distribution, WeightedIndex};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Weighted selection takes no settings of its own (`replacement` is the section's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightedSpec {}

impl StrategySettings for WeightedSpec {
    const WITH_REPLACEMENT: bool = true;
    const FILLS_SLOTS: bool = true;

    fn draw(&self, d: &Draw<'_>, rng: &mut ChaCha20Rng) -> Vec<u32> {
        let candidates = d.candidates.to_vec();
        if d.replacement {
            let weights: Vec<f64> = candidates.iter().map(|&c| (d.weight)(c)).collect();
            return match WeightedIndex::new(&weights) {
                Ok(dist) => (0..d.count).map(|_| candidates[dist.sample(rng)]).collect(),
                Err(_) => Vec::new(),
            };
        }
        rand::seq::index::sample_weighted(
            rng,
            candidates.len(),
            |i| (d.weight)(candidates[i]),
            d.count,
        )
        .map(|ix| ix.into_iter().map(|i| candidates[i]).collect())
        .unwrap_or_default()
    }
}

/// `count` of `candidates` (all of them where there are fewer) drawn without replacement with
/// probability proportional to `weight`, in draw order. A weight that is not a positive
/// finite number counts as the least positive one.
pub(super) fn by_weight(
    candidates: &[u32],
    weight: impl Fn(u32) -> f64,
    count: usize,
    rng: &mut ChaCha20Rng,
) -> Vec<u32> {
    let weight = |i: usize| match weight(candidates[i]) {
        w if w.is_finite() => w.max(f64::MIN_POSITIVE),
        _ => f64::MIN_POSITIVE,
    };
    let count = count.min(candidates.len());
    rand::seq::index::sample_weighted(rng, candidates.len(), weight, count)
        .map(|ix| ix.into_iter().map(|i| candidates[i]).collect())
        .unwrap_or_default()
}
