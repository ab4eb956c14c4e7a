//! `dirichlet`: FedEM's `split_dataset_by_labels`.

use super::catalogue::PartitionSettings;
use super::{dirichlet, multinomial};
use crate::settings::FieldError;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// FedEM's `split_dataset_by_labels`: labels are grouped into `groups` groups (default: each
/// label its own group); each group's rows go to clients in proportions drawn from Dir(α·1),
/// counts drawn from the multinomial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DirichletSpec {
    /// The number of clients.
    pub clients: usize,
    /// α of Dir(α·1): small values give each client few labels.
    pub alpha: f64,
    /// Labels grouped into this many groups, each dealt as one [default: each label its own group].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<usize>,
}

impl PartitionSettings for DirichletSpec {
    const EXAMPLE: &'static str = "{clients: 4, alpha: 0.5}";

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("clients", self.clients)?;
        FieldError::positive("alpha", self.alpha)?;
        if let Some(g) = self.groups {
            FieldError::at_least_one("groups", g)?;
        }
        Ok(())
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
        let groups = self.groups.unwrap_or(classes).min(classes);
        let mut order: Vec<usize> = (0..classes).collect();
        order.shuffle(rng);
        let mut group_of = vec![0; classes];
        for (g, chunk) in (0..groups)
            .map(|g| &order[g * classes / groups..(g + 1) * classes / groups])
            .enumerate()
        {
            chunk.iter().for_each(|&l| group_of[l] = g);
        }
        let mut members = vec![Vec::new(); groups];
        for r in 0..n {
            members[group_of[labels[r] as usize]].push(r);
        }
        let mut out = vec![Vec::new(); clients];
        for mut rows in members {
            rows.shuffle(rng);
            let weights = dirichlet(self.alpha, clients, rng);
            let counts = multinomial(rows.len(), &weights, rng);
            let mut at = 0;
            for (c, k) in counts.into_iter().enumerate() {
                out[c].extend_from_slice(&rows[at..at + k]);
                at += k;
            }
        }
        Ok(out)
    }
}
