//! `strategy: uniform` (the default): K clients drawn uniformly without replacement.

use super::{Draw, StrategySettings};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Uniform selection takes no settings of its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UniformSpec {}

impl StrategySettings for UniformSpec {
    const SAME_CHANCE: bool = true;
    const FILLS_SLOTS: bool = true;

    /// Reads only the candidates it draws, so it costs what the round draws, whatever the
    /// population.
    fn draw(&self, d: &Draw<'_>, rng: &mut ChaCha20Rng) -> Vec<u32> {
        rand::seq::index::sample(rng, d.candidates.len(), d.count)
            .into_iter()
            .map(|i| d.candidates.get(i))
            .collect()
    }
}
