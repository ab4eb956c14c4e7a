//! The mixing rules a `topology.mixing` section can name (`mixing: {rule: ...}`), one entry
//! each in [`MIXING_RULES`]. A rule is its file (its settings type, implementing
//! [`MixingRuleSettings`]) plus one entry here.

use super::Weights;
use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;
use crate::topology::Graph;

/// The catalogue: every mixing rule a scenario can name, in the order the docs list them.
pub static MIXING_RULES: &[Registration] = &[
    entry::<super::MetropolisHastingsSpec>(
        "metropolis_hastings",
        "W_ij = 1 / (1 + max(d_i, d_j)) on each link; the rest on the diagonal. Symmetric.",
    ),
    entry::<super::MaxDegreeSpec>(
        "max_degree",
        "W_ij = 1 / (1 + d_max) on each link; the rest on the diagonal. Symmetric.",
    ),
    entry::<super::UniformNeighbourSpec>(
        "uniform_neighbour",
        "W_ij = 1 / (1 + d_i) for each neighbour and for i itself. Rows sum to 1; symmetric \
         only on regular graphs (on a complete graph: the uniform 1/n).",
    ),
    entry::<super::FmmcSpec>(
        "fmmc",
        "Fastest Mixing Markov Chain (Boyd, Diaconis, Xiao 2004): the symmetric, doubly \
         stochastic W on the graph (self weights allowed) with the smallest second-largest \
         |eigenvalue|, by the projected subgradient method of their §5 started from \
         Metropolis–Hastings weights; the best iterate is kept, so it never mixes slower than \
         Metropolis–Hastings.",
    ),
];

/// A mixing rule's settings, as its section holds them (besides `rule`), and the weights it
/// gives on a graph. [`super::Mixing::build`] checks them.
pub trait MixingRuleSettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `rule`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Whether the rule promises a symmetric (doubly stochastic) matrix on any graph.
    const SYMMETRIC: bool = true;

    /// Whether every link carries a positive weight (FMMC may set some to zero).
    const FULL_SUPPORT: bool = true;

    /// Checks the settings; a path is below `topology.mixing`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// The weights on `graph`, whose links are `edges` (`graph.edges()`).
    fn weights(&self, graph: &Graph, edges: &[(u32, u32)]) -> Weights;
}

catalogue! {
    /// The catalogue of mixing rules.
    pub struct MixingRules {
        tag: "rule",
        example: "{rule: metropolis_hastings}",
        schema: "MixingRuleSpec",
        declared: Declared,
        items: MIXING_RULES,
    }
    /// Settings of some registered rule, their type erased.
    erases MixingRuleSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn weights(&self, graph: &Graph, edges: &[(u32, u32)]) -> Weights;
    }
    /// How a round's mixing weights are set: the item of [`MIXING_RULES`] the `topology.mixing`
    /// section names, with its settings.
    section MixingRuleSpec;
}

/// What the catalogue declares of a mixing rule.
pub struct Declared {
    /// [`MixingRuleSettings::SYMMETRIC`].
    pub symmetric: bool,
    /// [`MixingRuleSettings::FULL_SUPPORT`].
    pub full_support: bool,
}

/// The entry of the rule whose settings are `S`.
const fn entry<S: MixingRuleSettings>(rule: &'static str, summary: &'static str) -> Registration {
    let declared = Declared {
        symmetric: S::SYMMETRIC,
        full_support: S::FULL_SUPPORT,
    };
    Registration::new::<S>(rule, summary, S::EXAMPLE, declared, |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl MixingRuleSpec {
    /// Checks the settings; an error's path is below `topology.mixing`.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// Whether the rule promises a symmetric (doubly stochastic) matrix on any graph.
    pub fn is_symmetric(&self) -> bool {
        self.declared().symmetric
    }

    /// Whether every link carries a positive weight.
    pub fn has_full_support(&self) -> bool {
        self.declared().full_support
    }

    /// The weights on `graph`, whose links are `edges`.
    pub fn weights(&self, graph: &Graph, edges: &[(u32, u32)]) -> Weights {
        self.erased().weights(graph, edges)
    }
}

impl Default for MixingRuleSpec {
    /// Metropolis–Hastings weights.
    fn default() -> Self {
        MixingRuleSpec::of(super::MetropolisHastingsSpec {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mixing_rule_round_trips() {
        crate::settings::catalogue::check_catalogue::<MixingRules>(|spec| {
            MixingRuleSpec(spec.clone())
                .validate()
                .map_err(|e| format!("{e:?}"))
        });
    }
}
