//! The attacks an `adversary:` section can name (`attack: {kind: ...}`), one entry each in
//! [`ATTACKS`]. An attack is its file (its settings type, implementing [`AttackSettings`])
//! plus one entry here.

use crate::data::FederatedData;
use crate::settings::catalogue::{catalogue, read_settings, ItemSettings};
use crate::settings::FieldError;
use rand_chacha::ChaCha20Rng;

/// The catalogue: every attack a scenario can name, in the order the docs list them.
pub static ATTACKS: &[Registration] = &[
    entry::<super::SignFlipSpec>("sign_flip", "Sign flipping: −scale·Δ."),
    entry::<super::GaussianSpec>(
        "gaussian",
        "Gaussian updates: a change of independent N(0, std²) values, from the client's \
         `attack` stream of the job.",
    ),
    entry::<super::ScaledSpec>(
        "scaled",
        "Scaled update (model replacement's boosting, Bagdasaryan et al. 2020): factor·Δ.",
    ),
    entry::<super::AlieSpec>(
        "alie",
        "A little is enough (Baruch et al. 2019): the gradient μ − z·σ, μ and σ the \
         coordinate-wise mean and standard deviation of the round's honest gradients. A change \
         is a step against the gradient, so the change sent is μ + z·σ of the honest changes. \
         Without `z`, Baruch et al.'s z = Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − f, for the round's n \
         updates of which f malicious.",
    ),
    entry::<super::IpmSpec>(
        "ipm",
        "Inner product manipulation (Xie et al. 2020): −ε·μ, μ the mean of the round's honest \
         changes.",
    ),
    entry::<super::LabelFlipSpec>(
        "label_flip",
        "Label flipping: each malicious client trains honestly on its training rows with every \
         label y replaced by C − 1 − y (C classes); its validation and test rows keep theirs. \
         Data held in memory only.",
    ),
    entry::<super::BackdoorSpec>(
        "backdoor",
        "A backdoor (Bagdasaryan et al. 2020; Sun et al. 2019): each malicious client stamps a \
         `trigger`×`trigger` square of `value` in the bottom-right corner of every channel of a \
         `poison` share of its training images (drawn from its `backdoor` stream), labels them \
         `target`, trains honestly on the rest, and sends `boost`·Δ (model replacement's \
         boosting; 1: none). Every client's test images of other labels, stamped, measure the \
         attack's success (`split: backdoor` in `metrics.parquet`, `backdoor_success` in \
         `summary.csv`). Image data held in memory only.",
    ),
];

/// An attack's settings, as its `attack:` section holds them (besides `kind`), and what a
/// malicious client sends instead of its honest change Δ (what it would have sent minus the
/// global model). An attack does one or more of three things: it rewrites each malicious
/// client's own change ([`AttackSettings::own`]), it is crafted by the server from the
/// round's honest changes ([`AttackSettings::CRAFTED`]), or it poisons the malicious clients'
/// training data ([`AttackSettings::POISONS_DATA`]).
pub trait AttackSettings: ItemSettings {
    /// The smallest valid settings (YAML flow mapping, without `kind`), for tests and docs.
    const EXAMPLE: &'static str = "{}";

    /// Whether the server crafts it from the round's honest changes
    /// ([`AttackSettings::crafted`]), which the attackers are assumed to see.
    const CRAFTED: bool = false;

    /// Whether it poisons the malicious clients' training data ([`AttackSettings::poison`]).
    const POISONS_DATA: bool = false;

    /// Checks the settings; a path is below `adversary.attack`.
    fn validate(&self) -> Result<(), FieldError> {
        Ok(())
    }

    /// Whether each malicious client rewrites its own change ([`AttackSettings::own`]).
    fn is_own(&self) -> bool {
        false
    }

    /// A malicious client's own rewrite of its change `delta` (one sent vector), drawing from
    /// `rng` (its `attack` stream of the job) where the attack is random.
    fn own(&self, _delta: &mut [f64], _rng: &mut ChaCha20Rng) {}

