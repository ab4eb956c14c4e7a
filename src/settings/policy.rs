//! `policy:`: when the server aggregates and what it does with late updates.

use super::FieldError;
use serde::{Deserialize, Serialize};

/// What happens to an update that arrives after its round's deadline.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LateUpdates {
    /// Stragglers are dropped.
    #[default]
    Drop,
    /// Stragglers join the next aggregation, weighted by their staleness (rounds since the
    /// one they were trained for), up to `max_staleness`.
    NextRound,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PolicySpec {
    /// Rounds one after the other. A round ends when every selected client has reported
    /// (its update, or its dropout), when the first K updates are in (with
    /// `sampling.over_selection`), or at the deadline, whichever comes first.
    Synchronous {
        /// Seconds after the round's start when the server stops waiting.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline_s: Option<f64>,
        /// What happens to updates that arrive after the deadline.
        #[serde(default)]
        late_updates: LateUpdates,
        /// With `late_updates: next_round`: older updates are dropped.
        #[serde(default = "default_late_staleness")]
        max_staleness: u32,
        /// A stale update counts (1 + staleness)^(−a).
        #[serde(default = "default_exponent")]
        staleness_exponent: f64,
    },
    /// Asynchronous buffered aggregation (FedBuff, Nguyen et al. 2022): up to `concurrency`
    /// clients train at any time, each starting as soon as a slot is free and it is online;
    /// the server aggregates every `buffer_size` arrivals (one "round" per aggregation).
    Fedbuff {
        /// Arrivals per aggregation.
        buffer_size: usize,
        /// Clients training at any time.
        concurrency: usize,
        /// Updates trained from a model more than this many aggregations old are dropped.
        #[serde(default = "default_async_staleness")]
        max_staleness: u32,
        /// An update counts (1 + staleness)^(−a); 0.5 is FedBuff's 1/√(1 + s).
        #[serde(default = "default_exponent")]
        staleness_exponent: f64,
        /// The server's step on the buffered average change.
        #[serde(default = "default_server_lr")]
        server_lr: f64,
    },
}

fn default_late_staleness() -> u32 {
    1
}
fn default_async_staleness() -> u32 {
    10
}
fn default_exponent() -> f64 {
    0.5
}
fn default_server_lr() -> f64 {
    1.0
}

impl Default for PolicySpec {
    fn default() -> Self {
        PolicySpec::Synchronous {
            deadline_s: None,
            late_updates: LateUpdates::Drop,
            max_staleness: default_late_staleness(),
            staleness_exponent: default_exponent(),
        }
    }
}

impl PolicySpec {
    /// Whether the policy hands the algorithm stale updates.
    pub fn needs_stale_updates(&self) -> bool {
        match self {
            PolicySpec::Synchronous { late_updates, .. } => *late_updates == LateUpdates::NextRound,
            PolicySpec::Fedbuff { .. } => true,
        }
    }

    /// Checks the settings; an error's path is below `policy`.
    pub fn validate(&self) -> Result<(), FieldError> {
        match self {
            PolicySpec::Synchronous {
                deadline_s,
                staleness_exponent,
                ..
            } => {
                if let Some(d) = deadline_s {
                    FieldError::seconds("deadline_s", *d)?;
                }
                FieldError::non_negative("staleness_exponent", *staleness_exponent)
            }
            PolicySpec::Fedbuff {
                buffer_size,
                concurrency,
                staleness_exponent,
                server_lr,
                ..
            } => {
                FieldError::at_least_one("buffer_size", *buffer_size)?;
                FieldError::at_least_one("concurrency", *concurrency)?;
                FieldError::positive("server_lr", *server_lr)?;
                FieldError::non_negative("staleness_exponent", *staleness_exponent)
            }
        }
    }
}
