//! `strategy: poisson`: Poisson participation. Each idle client joins a round independently
//! with probability q = `fraction`, so a round has q·T clients on average and may have none.

use super::{Draw, StrategySettings};
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Poisson participation takes no settings of its own (its rate is `fraction`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PoissonSpec {}

impl StrategySettings for PoissonSpec {
    const INDEPENDENT: bool = true;
    const SAME_CHANCE: bool = true;

    /// Each candidate independently with probability `fraction` (a scenario gives no count
    /// with Poisson; a library caller that does asks for `count` of the candidates on
    /// average), in id order. The gaps between the chosen positions are geometric, drawn one
    /// uniform number per chosen client (and one more), so a draw costs what it chooses,
    /// whatever the population.
    fn draw(&self, d: &Draw<'_>, rng: &mut ChaCha20Rng) -> Vec<u32> {
        let n = d.candidates.len();
        let rate = d.fraction.unwrap_or(d.count as f64 / n.max(1) as f64);
        if rate >= 1.0 {
            return d.candidates.to_vec();
        }
        let log_miss = (1.0 - rate).ln();
        let mut chosen = Vec::new();
        let mut at = 0usize;
        loop {
            // The number of candidates passed over before the next one chosen: P(gap ≥ g) =
            // (1 − rate)^g.
            let u: f64 = rng.gen();
            let gap = ((1.0 - u).ln() / log_miss).floor();
            if gap >= (n - at) as f64 {
                return chosen;
            }
            at += gap as usize;
            chosen.push(d.candidates.get(at));
            at += 1;
        }
    }
}
