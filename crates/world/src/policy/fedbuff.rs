//! `kind: fedbuff`: asynchronous buffered aggregation (FedBuff, Nguyen et al. 2022; the
//! server's behaviour: `actors::server::fedbuff`).

use super::PolicySettings;
use crate::settings::FieldError;
use serde::{Deserialize, Serialize};

/// FedBuff's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FedbuffSpec {
    /// Arrivals per aggregation.
    pub buffer_size: usize,
    /// Clients training at any time.
    pub concurrency: usize,
    /// Updates trained from a model more than this many aggregations old are dropped.
    #[serde(default = "default_async_staleness")]
    pub max_staleness: u32,
    /// An update counts (1 + staleness)^(−a); 0.5 is FedBuff's 1/√(1 + s).
    #[serde(default = "super::default_exponent")]
    pub staleness_exponent: f64,
    /// The server's step on the buffered average change.
    #[serde(default = "default_server_lr")]
    pub server_lr: f64,
}

fn default_async_staleness() -> u32 {
    10
}
fn default_server_lr() -> f64 {
    1.0
}

impl PolicySettings for FedbuffSpec {
    const EXAMPLE: &'static str = "{buffer_size: 5, concurrency: 10}";
    const ROUNDS_IN_STEP: bool = false;

    fn validate(&self) -> Result<(), FieldError> {
        FieldError::at_least_one("buffer_size", self.buffer_size)?;
        FieldError::at_least_one("concurrency", self.concurrency)?;
        FieldError::positive("server_lr", self.server_lr)?;
        FieldError::non_negative("staleness_exponent", self.staleness_exponent)
    }

    fn needs_stale_updates(&self) -> bool {
        true
    }
}
