//! `natural`: the data's own clients (FEMNIST's writers).

use super::catalogue::PartitionSettings;
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// The data's own clients (FEMNIST's writers): `fraction` of them, drawn. Only a data set that
/// has clients of its own takes it; it deals no pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NaturalSpec {
    /// The fraction of the data's own clients kept, drawn from the data seed.
    #[serde(default = "one")]
    pub fraction: f64,
}

fn one() -> f64 {
    1.0
}

impl PartitionSettings for NaturalSpec {
    fn validate(&self) -> Result<(), FieldError> {
        let fraction = self.fraction;
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(FieldError::new(
                "fraction".into(),
                format!("must be in (0, 1], got {fraction}"),
            ));
        }
        Ok(())
    }

    fn keeps_own_clients(&self) -> Option<f64> {
        Some(self.fraction)
    }

    fn assign(
        &self,
        _labels: &[i64],
        _classes: usize,
        _rng: &mut ChaCha20Rng,
    ) -> Result<Vec<Vec<usize>>, String> {
        Err(
            "`natural` keeps the data's own clients; this data set has none \
             (use iid, dirichlet, shards, pfedme or pachinko)"
                .into(),
        )
    }
}
