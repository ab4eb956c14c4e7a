//! `kind: synchronous`: rounds one after the other, with an optional deadline (the server's
//! behaviour: `actors::server::synchronous`).

use super::PolicySettings;
use crate::settings::FieldError;
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
    /// A trainer whose whole job would miss the deadline does only the minibatch steps that
    /// fit (FedProx's partial solutions): its compute ends by the deadline less the upload of
    /// the whole model. One that cannot fit a step runs its whole job and is a straggler,
    /// dropped. Needs `deadline_s`.
    PartialWork,
}

/// Synchronous rounds' settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SynchronousSpec {
    /// Seconds after the round's start when the server stops waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<f64>,
    /// What happens to updates that arrive after the deadline.
    #[serde(default)]
    pub late_updates: LateUpdates,
    /// With `late_updates: next_round`: older updates are dropped.
    #[serde(default = "default_late_staleness")]
    pub max_staleness: u32,
    /// A stale update counts (1 + staleness)^(−a).
    #[serde(default = "super::default_exponent")]
    pub staleness_exponent: f64,
}

fn default_late_staleness() -> u32 {
    1
}

impl Default for SynchronousSpec {
    fn default() -> Self {
        SynchronousSpec {
            deadline_s: None,
            late_updates: LateUpdates::Drop,
            max_staleness: default_late_staleness(),
            staleness_exponent: super::default_exponent(),
        }
    }
}

impl PolicySettings for SynchronousSpec {
    const ROUNDS_IN_STEP: bool = true;

    fn validate(&self) -> Result<(), FieldError> {
        if let Some(d) = self.deadline_s {
            FieldError::seconds("deadline_s", d)?;
        }
        if self.late_updates == LateUpdates::PartialWork && self.deadline_s.is_none() {
            return Err(FieldError::new(
                "late_updates".into(),
                "`partial_work` cuts jobs at the round's deadline: give `deadline_s`".into(),
            ));
        }
        FieldError::non_negative("staleness_exponent", self.staleness_exponent)
    }

    fn needs_stale_updates(&self) -> bool {
        self.late_updates == LateUpdates::NextRound
    }
}
