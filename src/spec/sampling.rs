//! `sampling:`: which clients a round selects, and how many.

use serde::{Deserialize, Serialize};

/// How many clients a round wants (K).
#[derive(Clone, Debug, PartialEq)]
pub enum SampleSize {
    /// `max(1, ⌊fraction · T⌋)` of the T training clients, with `fraction` in (0, 1].
    Fraction(f64),
    /// `count` clients, 1 ≤ `count` ≤ T (checked when the scenario is validated).
    Count(usize),
}

/// Which clients are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Uniformly, without replacement.
    #[default]
    Uniform,
    /// With probability proportional to the clients' training-set sizes n_t.
    Weighted,
}

/// A round's client selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    pub size: SampleSize,
    pub strategy: Strategy,
    /// Weighted draws with replacement (duplicates train once, so a round may have fewer
    /// than K distinct clients).
    pub replacement: bool,
    /// Draw only among clients online at selection time.
    pub available_only: bool,
    /// Over-selection o: select ⌈(1 + o)·K⌉ and aggregate the first K updates to arrive.
    pub over_selection: f64,
}

impl Sampling {
    /// Uniform selection of a fraction of the clients: the default.
    pub fn uniform(size: SampleSize) -> Sampling {
        Sampling {
            size,
            strategy: Strategy::Uniform,
            replacement: false,
            available_only: false,
            over_selection: 0.0,
        }
    }

    /// K, the clients a round wants out of `total` training clients.
    pub fn per_round(&self, total: usize) -> usize {
        match self.size {
            SampleSize::Fraction(f) => ((f * total as f64).floor() as usize).clamp(1, total),
            SampleSize::Count(k) => k.clamp(1, total),
        }
    }

    /// How many clients to select out of `total`: K, or ⌈(1 + o)·K⌉ with over-selection.
    pub fn to_select(&self, total: usize) -> usize {
        let k = self.per_round(total);
        ((k as f64 * (1.0 + self.over_selection)).ceil() as usize).clamp(k, total)
    }
}
