//! `iid`: shuffled rows in equal parts.

use super::catalogue::PartitionSettings;
use crate::settings::FieldError;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Shuffled rows dealt into `clients` parts of equal size (±1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IidSpec {
    /// The number of clients.
    pub clients: usize,
}

impl PartitionSettings for IidSpec {
    const EXAMPLE: &'static str = "{clients: 4}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("clients", self.clients)
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
        let (n, clients) = (labels.len(), self.clients);
        let mut rows: Vec<usize> = (0..n).collect();
        rows.shuffle(rng);
        Ok((0..clients)
            .map(|c| rows[c * n / clients..(c + 1) * n / clients].to_vec())
            .collect())
    }
}
