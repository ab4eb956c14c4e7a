//! `quantity_skew`: shuffled rows in parts of Dirichlet-drawn sizes.

use super::catalogue::PartitionSettings;
use super::{dirichlet, multinomial};
use crate::settings::FieldError;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Quantity skew (Li et al. 2022, "Federated learning on non-IID data silos"): the rows are
/// shuffled, so every client sees the same label mix, but the clients' shares of the rows are
/// drawn from Dir(α·1) (counts from the multinomial): a small α makes a few clients hold most
/// of the data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuantitySkewSpec {
    /// The number of clients.
    pub clients: usize,
    /// α of Dir(α·1), the clients' shares of the rows: small values give very unequal sizes.
    #[serde(default = "half")]
    pub alpha: f64,
}

fn half() -> f64 {
    0.5
}

impl PartitionSettings for QuantitySkewSpec {
    const EXAMPLE: &'static str = "{clients: 4}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("clients", self.clients)?;
        FieldError::positive("alpha", self.alpha)
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
        let mut rows: Vec<usize> = (0..labels.len()).collect();
        rows.shuffle(rng);
        let shares = dirichlet(self.alpha, self.clients, rng);
        let mut at = 0;
        Ok(multinomial(rows.len(), &shares, rng)
            .into_iter()
            .map(|k| {
                at += k;
                rows[at - k..at].to_vec()
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn sizes_follow_alpha_and_every_row_is_dealt_once() {
        let labels: Vec<i64> = (0..2000).map(|i| i % 10).collect();
        let deal = |alpha: f64| {
            let spec = QuantitySkewSpec { clients: 10, alpha };
            spec.assign(&labels, 10, &mut ChaCha20Rng::seed_from_u64(7))
                .unwrap()
        };
        for parts in [deal(0.3), deal(100.0)] {
            let mut all: Vec<usize> = parts.iter().flatten().copied().collect();
            all.sort();
            assert_eq!(all, (0..2000).collect::<Vec<_>>());
        }
        let largest = |parts: &[Vec<usize>]| parts.iter().map(Vec::len).max().unwrap();
        // Even shares are 200 rows each; a small α gives one client far more.
        assert!(largest(&deal(100.0)) < 300, "{}", largest(&deal(100.0)));
        assert!(largest(&deal(0.3)) > 500, "{}", largest(&deal(0.3)));
        assert_eq!(deal(0.3), deal(0.3));
    }
}
