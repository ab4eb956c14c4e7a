//! Client selection for a round, drawn from the server's seeded stream.

use rand::distributions::{Distribution, WeightedIndex};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// How many clients a round wants (K).
#[derive(Clone, Debug, PartialEq)]
pub enum SampleSize {
    /// `max(1, ⌊fraction · T⌋)` of the T training clients, with `fraction` in (0, 1].
    Fraction(f64),
    /// `count` clients, 1 ≤ `count` ≤ T (checked when the scenario is validated).
    Count(usize),
}

/// Which clients are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Uniformly, without replacement.
    #[default]
    Uniform,
    /// With probability proportional to the clients' training-set sizes n_t.
    Weighted,
}

/// A round's client selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    pub size: SampleSize,
    pub strategy: Strategy,
    /// Weighted draws with replacement (duplicates train once, so a round may have fewer
    /// than K distinct clients).
    pub replacement: bool,
    /// Draw only among clients online at selection time.
    pub available_only: bool,
    /// Over-selection o: select ⌈(1 + o)·K⌉ and aggregate the first K updates to arrive.
    pub over_selection: f64,
}

impl Sampling {
    /// Uniform selection of a fraction of the clients: the default.
    pub fn uniform(size: SampleSize) -> Sampling {
        Sampling {
            size,
            strategy: Strategy::Uniform,
            replacement: false,
            available_only: false,
            over_selection: 0.0,
        }
    }

    /// K, the clients a round wants out of `total` training clients.
    pub fn per_round(&self, total: usize) -> usize {
        match self.size {
            SampleSize::Fraction(f) => ((f * total as f64).floor() as usize).clamp(1, total),
            SampleSize::Count(k) => k.clamp(1, total),
        }
    }

    /// How many clients to select out of `total`: K, or ⌈(1 + o)·K⌉ with over-selection.
    pub fn to_select(&self, total: usize) -> usize {
        let k = self.per_round(total);
        ((k as f64 * (1.0 + self.over_selection)).ceil() as usize).clamp(k, total)
    }

    /// `count` of the `candidates` (or all of them, if there are no more), sorted by id.
    /// `weight` gives n_t for the weighted strategy.
    pub fn select(
        &self,
        candidates: &[u32],
        count: usize,
        weight: impl Fn(u32) -> f64,
        rng: &mut impl Rng,
    ) -> Vec<u32> {
        let n = candidates.len();
        if count == 0 || n == 0 {
            return Vec::new();
        }
        let mut chosen: Vec<u32> = match self.strategy {
            _ if count >= n && !self.replacement => candidates.to_vec(),
            Strategy::Uniform => rand::seq::index::sample(rng, n, count)
                .into_iter()
                .map(|i| candidates[i])
                .collect(),
            Strategy::Weighted if self.replacement => {
                let weights: Vec<f64> = candidates.iter().map(|&c| weight(c)).collect();
                match WeightedIndex::new(&weights) {
                    Ok(dist) => (0..count).map(|_| candidates[dist.sample(rng)]).collect(),
                    Err(_) => Vec::new(),
                }
            }
            Strategy::Weighted => {
                rand::seq::index::sample_weighted(rng, n, |i| weight(candidates[i]), count)
                    .map(|ix| ix.into_iter().map(|i| candidates[i]).collect())
                    .unwrap_or_default()
            }
        };
        chosen.sort_unstable();
        chosen.dedup();
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn counts_and_sorted_unique_choice() {
        let frac = |f| Sampling::uniform(SampleSize::Fraction(f));
        assert_eq!(frac(0.1).per_round(300), 30);
        assert_eq!(frac(0.001).per_round(300), 1);
        assert_eq!(
            Sampling::uniform(SampleSize::Count(500)).per_round(300),
            300
        );
        let over = Sampling {
            over_selection: 0.3,
            ..frac(0.1)
        };
        assert_eq!(over.to_select(100), 13);
        assert_eq!(over.to_select(5), 2);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let all: Vec<u32> = (0..50).collect();
        let s = frac(0.2).select(&all, 10, |_| 1.0, &mut rng);
        assert_eq!(s.len(), 10);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert!(s.iter().all(|&c| c < 50));
        assert_eq!(frac(0.2).select(&[4, 9], 10, |_| 1.0, &mut rng), vec![4, 9]);
    }

    #[test]
    fn weighted_follows_sizes() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        let all: Vec<u32> = (0..10).collect();
        // Client 9 has 100 samples, the others 1: it is nearly always drawn.
        let w = |c: u32| if c == 9 { 100.0 } else { 1.0 };
        for replacement in [false, true] {
            let s = Sampling {
                strategy: Strategy::Weighted,
                replacement,
                ..Sampling::uniform(SampleSize::Count(1))
            };
            let hits = (0..200)
                .filter(|_| s.select(&all, 1, w, &mut rng) == vec![9])
                .count();
            assert!(hits > 170, "{hits}");
        }
    }
}
