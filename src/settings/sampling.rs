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
    /// Power-of-choice (Cho et al. 2022, its rpow-d form): `candidates` clients drawn by n_t,
    /// of which the K with the highest loss last reported are selected (clients not heard
    /// from yet first).
    PowerOfChoice,
    /// Oort (Lai et al. 2021): clients ranked by their last reported statistical utility, a
    /// bonus for staleness and a penalty for being slower than the preferred round duration,
    /// with a decaying share of the round kept for clients not heard from yet (`oort:`).
    Oort,
}

impl Strategy {
    /// Whether the draw reads what clients reported with their updates (their losses and
    /// durations), so that clients measure their loss when they train.
    pub fn uses_feedback(self) -> bool {
        matches!(self, Strategy::PowerOfChoice | Strategy::Oort)
    }
}

/// Oort's settings (`sampling.oort`), named and defaulted as in FedScale's implementation
/// (`thirdparty/oort/oort.py`) except `cutoff`, which takes the paper's c = 0.95.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Oort {
    /// ε: the share of a round first kept for clients not heard from yet, in [0, 1].
    pub exploration: f64,
    /// ε is multiplied by this at every round, in (0, 1].
    pub exploration_decay: f64,
    /// ε never falls below this, in [0, 1].
    pub exploration_min: f64,
    /// The preferred round duration T is this percentile of the durations reported so far,
    /// in (0, 100] (100: no preferred duration, so no client is penalised).
    pub preferred_percentile: f64,
    /// α: a client slower than T has its score scaled by (T / its duration)^α, α ≥ 0.
    pub penalty: f64,
    /// Utilities are clipped at this quantile of those reported, in (0, 1].
    pub clip_quantile: f64,
    /// c: the clients exploited are drawn, by score, among those within c of the score of
    /// the last one a plain ranking would take, in (0, 1].
    pub cutoff: f64,
    /// Clients explored are drawn, by training-set size, among the `sample_window` times as
    /// many largest ones not heard from yet, at least 1.
    pub sample_window: f64,
}

impl Default for Oort {
    fn default() -> Self {
        Oort {
            exploration: 0.9,
            exploration_decay: 0.98,
            exploration_min: 0.3,
            preferred_percentile: 30.0,
            penalty: 2.0,
            clip_quantile: 0.9,
            cutoff: 0.95,
            sample_window: 5.0,
        }
    }
}

impl Oort {
    /// Checks the ranges; an error's path is below `oort`.
    fn validate(&self) -> Result<(), FieldError> {
        let unit = |v: f64| (0.0..=1.0).contains(&v);
        let positive_unit = |v: f64| v > 0.0 && v <= 1.0;
        let at_least = |v: f64, least: f64| v >= least && v.is_finite();
        let checks = [
            (
                "exploration",
                self.exploration,
                unit(self.exploration),
                "in [0, 1]",
            ),
            (
                "exploration_decay",
                self.exploration_decay,
                positive_unit(self.exploration_decay),
                "in (0, 1]",
            ),
            (
                "exploration_min",
                self.exploration_min,
                unit(self.exploration_min),
                "in [0, 1]",
            ),
            (
                "preferred_percentile",
                self.preferred_percentile,
                self.preferred_percentile > 0.0 && self.preferred_percentile <= 100.0,
                "in (0, 100]",
            ),
            (
                "penalty",
                self.penalty,
                at_least(self.penalty, 0.0),
                "a finite number ≥ 0",
            ),
            (
                "clip_quantile",
                self.clip_quantile,
                positive_unit(self.clip_quantile),
                "in (0, 1]",
            ),
            (
                "cutoff",
                self.cutoff,
                positive_unit(self.cutoff),
                "in (0, 1]",
            ),
            (
                "sample_window",
                self.sample_window,
                at_least(self.sample_window, 1.0),
                "a finite number ≥ 1",
            ),
        ];
        match checks.into_iter().find(|c| !c.2) {
            Some((name, value, _, allowed)) => Err(FieldError::new(
                name.into(),
                format!("must be {allowed}, got {value}"),
            )),
            None => Ok(()),
        }
    }

    /// ε in round `round` (from 1): ε₀·decay^round, never below the minimum.
    pub fn exploration_at(&self, round: u32) -> f64 {
        (self.exploration * self.exploration_decay.powi(round as i32)).max(self.exploration_min)
    }
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
    /// Power-of-choice's candidates d (`None`: 2·K).
    pub candidates: Option<usize>,
    /// Oort's settings (read under `strategy: oort` only).
    pub oort: Oort,
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
            candidates: None,
            oort: Oort::default(),
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

    /// Power-of-choice's d when a round selects `count` of `total` candidates: `candidates`
    /// or 2·`count`, at least `count` and at most `total`.
    pub fn candidates_for(&self, count: usize, total: usize) -> usize {
        self.candidates.unwrap_or(2 * count).max(count).min(total)
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
    /// `uniform` (K without replacement), `weighted` (by training-set size n_t), `poisson`
    /// (each client independently with probability `fraction`), `power_of_choice` (the K of
    /// `candidates` drawn by n_t with the highest loss last reported) or `oort` (by reported
    /// utility and speed, exploring clients not heard from yet).
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
    /// `strategy: power_of_choice`: how many clients d are drawn (by n_t) to choose the K
    /// from, at least K (2·K when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates: Option<usize>,
    /// `strategy: oort`: Oort's settings (FedScale's defaults when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oort: Option<Oort>,
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
        if s.candidates.is_some() && s.strategy != Strategy::PowerOfChoice {
            return bad(
                "candidates",
                "applies to `strategy: power_of_choice` only".into(),
            );
        }
        if let Some(candidates) = s.candidates {
            FieldError::at_least_one("candidates", candidates)?;
        }
        if s.oort.is_some() && s.strategy != Strategy::Oort {
            return bad("oort", "applies to `strategy: oort` only".into());
        }
        if let Some(oort) = &s.oort {
            oort.validate().map_err(|e| e.within("oort"))?;
        }
        FieldError::non_negative("over_selection", s.over_selection)?;
        Ok(Sampling {
            size,
            strategy: s.strategy,
            replacement: s.replacement,
            available_only: s.available_only,
            over_selection: s.over_selection,
            candidates: s.candidates,
            oort: s.oort.clone().unwrap_or_default(),
        })
    }
}
