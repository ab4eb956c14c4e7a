//! `pfedme`: pFedMe's MNIST split.

use super::catalogue::PartitionSettings;
use crate::settings::FieldError;
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// pFedMe's MNIST split: client u holds labels u, u + 1, … (mod classes), `labels_per_client`
/// of them; each label's rows are shared among its holders in proportions ∝ U(1, 3), drawn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PfedmeSpec {
    /// The number of clients.
    #[serde(default = "twenty")]
    pub clients: usize,
    /// How many labels each client holds.
    #[serde(default = "two")]
    pub labels_per_client: usize,
}

fn two() -> usize {
    2
}
fn twenty() -> usize {
    20
}

impl PartitionSettings for PfedmeSpec {
    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("clients", self.clients)?;
        FieldError::at_least_one("labels_per_client", self.labels_per_client)
    }

    fn clients(&self) -> Option<usize> {
        Some(self.clients)
    }

    fn assign(
        &self,
        labels: &[i64],
        classes: usize,
        rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        let (n, clients) = (labels.len(), self.clients);
        let mut rows: Vec<usize> = (0..n).collect();
        rows.shuffle(rng);
        let mut by_label = vec![Vec::new(); classes];
        for &r in &rows {
            by_label[labels[r] as usize].push(r);
        }
        let mut out = vec![Vec::new(); clients];
        for (label, mut pool) in by_label.into_iter().enumerate() {
            let holders: Vec<usize> = (0..clients)
                .filter(|&u| (0..self.labels_per_client).any(|j| (u + j) % classes == label))
                .collect();
            if holders.is_empty() {
                continue;
            }
            pool.shuffle(rng);
            let shares: Vec<f64> = holders.iter().map(|_| rng.gen_range(1.0..3.0)).collect();
            let total: f64 = shares.iter().sum();
            let mut at = 0usize;
            let mut cum = 0.0;
            for (h, share) in holders.iter().zip(&shares) {
                cum += share;
                let end = ((cum / total) * pool.len() as f64).round() as usize;
                out[*h].extend_from_slice(&pool[at..end.min(pool.len())]);
                at = end.min(pool.len());
            }
        }
        Ok(out)
    }
}
