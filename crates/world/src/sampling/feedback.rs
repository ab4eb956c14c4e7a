//! What clients report with their updates under a loss-guided strategy, and what the server
//! has heard so far ([`Feedback`]): the only thing power-of-choice and Oort read, never what a
//! client would report if asked now.

use crate::sim::SimDuration;
use std::collections::BTreeMap;

/// The per-row losses of the model a client started a job from, on its training rows (its
/// F_k(w) when it trained), summarised: what it reports with its update under a loss-guided
/// strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReportedLoss {
    pub rows: usize,
    /// Σ ℓ / n, in f64 in row order.
    pub mean: f64,
    /// Σ ℓ² / n.
    pub mean_square: f64,
}

impl ReportedLoss {
    pub fn of(losses: &[f32]) -> Self {
        let n = losses.len().max(1) as f64;
        ReportedLoss {
            rows: losses.len(),
            mean: losses.iter().map(|&l| l as f64).sum::<f64>() / n,
            mean_square: losses.iter().map(|&l| (l as f64).powi(2)).sum::<f64>() / n,
        }
    }

    /// Oort's statistical utility |B|·√(Σ ℓ² / |B|); 0 for a loss that is not finite (a
    /// diverged model tells nothing of what training on the client would be worth).
    pub fn utility(&self) -> f64 {
        let u = self.rows as f64 * self.mean_square.sqrt();
        if u.is_finite() {
            u
        } else {
            0.0
        }
    }
}

/// What the server last heard from a client: the loss its update reported, how long its job
/// took (sent to update received, on the server's clock) and the round it was sent for.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Heard {
    pub loss: ReportedLoss,
    pub duration: SimDuration,
    pub round: u32,
}

/// What the server has heard from each client so far, by client.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Feedback {
    heard: BTreeMap<u32, Heard>,
}

impl Feedback {
    /// Nothing heard yet.
    pub const EMPTY: Feedback = Feedback {
        heard: BTreeMap::new(),
    };

    pub fn hear(&mut self, client: u32, heard: Heard) {
        self.heard.insert(client, heard);
    }

    pub fn get(&self, client: u32) -> Option<&Heard> {
        self.heard.get(&client)
    }

    /// Oort's preferred round duration T: the `percentile` of the durations heard (`None`:
    /// at 100, or before any, no client is slower than preferred).
    pub(super) fn preferred_duration(&self, percentile: f64) -> Option<SimDuration> {
        if percentile >= 100.0 || self.heard.is_empty() {
            return None;
        }
        let mut durations: Vec<SimDuration> = self.heard.values().map(|h| h.duration).collect();
        durations.sort_unstable();
        let at = ((durations.len() as f64 * percentile / 100.0) as usize).min(durations.len() - 1);
        Some(durations[at])
    }
}
