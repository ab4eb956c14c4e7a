//! `shards`: McMahan et al.'s pathological split.

use super::catalogue::PartitionSettings;
use crate::settings::FieldError;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// McMahan et al.'s pathological split: rows sorted by label, cut into
/// `clients × shards_per_client` equal shards, each client `shards_per_client` at random.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardsSpec {
    /// The number of clients.
    pub clients: usize,
    /// Shards of label-sorted rows per client.
    #[serde(default = "two")]
    pub shards_per_client: usize,
}

fn two() -> usize {
    2
}

impl PartitionSettings for ShardsSpec {
    const EXAMPLE: &'static str = "{clients: 4}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("clients", self.clients)?;
        FieldError::at_least_one("shards_per_client", self.shards_per_client)
    }

    fn clients(&self) -> Option<usize> {
        Some(self.clients)
    }

    fn assign(
        &self,
        labels: &[i64],
        _classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        let n = labels.len();
        let mut rows: Vec<usize> = (0..n).collect();
        rows.shuffle(rng);
        rows.sort_by_key(|&r| labels[r]);
        let shards = self.clients * self.shards_per_client;
        let mut ids: Vec<usize> = (0..shards).collect();
        ids.shuffle(rng);
        Ok(ids
            .chunks(self.shards_per_client)
            .map(|mine| {
                mine.iter()
                    .flat_map(|&s| rows[s * n / shards..(s + 1) * n / shards].to_vec())
                    .collect()
            })
            .collect())
    }
}