    /// Crafted attacks: the change every malicious client sends for one vector, from the
    /// `honest` changes of the round (at least one, all of one length), with `n` updates in
    /// the round of which `malicious` are malicious.
    fn crafted(&self, _honest: &[&[f64]], _n: usize, _malicious: usize) -> Vec<f64> {
        unreachable!("only crafted attacks are asked to craft")
    }

    /// Data-poisoning attacks: poisons `data` (held in memory) for the `malicious` clients
    /// (sorted), drawing from the run's seed tree of `seed`. An error says why this data set
    /// cannot be poisoned so (refused at `adversary.attack`).
    fn poison(
        &self,
        _data: &mut FederatedData,
        _malicious: &[u32],
        _seed: u64,
    ) -> Result<(), String> {
        Ok(())
    }
}

catalogue! {
    /// The catalogue of attacks.
    pub struct Attacks {
        tag: "kind",
        example: "{kind: sign_flip, scale: 1.0}",
        schema: "AttackSpec",
        declared: Declared,
        items: ATTACKS,
    }
    /// Settings of some registered attack, their type erased.
    erases AttackSettings {
        fn validate(&self) -> Result<(), FieldError>;
        fn is_own(&self) -> bool;
        fn own(&self, delta: &mut [f64], rng: &mut ChaCha20Rng);
        fn crafted(&self, honest: &[&[f64]], n: usize, malicious: usize) -> Vec<f64>;
        fn poison(&self, data: &mut FederatedData, malicious: &[u32], seed: u64) -> Result<(), String>;
    }
    /// What each malicious client sends instead of its honest update: the item of [`ATTACKS`]
    /// the `adversary.attack` section names, with its settings.
    section AttackSpec;
}

/// What the catalogue declares of an attack.
pub struct Declared {
    /// The server crafts it ([`AttackSettings::CRAFTED`]).
    pub crafted: bool,
    /// It poisons training data ([`AttackSettings::POISONS_DATA`]).
    pub poisons_data: bool,
}

/// The entry of the attack whose settings are `S`.
const fn entry<S: AttackSettings>(kind: &'static str, summary: &'static str) -> Registration {
    let declared = Declared {
        crafted: S::CRAFTED,
        poisons_data: S::POISONS_DATA,
    };
    Registration::new::<S>(kind, summary, S::EXAMPLE, declared, |fields| {
        Ok(Box::new(read_settings::<S>(fields)?))
    })
}

impl AttackSpec {
    /// Checks the settings; an error's path is below the attack's section.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.erased().validate()
    }

    /// Whether the server crafts it from the round's honest updates (ALIE, IPM) rather than
    /// each malicious client from its own.
    pub fn is_crafted(&self) -> bool {
        self.declared().crafted
    }

    /// Whether each malicious client rewrites its own change ([`AttackSpec::own`]).
    pub fn is_own(&self) -> bool {
        self.erased().is_own()
    }

    /// Whether it poisons the malicious clients' training data (label flipping, backdoor).
    pub fn poisons_data(&self) -> bool {
        self.declared().poisons_data
    }

    /// A malicious client's own attack on its change `delta` (one sent vector), drawing from
    /// `rng` (Gaussian); crafted attacks leave it to the server.
    pub fn own(&self, delta: &mut [f64], rng: &mut ChaCha20Rng) {
        self.erased().own(delta, rng)
    }

    /// The change every malicious client sends for one vector, crafted from the `honest`
    /// changes of the round (at least one), with `n` updates in the round of which
    /// `malicious` are malicious. Only for a crafted attack ([`AttackSpec::is_crafted`]).
    pub fn crafted(&self, honest: &[&[f64]], n: usize, malicious: usize) -> Vec<f64> {
        self.erased().crafted(honest, n, malicious)
    }

    /// Poisons `data` for the `malicious` clients where the attack poisons data; an error says
    /// why it cannot.
    pub fn poison(
        &self,
        data: &mut FederatedData,
        malicious: &[u32],
        seed: u64,
    ) -> Result<(), String> {
        self.erased().poison(data, malicious, seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attack_round_trips() {
        crate::settings::catalogue::check_catalogue::<Attacks>(|spec| {
            AttackSpec(spec.clone())
                .validate()
                .map_err(|e| format!("{e:?}"))
        });
    }
}
