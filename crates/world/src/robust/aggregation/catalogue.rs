//! The robust rules an `aggregation:` section can name (`aggregation: {kind: ...}`), one entry
//! each in [`ROBUST_RULES`]. A rule is its file (its settings type, implementing
//! [`RobustRuleSettings`]) plus one entry here.

use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;

/// The catalogue: every robust rule a scenario can name, in the order the docs list them.
pub static ROBUST_RULES: &[Registration] = &[
    entry::<super::MedianSpec>(
        "median",
        "The coordinate-wise median (the mean of the two middle values for an even count).",
    ),
    entry::<super::TrimmedMeanSpec>(
        "trimmed_mean",
        "The coordinate-wise mean of what is left after the ⌊trim·n⌋ largest and smallest \
         values of each coordinate are dropped.",
    ),
    entry::<super::KrumSpec>(
        "krum",
        "Krum (Blanchard et al. 2017): the change whose n − f − 2 nearest others are closest \
         (sum of squared distances; ties: the lower client); with `multi` m > 1, the mean of \
         the m best (Multi-Krum). Needs n ≥ 2f + 3.",
    ),
    entry::<super::BulyanSpec>(
        "bulyan",
        "Bulyan (El Mhamdi et al. 2018): θ = n − 2f changes picked by Krum one at a time, then \
         per coordinate the mean of the β = θ − 2f values closest to their median. Needs \
         n ≥ 4f + 3.",
    ),
    entry::<super::GeometricMedianSpec>(
        "geometric_median",
        "The geometric median by the smoothed Weiszfeld iteration (RFA, Pillutla et al. \
         2022): from the mean, `iterations` reweighted means with weights \
         1/max(ν, ‖z − x_i‖).",
    ),
    entry::<super::CenteredClippingSpec>(
        "centered_clipping",
        "Centered clipping (Karimireddy et al. 2021): from v = the previous round's combined \
         change (0 in the first round), `iterations` steps v ← v + mean_i clip(x_i − v, τ), \
         clip scaling to L2 norm at most τ.",
    ),
    entry::<super::NormBoundingSpec>(
        "norm_bounding",
        "Norm bounding (Sun et al. 2019): each change scaled to L2 norm at most `bound`, then \
         the mean.",
    ),
];

/// A robust rule's settings, as its `aggregation:` section holds them (besides `kind`), and
/// how it combines a round's changes, each client counting the same.
pub trait RobustRuleSettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `kind`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Checks the settings; a path is below `aggregation`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// The fewest updates a round needs for this rule, and why; `None`: any number.
    fn least_updates(&self) -> Option<(usize, String)> {
        None
    }

    /// The change the global vector makes from the round's `changes` (at least
    /// [`RobustRuleSettings::least_updates`] of them, in client order, all of one length);
    /// `previous` is the change this rule made the last time (empty: none yet).
    fn combine(&self, changes: &[&[f64]], previous: &[f64]) -> Vec<f64>;
}

catalogue! {
    /// The catalogue of robust rules.
    pub struct RobustRules {
        tag: "kind",
        example: "{kind: trimmed_mean, trim: 0.1}",
        schema: "RobustRuleSpec",
        declared: (),
        items: ROBUST_RULES,
    }
    /// Settings of some registered rule, their type erased.
    erases RobustRuleSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn least_updates(&self) -> Option<(usize, String)>;
        fn combine(&self, changes: &[&[f64]], previous: &[f64]) -> Vec<f64>;
    }
    /// `aggregation:`: how the server combines a round's changes, each client counting the same
    /// (the default, without this section, is the algorithm's own weighted mean): the item of
    /// [`ROBUST_RULES`] the section names, with its settings.
    section RobustRuleSpec;
}

/// The entry of the rule whose settings are `S`.
const fn entry<S: RobustRuleSettings>(kind: &'static str, summary: &'static str) -> Registration {
    Registration::new::<S>(kind, summary, S::EXAMPLE, (), |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl RobustRuleSpec {
    /// Checks the settings; an error's path is below `aggregation`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// The fewest updates a round needs for this rule, and why (Krum: 2f + 3; Bulyan:
    /// 4f + 3; Multi-Krum also m).
    pub fn least_updates(&self) -> Option<(usize, String)> {
        self.erased().least_updates()
    }

    /// The change the global vector makes from the round's `changes` (one per client, in
    /// client order, all of one length); `previous` is the change this rule made the last time
    /// (centered clipping starts from it; empty: none yet). A round with fewer changes than the
    /// rule needs falls back to the coordinate-wise median.
    pub fn combine(&self, changes: &[&[f64]], previous: &[f64]) -> Vec<f64> {
        assert!(!changes.is_empty(), "a robust aggregation of no updates");
        if self
            .least_updates()
            .is_some_and(|(least, _)| changes.len() < least)
        {
            return RobustRuleSettings::combine(&super::MedianSpec {}, changes, previous);
        }
        self.erased().combine(changes, previous)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_robust_rule_round_trips() {
        crate::settings::catalogue::check_catalogue::<RobustRules>(|spec| {
            RobustRuleSpec(spec.clone())
                .validate()
                .map_err(|e| format!("{e:?}"))
        });
    }
}
