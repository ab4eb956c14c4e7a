//! `sampling:`: which clients a round selects, and how many: the section as written
//! ([`RawSampling`]) and the selection it resolves to ([`Sampling`]).

use super::FieldError;
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
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Uniformly, without replacement.
    #[default]
    Uniform,
    /// With probability proportional to the clients' training-set sizes n_t.
    Weighted,
    /// Poisson participation: each idle client joins a round independently with probability
    /// q = `fraction`, so a round has q·T clients on average and may have none.
    Poisson,
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

    /// Under Poisson participation, each client's chance of joining a round: `fraction`.
    pub fn poisson_rate(&self) -> Option<f64> {
        match (self.strategy, &self.size) {
            (Strategy::Poisson, SampleSize::Fraction(q)) => Some(*q),
            _ => None,
        }
    }

    /// How many clients to select out of `total`: K, or ⌈(1 + o)·K⌉ with over-selection.
    pub fn to_select(&self, total: usize) -> usize {
        let k = self.per_round(total);
        ((k as f64 * (1.0 + self.over_selection)).ceil() as usize).clamp(k, total)
    }
}

/// Clients per round: a fraction of the training clients or a count (K), and how they are
/// drawn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSampling {
    /// The fraction of the training clients a round selects, in (0, 1] (give this or
    /// `count`; all clients when neither is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// The number of clients a round selects, K (give this or `fraction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// `uniform` (K without replacement), `weighted` (by training-set size n_t), or
    /// `poisson` (each client independently with probability `fraction`).
    #[serde(default)]
    pub strategy: Strategy,
    /// Weighted draws with replacement (duplicates train once).
    #[serde(default)]
    pub replacement: bool,
    /// Draw only among clients online at selection time.
    #[serde(default)]
    pub available_only: bool,
    /// Select ⌈(1 + o)·K⌉ clients and aggregate the first K updates to arrive.
    #[serde(default)]
    pub over_selection: f64,
}

impl RawSampling {
    /// The selection these settings ask for; an error's path is below `sampling`.
    pub fn resolve(&self) -> Result<Sampling, FieldError> {
        let s = self;
        let bad = |path: &str, message: String| Err(FieldError::new(path.to_string(), message));
        let size = match (s.fraction, s.count) {
            (Some(_), Some(_)) => {
                return bad(
                    "fraction",
                    "give either `fraction` or `count`, not both".into(),
                )
            }
            (Some(f), None) if !(f > 0.0 && f <= 1.0) => {
                return bad("fraction", format!("must be in (0, 1], got {f}"))
            }
            (Some(f), None) => SampleSize::Fraction(f),
            (None, Some(0)) => return bad("count", "must be at least 1".into()),
            (None, Some(k)) => SampleSize::Count(k),
            (None, None) => SampleSize::Fraction(1.0),
        };
        if s.replacement && s.strategy != Strategy::Weighted {
            return bad("replacement", "applies to `strategy: weighted` only".into());
        }
        if s.strategy == Strategy::Poisson {
            if s.count.is_some() {
                return bad(
                    "count",
                    "`strategy: poisson` takes `fraction` (each client's chance of joining a \
                     round), not a count"
                        .into(),
                );
            }
            if s.over_selection > 0.0 {
                return bad(
                    "over_selection",
                    "`strategy: poisson` has no round size K to over-select; use 0".into(),
                );
            }
        }
        if !(s.over_selection >= 0.0 && s.over_selection.is_finite()) {
            return bad(
                "over_selection",
                format!("must be a non-negative number, got {}", s.over_selection),
            );
        }
        Ok(Sampling {
            size,
            strategy: s.strategy,
            replacement: s.replacement,
            available_only: s.available_only,
            over_selection: s.over_selection,
        })
    }
}
