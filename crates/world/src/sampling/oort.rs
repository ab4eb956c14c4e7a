//! `strategy: oort`: Oort (Lai et al. 2021): clients ranked by their last reported
//! statistical utility, a bonus for staleness and a penalty for being slower than the preferred
//! round duration, with a decaying share of the round kept for clients not heard from yet.

use super::weighted::by_weight;
use super::{Draw, Feedback, StrategySettings};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Oort's strategy settings: its own section beside `strategy` (`oort: {...}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OortSpec {
    /// Oort's settings (FedScale's defaults when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oort: Option<Oort>,
}

impl StrategySettings for OortSpec {
    const USES_FEEDBACK: bool = true;

    fn validate(&self) -> Result<(), FieldError> {
        match &self.oort {
            Some(oort) => oort.validate().map_err(|e| e.within("oort")),
            None => Ok(()),
        }
    }

    fn draw(&self, d: &Draw<'_>, rng: &mut ChaCha20Rng) -> Vec<u32> {
        let defaults;
        let settings = match &self.oort {
            Some(oort) => oort,
            None => {
                defaults = Oort::default();
                &defaults
            }
        };
        let candidates = d.candidates.to_vec();
        oort(
            settings,
            &candidates,
            d.count,
            d.weight,
            (d.feedback, d.round),
            rng,
        )
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
    pub(super) fn validate(&self) -> Result<(), FieldError> {
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

/// Oort's training selection (Lai et al. 2021, Algorithm 1, as FedScale implements it; see
/// [`Oort`] for the settings). Of the `count` clients:
/// - about (1 − ε)·`count` are exploited among the candidates heard from. Each scores its
///   utility (clipped at the `clip_quantile` of those heard, scaled to [0, 1]) plus
///   √(0.1·ln R / r), r the round it was last sent for and R this `round`, times
///   (T / its duration)^α if it was slower than the preferred duration T. They are drawn by
///   score among those within `cutoff` of the last score a plain ranking would take;
/// - the rest are explored: drawn by `weight` (n_t) among the `sample_window` times as many
///   largest candidates not heard from yet (FedScale ranks them by size too);
/// - where one group runs short, the other fills the round.
fn oort(
    settings: &Oort,
    candidates: &[u32],
    count: usize,
    weight: impl Fn(u32) -> f64,
    (feedback, round): (&Feedback, u32),
    rng: &mut ChaCha20Rng,
) -> Vec<u32> {
    let (heard, unheard): (Vec<u32>, Vec<u32>) =
        candidates.iter().partition(|&&c| feedback.get(c).is_some());
    let explore_share = (count as f64 * settings.exploration_at(round)).floor() as usize;
    let explore = unheard
        .len()
        .min(count - (count - explore_share).min(heard.len()));
    let exploit = (count - explore).min(heard.len());
    let mut chosen = exploit_scored(settings, &heard, exploit, (feedback, round), rng);
    // Exploration: the largest first, drawn by size within the window.
    let mut unheard = unheard;
    unheard.sort_by(|&a, &b| weight(b).total_cmp(&weight(a)).then(a.cmp(&b)));
    let window = ((settings.sample_window * explore as f64).ceil() as usize).min(unheard.len());
    chosen.extend(by_weight(&unheard[..window], weight, explore, rng));
    chosen
}

/// Oort's exploitation: `count` of the `heard` candidates, drawn by score (see [`oort`]).
fn exploit_scored(
    settings: &Oort,
    heard: &[u32],
    count: usize,
    (feedback, round): (&Feedback, u32),
    rng: &mut ChaCha20Rng,
) -> Vec<u32> {
    if count == 0 {
        return Vec::new();
    }
    let known = |c: u32| feedback.get(c).expect("a candidate heard from");
    let mut utilities: Vec<f64> = heard.iter().map(|&c| known(c).loss.utility()).collect();
    utilities.sort_by(f64::total_cmp);
    let last = utilities.len() - 1;
    let clip = utilities[((utilities.len() as f64 * settings.clip_quantile) as usize).min(last)];
    let low = utilities[0] * 0.999;
    let range = (utilities[last] - low).max(1e-4);
    let preferred = feedback.preferred_duration(settings.preferred_percentile);
    let score = |c: u32| {
        let h = known(c);
        let staleness = (0.1 * (round as f64).ln() / h.round.max(1) as f64).sqrt();
        let score = (h.loss.utility().min(clip) - low) / range + staleness;
        match preferred {
            Some(t) if h.duration > t => {
                score * (t.0 as f64 / h.duration.0 as f64).powf(settings.penalty)
            }
            _ => score,
        }
    };
    let mut scored: Vec<(u32, f64)> = heard.iter().map(|&c| (c, score(c))).collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let cut = scored[count - 1].1 * settings.cutoff;
    let admitted: Vec<u32> = scored
        .iter()
        .take_while(|(_, s)| *s >= cut)
        .map(|&(c, _)| c)
        .collect();
    let score_of: BTreeMap<u32, f64> = scored.into_iter().collect();
    by_weight(&admitted, |c| score_of[&c], count, rng)
}
