//! Byzantine clients and robust aggregation: the `adversary:` section (which clients lie, and
//! how: the catalogue [`ATTACKS`]) and the `aggregation:` section (how the server combines the
//! updates it receives when some of them may be lies: the catalogue [`ROBUST_RULES`]).
//!
//! Everything here is arithmetic on the changes clients send: a change is a sent vector minus
//! the global vector it moved from (FedEM: one per component, each combined on its own). An
//! attack either rewrites a malicious client's own change before it leaves
//! ([`AttackSpec::own`]: sign flipping, Gaussian noise, scaling) or, for the attacks that know
//! the honest clients' updates of the round (ALIE, IPM), is crafted by the server from them
//! ([`AttackSpec::crafted`]), every malicious client of the round sending the same vector, as
//! the papers' colluding attackers do; label flipping and backdoors poison the malicious
//! clients' training data instead ([`AttackSpec::poison`]). A robust rule turns a round's
//! changes into the one change the global model makes, each client counting the same.
//!
//! This room draws only from the streams its callers pass (a backdoor's poisoned rows: the
//! `backdoor` stream of each malicious client in the run's seed tree) and never knows when a
//! round happens: the clients and the server apply it.

mod aggregation;
mod attack;

pub use aggregation::{
    BulyanSpec, CenteredClippingSpec, GeometricMedianSpec, KrumSpec, MedianSpec, NormBoundingSpec,
    RobustRuleRegistration, RobustRuleSettings, RobustRuleSpec, TrimmedMeanSpec, ROBUST_RULES,
};
pub use attack::{
    alie_z, inverse_normal_cdf, Adversaries, AdversarySpec, AlieSpec, AttackRegistration,
    AttackSettings, AttackSpec, Attacks, BackdoorSpec, GaussianSpec, IpmSpec, LabelFlipSpec,
    ScaledSpec, SignFlipSpec, ATTACKS,
};

/// The coordinate-wise mean of `set` (all of one length).
fn mean_of(set: &[&[f64]]) -> Vec<f64> {
    (0..set[0].len())
        .map(|j| set.iter().map(|v| v[j]).sum::<f64>() / set.len() as f64)
        .collect()
}
