//! Client-level differential privacy (`privacy:` as written, [`PrivacySpec`], and as a run
//! applies it, [`ClientLevelPrivacy`]): what one client sends is private, whatever its data.
//! (`privacy: {mechanism: dp_sgd}` is read here too but is sample-level: see
//! [`super::sample_level`].)
//!
//! Each client's change from the global model it started from is scaled down to L2 norm at
//! most C (every vector it sends, as one), and every client weighs the same in the
//! aggregation. Then Gaussian noise, in one of two places:
//! - **central** (a trusted server, DP-FedAvg, McMahan et al. 2018): the server adds noise of
//!   standard deviation σ·S to the sum of the changes (on the new model: divided as the
//!   aggregation divides the sum), S the sum's sensitivity. fedsim simulates a fixed number K
//!   of the N participants each round, drawn uniformly without replacement, so two
//!   neighbouring federations differ in one client's data (replace-one, N public) and S = 2C;
//!   the accountant is that of sampling without replacement (Wang et al. 2019) at q = K/N (with
//!   every client in every round, the plain Gaussian mechanism). Clients dropped after
//!   selection (deadlines, dropouts, over-selection) only remove terms from the sum: that
//!   cannot raise its sensitivity, and who drops depends on the system model, never the data.
//! - **local** (no trusted party): each client adds noise of standard deviation σ·2C to its own
//!   clipped change before sending it. Every message is then a Gaussian mechanism on its
//!   client's data; the server sees who sent what, so there is no amplification by sampling,
//!   and a client's ε composes over the updates it sent. The ε reported is that of the client
//!   who has sent the most.
//!
//!
//! - **distributed** (`mechanism: distributed`, with `secure_aggregation:`): each client adds
//!   a share of the central noise to its clipped change, N(0, σ²S²/m), m the clients whose
//!   shares are to make up σ·S (`share_survivors` × the K clients drawn a round; K of N only,
//!   see [`DISTRIBUTED_SAMPLING`]); secure aggregation shows the server only the sum, which carries
//!   the n shares of the clients that reached it: noise of σ·S·√(n/m). Each release is
//!   accounted with the noise it really carried, σ·√(n/m) ([`ShareAccountant`]), so clients that
//!   drop between the draw and the unmasking spend privacy, as in a deployment.
//!
//! **Adaptive clipping** (central only; Andrew et al. 2021): the bound C follows a quantile γ
//! of the clients' update norms. Each client also reports whether its update was within the
//! round's bound; the server counts them, noises the count with N(0, σ_b²) and moves the
//! bound geometrically, C ← C·exp(−η·(b̃ − γ)), b̃ the noised fraction within it. The count is
//! a second Gaussian query (replace-one sensitivity 1) released with the sum, so the pair is
//! one Gaussian mechanism of multiplier σ when the updates' noise uses
//! σ_Δ = (σ⁻² − σ_b⁻²)^(−1/2): the accountant's ε is that of σ, as with a fixed bound.
//!
//! **DP-FTRL** (`mechanism: dp_ftrl`): the server's noise is that of tree aggregation over the
//! releases ([`super::tree`]) rather than fresh each round, with σ·S per tree node; the ε
//! reported is the largest over clients of the exact Gaussian ε of the nodes they took part in.
//!
//! This room does the arithmetic only (clip, noise, the bound's step, ε); the actors decide
//! when. Noise is drawn from the stream the caller passes, one standard normal per coordinate
//! in order.

use super::accounting::CalibrationError;
use super::accounting::{calibrate, RdpAccountant, SubsampledGaussian, Subsampling};
use super::pld::{PldAccountant, MOST_GRID_POINTS};
use crate::settings::FieldError;
use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

/// Where the noise of client-level privacy is added.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// The server noises the sum of the clients' clipped updates (a trusted server: DP-FedAvg).
    #[default]
    Central,
    /// Each client noises its own clipped update before sending it (no trusted server).
    Local,
    /// The server releases noised prefix sums of the clipped updates by tree aggregation
    /// (DP-FTRL, Kairouz et al. 2021; see [`super::tree`]): no amplification by sampling is
    /// assumed, and each client's ε follows the releases it took part in.
    DpFtrl,
    /// Sample-level: DP-SGD inside each client's local training, every record's gradient
    /// clipped and every step noised (see [`super::sample_level`]); updates are sent and
    /// aggregated as without privacy.
    DpSgd,
    /// Distributed DP under `secure_aggregation:`: each client adds its share of the central
    /// noise to its clipped update, and the server sees only the sum of what reached it.
    Distributed,
}

/// Which accountant turns the noise into ε (`privacy.accountant`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Accountant {
    /// Rényi DP (Mironov et al. 2019; Wang et al. 2019 for K of N): every sampling fedsim
    /// simulates.
    #[default]
    Rdp,
    /// The privacy loss distribution (as `dp-accounting`'s `PLDAccountant`): tighter, for
    /// Poisson participation or every client every round (and the local mechanism).
    Pld,
}

impl Accountant {
    fn is_rdp(&self) -> bool {
        *self == Accountant::Rdp
    }
}

/// Why `accountant: pld` is refused for clients drawn without replacement.
pub const PLD_SAMPLING: &str = "`pld` accounts Poisson participation (`sampling: {strategy: \
     poisson}`), every client every round, or `mechanism: local`; clients drawn without \
     replacement are accounted by `rdp`";

/// Why `mechanism: distributed` is refused under Poisson participation.
pub const DISTRIBUTED_SAMPLING: &str = "`distributed` needs a fixed number of clients a round \
     (`sampling.strategy: uniform`): secure aggregation shows the server how many clients' \
     shares reached the sum, and under Poisson participation that count tells one client more \
     or less apart";

/// Where a client-level run adds its noise (`privacy.mechanism` other than `dp_sgd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoiseAt {
    /// The server, on the sum of the clipped updates.
    Server,
    /// Each client, on its own clipped update.
    Client,
    /// Each client a share of the server's noise, on its own clipped update, summed under
    /// secure aggregation.
    Shares,
}

/// Client-level differential privacy (`privacy:`): each client's update clipped, Gaussian
/// noise added to the server's sum (or to each update), and the ε spent reported after every
/// round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrivacySpec {
    /// `central`: the server noises the sum of the clipped updates (DP-FedAvg); `local`: each
    /// client noises its own before sending it; `dp_ftrl`: the server releases noised prefix
    /// sums by tree aggregation (DP-FTRL), with no amplification by sampling assumed; `dp_sgd`:
    /// each client trains with DP-SGD (each record's gradient clipped, each step noised), a
    /// guarantee for every record; `distributed` (with `secure_aggregation:`): each client
    /// adds a share of the central noise, and the server sees only their sum.
    #[serde(default)]
    pub mechanism: Mechanism,
    /// C: each client's update (its change from the global model it started from, every
    /// vector it sends taken as one) is scaled down to at most this L2 norm; under `dp_sgd`,
    /// each record's gradient (all parameters taken as one).
    pub clip: f64,
    /// σ: Gaussian noise of standard deviation σ·2C (2C: how far one client's clipped update
    /// can move when its data are replaced) is added to the sum of the clipped updates
    /// (`central`) or to each of them (`local`); under `dp_sgd`, σ·C to each step's sum of
    /// clipped gradients. 0 adds none (ε is then infinite). Give this or `target_epsilon`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_multiplier: Option<f64>,
    /// The ε the whole run may spend: the smallest σ that spends at most this (to within 1 %)
    /// is solved for before the run and reported (under `dp_ftrl` and `dp_sgd`, for a client
    /// in every round; under `distributed`, with `share_survivors` of the drawn clients' shares in every
    /// sum). Give this or `noise_multiplier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_epsilon: Option<f64>,
    /// δ of the (ε, δ) guarantee, in (0, 1); below 1/N for N clients is the usual choice.
    #[serde(default = "default_delta")]
    pub delta: f64,
    /// Adaptive clipping (central only): `clip` is then the first round's bound, and the
    /// bound follows a quantile of the clients' update norms, estimated privately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveClipSpec>,
    /// How ε is counted: `rdp` (Rényi DP, every sampling) or `pld` (the privacy loss
    /// distribution, tighter; for `sampling: {poisson}`, every client every round, or
    /// `mechanism: local`). `target_epsilon` is solved with the same accountant.
    #[serde(default, skip_serializing_if = "Accountant::is_rdp")]
    pub accountant: Accountant,
    /// `distributed` only: the fraction of a round's drawn clients whose noise shares are to make up σ·S, in (0, 1]; each share is sized
    /// for that many, so a round keeps at least its σ while that many reach the sum, and
    /// spends more privacy when fewer do. Default 1 (every drawn client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_survivors: Option<f64>,
}

fn default_delta() -> f64 {
    1e-5
}

/// Adaptive clipping (`privacy.adaptive`, Andrew et al. 2021): after each round the bound C
/// moves to C·exp(−learning_rate·(b̃ − quantile)), b̃ the fraction of the round's updates
/// that were within C, counted with Gaussian noise of standard deviation `count_noise`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveClipSpec {
    /// γ: the fraction of updates the bound should leave unclipped, in (0, 1).
    #[serde(default = "default_quantile")]
    pub quantile: f64,
    /// η: the step of the geometric update of the bound, > 0.
    #[serde(default = "default_clip_learning_rate")]
    pub learning_rate: f64,
    /// σ_b: the standard deviation of the noise on the count of updates within the bound;
    /// by default the clients drawn per round / 20 (Andrew et al.'s choice). It must exceed
    /// `noise_multiplier`: the updates' noise keeps what the count leaves of σ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_noise: Option<f64>,
}

fn default_quantile() -> f64 {
    0.5
}

fn default_clip_learning_rate() -> f64 {
    0.2
}

/// How a run draws its clients, as the accountant needs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Participation {
    /// K clients a round, uniformly without replacement.
    FixedSize(usize),
    /// Each client independently with this probability.
    Poisson(f64),
}

/// Which two federations the guarantee tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Neighbours {
    /// The same N clients, one client's data replaced (K of N drawn; local noise): the sum of
    /// clipped changes moves by at most 2C.
    ReplaceOne,
    /// One client more or less (Poisson participation): the sum moves by at most C.
    AddRemove,
}

/// Adaptive clipping as a run applies it (see [`AdaptiveClipSpec`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveClipping {
    pub quantile: f64,
    pub learning_rate: f64,
    /// σ_b, as given or the clients per round / 20.
    pub count_noise: f64,
}

impl AdaptiveClipping {
    /// The bound after a round at `bound` in which `within` of `counted` aggregated updates
    /// were within it, and the noised fraction b̃ that moved it; one standard normal from
    /// `rng`. A round that aggregated nothing leaves the bound as it was (`None`).
    pub fn next_bound(
        &self,
        bound: f64,
        within: usize,
        counted: f64,
        rng: &mut impl Rng,
    ) -> (f64, Option<f64>) {
        if counted == 0.0 {
            return (bound, None);
        }
        let z: f64 = rng.sample(StandardNormal);
        let fraction = (within as f64 + self.count_noise * z) / counted;
        let next = bound * (-self.learning_rate * (fraction - self.quantile)).exp();
        (next, Some(fraction))
    }
}

impl PrivacySpec {
    /// The settings' own checks (paths below `privacy`); the run's sizes are checked by
    /// [`PrivacySpec::resolve`].
    pub fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, message: String| Err(FieldError::new(path.into(), message));
        FieldError::positive("clip", self.clip)?;
        match (self.noise_multiplier, self.target_epsilon) {
            (Some(_), Some(_)) => {
                return bad(
                    "target_epsilon",
                    "give either `noise_multiplier` or `target_epsilon`, not both".into(),
                )
            }
            (None, None) => {
                return bad(
                    "noise_multiplier",
                    "give `noise_multiplier` (σ ≥ 0) or `target_epsilon` (ε > 0)".into(),
                )
            }
            (Some(s), None) if !(s >= 0.0 && s.is_finite()) => {
                return bad("noise_multiplier", format!("must be a number ≥ 0, got {s}"))
            }
            (None, Some(e)) => FieldError::positive("target_epsilon", e)?,
            (Some(_), None) => {}
        }
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return bad("delta", format!("must be in (0, 1), got {}", self.delta));
        }
        if self.mechanism == Mechanism::DpFtrl && self.accountant == Accountant::Pld {
            return bad(
                "accountant",
                "`mechanism: dp_ftrl` releases one Gaussian mechanism over the tree, whose ε is \
                 exact; `accountant` applies to `central` and `local` (leave it out)"
                    .into(),
            );
        }
        if self.mechanism == Mechanism::DpSgd && self.accountant == Accountant::Pld {
            return bad(
                "accountant",
                "`mechanism: dp_sgd` is accounted by `rdp` (one accountant per client, every \
                 round); `pld` covers the client-level mechanisms (`central`, `local`)"
                    .into(),
            );
        }
        if self.mechanism == Mechanism::Distributed && self.accountant == Accountant::Pld {
            return bad(
                "accountant",
                "`mechanism: distributed` is accounted by `rdp`: each round's noise depends on \
                 how many clients' shares reached the sum, and `pld` composes identical rounds"
                    .into(),
            );
        }
        if let Some(fraction) = self.share_survivors {
            if self.mechanism != Mechanism::Distributed {
                return bad(
                    "share_survivors",
                    "applies to `mechanism: distributed` only (the clients' noise shares)".into(),
                );
            }
            if !(fraction > 0.0 && fraction <= 1.0) {
                return bad(
                    "share_survivors",
                    format!("must be in (0, 1], got {fraction}"),
                );
            }
        }
        if let Some(adaptive) = &self.adaptive {
            if self.mechanism != Mechanism::Central {
                return bad(
                    "adaptive",
                    "adaptive clipping needs `mechanism: central` (the server noises the count \
                     of updates within the bound)"
                        .into(),
                );
            }
            if !(adaptive.quantile > 0.0 && adaptive.quantile < 1.0) {
                let got = adaptive.quantile;
                return bad("adaptive.quantile", format!("must be in (0, 1), got {got}"));
            }
            FieldError::positive("adaptive.learning_rate", adaptive.learning_rate)?;
            if let Some(sigma_b) = adaptive.count_noise {
                FieldError::positive("adaptive.count_noise", sigma_b)?;
            }
        }
        Ok(())
    }

    /// Under `mechanism: dp_sgd`, what local training does and the accountant needs;
    /// `None` for the client-level mechanisms. With `target_epsilon` σ is 0 here: it is
    /// solved with the clients' sizes ([`super::sample_level::resolve`]).
    pub fn sample_level(&self) -> Option<super::SampleLevelPrivacy> {
        (self.mechanism == Mechanism::DpSgd).then(|| super::SampleLevelPrivacy {
            dp_sgd: crate::models::DpSgd {
                clip: self.clip,
                noise_multiplier: self.noise_multiplier.unwrap_or(0.0),
            },
            delta: self.delta,
        })
    }

    /// The mechanism of a run of `rounds` rounds that draws its clients from `population`
    /// as `participation` says; a `target_epsilon` is turned into σ here.
    pub fn resolve(
        &self,
        population: usize,
        participation: Participation,
        rounds: u32,
    ) -> Result<ClientLevelPrivacy, FieldError> {
        self.validate()?;
        let noise_at = match self.mechanism {
            Mechanism::Central | Mechanism::DpFtrl => NoiseAt::Server,
            Mechanism::Local => NoiseAt::Client,
            Mechanism::Distributed => NoiseAt::Shares,
            Mechanism::DpSgd => {
                return Err(FieldError::new(
                    "mechanism".into(),
                    "`dp_sgd` is sample-level privacy (`PrivacySpec::sample_level`), not \
                     client-level"
                        .into(),
                ))
            }
        };
        let (sampling, neighbours, fixed_count) = match (noise_at, participation) {
            (NoiseAt::Server | NoiseAt::Shares, Participation::FixedSize(per_round)) => (
                Subsampling::FixedSize {
                    sample: per_round as u64,
                    population: population as u64,
                },
                Neighbours::ReplaceOne,
                None,
            ),
            (NoiseAt::Shares, Participation::Poisson(_)) => {
                return Err(FieldError::new(
                    "mechanism".into(),
                    DISTRIBUTED_SAMPLING.into(),
                ))
            }
            (NoiseAt::Server, Participation::Poisson(rate)) => (
                Subsampling::Poisson { rate },
                Neighbours::AddRemove,
                Some(rate * population as f64),
            ),
            // Every message is seen: no amplification; at worst a client sends every round.
            (NoiseAt::Client, _) => (
                Subsampling::Poisson { rate: 1.0 },
                Neighbours::ReplaceOne,
                None,
            ),
        };
        if let (Accountant::Pld, Subsampling::FixedSize { sample, population }) =
            (self.accountant, sampling)
        {
            if sample < population {
                return Err(FieldError::new(
                    "accountant".into(),
                    format!("{PLD_SAMPLING} ({sample} of {population} a round)"),
                ));
            }
        }
        let per_round = match participation {
            Participation::FixedSize(k) => k as f64,
            Participation::Poisson(rate) => rate * population as f64,
        };
        let noise_multiplier = match (self.noise_multiplier, self.target_epsilon) {
            (Some(sigma), _) => sigma,
            (None, Some(target)) => {
                let steps = rounds as u64;
                let epsilon = |sigma| match (self.mechanism, self.accountant) {
                    // DP-FTRL: a client in every release, the most any can spend.
                    (Mechanism::DpFtrl, _) => super::tree::tree_epsilon(
                        sigma,
                        super::tree::every_release_squares(steps),
                        self.delta,
                    ),
                    (_, Accountant::Rdp) => super::epsilon(sampling, sigma, steps, self.delta),
                    // A σ whose grid would be too large spends "too much": the search moves
                    // to larger σ, whose grids are smaller.
                    (_, Accountant::Pld) => match PldAccountant::new(sampling.rate(), sigma) {
                        pld if pld.grid_points(steps) > MOST_GRID_POINTS => f64::INFINITY,
                        pld => pld.epsilon(steps, self.delta),
                    },
                };
                match calibrate(epsilon, target) {
                    Ok(solved) => solved.sigma,
                    Err(CalibrationError::Unreachable {
                        smallest, sigma, ..
                    }) if self.accountant == Accountant::Pld && smallest.is_infinite() => {
                        return Err(pld_too_large(rounds, sigma));
                    }
                    Err(e) => return Err(FieldError::new("target_epsilon".into(), e.to_string())),
                }
            }
            (None, None) => unreachable!("validated"),
        };
        let adaptive = self.adaptive.as_ref().map(|a| AdaptiveClipping {
            quantile: a.quantile,
            learning_rate: a.learning_rate,
            count_noise: a.count_noise.unwrap_or(per_round / 20.0),
        });
        let update_noise_multiplier = match adaptive {
            None => noise_multiplier,
            Some(_) if noise_multiplier == 0.0 => 0.0,
            Some(a) if a.count_noise > noise_multiplier => {
                (noise_multiplier.powi(-2) - a.count_noise.powi(-2)).powf(-0.5)
            }
            Some(a) => {
                let path = if self
                    .adaptive
                    .as_ref()
                    .is_some_and(|a| a.count_noise.is_some())
                {
                    "adaptive.count_noise"
                } else {
                    "adaptive"
                };
                return Err(FieldError::new(
                    path.into(),
                    format!(
                        "the count's noise σ_b = {} must exceed the noise multiplier σ = \
                         {noise_multiplier:.4} (the updates keep (σ⁻² − σ_b⁻²)^(−1/2)); set \
                         `adaptive.count_noise` above σ (its default is the {per_round} clients \
                         per round / 20)",
                        a.count_noise
                    ),
                ));
            }
        };
        let mechanism = SubsampledGaussian {
            sampling,
            noise_multiplier,
        };
        let one_round = match (self.mechanism, self.accountant) {
            (Mechanism::DpFtrl, _) => OneRound::Tree,
            (_, Accountant::Rdp) => OneRound::Rdp(mechanism.rdp(RdpAccountant::default().orders())),
            (_, Accountant::Pld) => {
                let pld = PldAccountant::new(sampling.rate(), noise_multiplier);
                if pld.grid_points(rounds as u64) > MOST_GRID_POINTS {
                    return Err(pld_too_large(rounds, noise_multiplier));
                }
                OneRound::Pld(pld)
            }
        };
        let shares_for =
            (noise_at == NoiseAt::Shares).then(|| self.share_survivors.unwrap_or(1.0) * per_round);
        Ok(ClientLevelPrivacy {
            noise_at,
            shares_for,
            clip: self.clip,
            noise_multiplier,
            update_noise_multiplier,
            adaptive,
            neighbours,
            fixed_count,
            calibrated: self.target_epsilon.is_some(),
            delta: self.delta,
            sampling,
            one_round,
        })
    }
}

/// Client-level DP as a run applies it: clip on the clients, noise on the server or the
/// clients, ε by round.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientLevelPrivacy {
    pub noise_at: NoiseAt,
    /// Under the distributed mechanism: m, the number of clients whose noise shares make up
    /// σ·S (`share_survivors` × the clients drawn a round).
    pub shares_for: Option<f64>,
    /// C: the bound (under adaptive clipping, the first round's).
    pub clip: f64,
    /// σ, as given or solved for from `target_epsilon`: what the accountant composes.
    pub noise_multiplier: f64,
    /// σ_Δ: the multiplier of the updates' noise, σ itself, or under adaptive clipping what
    /// the count's noise leaves of it, (σ⁻² − σ_b⁻²)^(−1/2).
    pub update_noise_multiplier: f64,
    /// How the bound moves between rounds, if it does.
    pub adaptive: Option<AdaptiveClipping>,
    /// Which federations count as neighbours, so the sum's sensitivity.
    pub neighbours: Neighbours,
    /// Under Poisson participation (central): the expected number of clients a round, q·N,
    /// that the server divides by whoever came (the fixed-denominator estimator).
    pub fixed_count: Option<f64>,
    /// Whether σ was solved for (`target_epsilon`).
    pub calibrated: bool,
    pub delta: f64,
    /// How a release reaches a client's data, for the accountant: the round's sampling
    /// (central), or every message seen (local).
    pub sampling: Subsampling,
    /// One release, as the scenario's accountant composes it.
    one_round: OneRound,
}

/// The refusal of a PLD accountant whose grid for `rounds` rounds at σ `sigma` (or below)
/// would take more than [`MOST_GRID_POINTS`].
fn pld_too_large(rounds: u32, sigma: f64) -> FieldError {
    FieldError::new(
        "accountant".into(),
        format!(
            "the PLD accountant over {rounds} rounds at σ = {sigma:.4e} needs a grid of more \
             than {MOST_GRID_POINTS} points (its cost grows with the rounds, and fastest at \
             small σ); use `accountant: rdp`, whose cost does not, or fewer rounds"
        ),
    )
}

/// One release as an accountant holds it.
#[derive(Clone, Debug, PartialEq)]
enum OneRound {
    /// Its RDP at the default orders.
    Rdp(Vec<f64>),
    /// Its privacy loss distribution.
    Pld(PldAccountant),
    /// A leaf of DP-FTRL's tree: the server accounts per client ([`super::TreeAccountant`]).
    Tree,
}

impl ClientLevelPrivacy {
    /// The sensitivity of the sum of updates clipped to `bound`: 2·`bound` when one client's
    /// data are replaced, `bound` when one client is added or removed.
    pub fn sensitivity(&self, bound: f64) -> f64 {
        match self.neighbours {
            Neighbours::ReplaceOne => 2.0 * bound,
            Neighbours::AddRemove => bound,
        }
    }

    /// Scales each `(base, sent)` pair's change `sent − base` by min(1, C/‖Δ‖), C = `bound`
    /// and ‖Δ‖ the L2 norm of all the changes together (f64, in order); returns ‖Δ‖ before
    /// clipping. An update within the bound is left exactly as it was.
    pub fn clip(pairs: &mut [(&[f32], &mut [f32])], bound: f64) -> f64 {
        let mut squares = 0.0f64;
        for (base, sent) in pairs.iter() {
            assert_eq!(
                base.len(),
                sent.len(),
                "a sent vector and its base differ in length"
            );
            for (&b, &s) in base.iter().zip(sent.iter()) {
                let d = s as f64 - b as f64;
                squares += d * d;
            }
        }
        let norm = squares.sqrt();
        if norm > bound {
            Self::scale_changes(pairs, bound / norm);
        }
        norm
    }

    /// Scales each `(base, moved)` pair's change `moved − base` by `factor` (in f64): a clip,
    /// or the server's fixed denominator under Poisson participation.
    pub fn scale_changes(pairs: &mut [(&[f32], &mut [f32])], factor: f64) {
        for (base, moved) in pairs.iter_mut() {
            for (&b, m) in base.iter().zip(moved.iter_mut()) {
                *m = (b as f64 + factor * (*m as f64 - b as f64)) as f32;
            }
        }
    }

    /// The standard deviation of the noise on a global model that moves by the sum of the
    /// clients' changes clipped to `bound`, divided by `divisor` (the clients aggregated, for
    /// a plain average): σ_Δ·2C/`divisor`, the sum's noise divided like the sum.
    pub fn noise_std(&self, bound: f64, divisor: f64) -> f64 {
        self.update_noise_multiplier * self.sensitivity(bound) / divisor
    }

    /// Adds N(0, `std`²) to every coordinate of `vectors`, in order, one standard normal each
    /// from `rng` (nothing is drawn when `std` is 0).
    pub fn add_noise(vectors: &mut [&mut [f32]], std: f64, rng: &mut impl Rng) {
        if std == 0.0 {
            return;
        }
        for v in vectors.iter_mut() {
            for x in v.iter_mut() {
                let z: f64 = rng.sample(StandardNormal);
                *x = (*x as f64 + std * z) as f32;
            }
        }
    }

    /// Adds `std` × (Σ `enter` − Σ `leave`) to every coordinate of `vectors`, in order, each
    /// stream giving one standard normal per coordinate (DP-FTRL: the nodes entering and
    /// leaving the prefix, [`super::tree::increment`]); the sum in f64. Nothing is drawn when
    /// `std` is 0.
    pub fn add_tree_noise(
        vectors: &mut [&mut [f32]],
        std: f64,
        enter: &mut [impl Rng],
        leave: &mut [impl Rng],
    ) {
        if std == 0.0 {
            return;
        }
        for v in vectors.iter_mut() {
            for x in v.iter_mut() {
                let mut z = 0.0f64;
                for rng in enter.iter_mut() {
                    z += rng.sample::<f64, _>(StandardNormal);
                }
                for rng in leave.iter_mut() {
                    z -= rng.sample::<f64, _>(StandardNormal);
                }
                *x = (*x as f64 + std * z) as f32;
            }
        }
    }

    /// The standard deviation of the noise a client adds to each coordinate of its clipped
    /// update: σ·2C under the local mechanism, its share σ·S/√m under the distributed one;
    /// `None` where the server adds the noise.
    pub fn client_noise_std(&self) -> Option<f64> {
        let full = self.noise_multiplier * self.sensitivity(self.clip);
        match (self.noise_at, self.shares_for) {
            (NoiseAt::Client, _) => Some(full),
            (NoiseAt::Shares, Some(m)) => Some(full / m.sqrt()),
            _ => None,
        }
    }

    /// Under the distributed mechanism, the noise multiplier of a sum that carries `summed`
    /// clients' shares: σ·√(n/m).
    pub fn shares_noise_multiplier(&self, summed: usize) -> f64 {
        let m = self.shares_for.expect("the distributed mechanism");
        self.noise_multiplier * (summed as f64 / m).sqrt()
    }

    /// ε at δ after `rounds` noised releases (∞ without noise): aggregations under the
    /// central mechanism, one client's updates under the local one; under DP-FTRL, that of a
    /// client in every release (the most it can be).
    pub fn epsilon_after(&self, rounds: u64) -> f64 {
        match &self.one_round {
            OneRound::Rdp(rdp) => {
                let mut accountant = RdpAccountant::default();
                accountant.compose_rdp(rdp, rounds);
                accountant.epsilon(self.delta).0
            }
            OneRound::Pld(pld) => pld.epsilon(rounds, self.delta),
            OneRound::Tree => {
                let squares = super::tree::every_release_squares(rounds);
                super::tree::tree_epsilon(self.noise_multiplier, squares, self.delta)
            }
        }
    }

    /// Whether the server releases prefix sums by DP-FTRL's tree aggregation.
    pub fn tree_aggregation(&self) -> bool {
        self.one_round == OneRound::Tree
    }

    /// Which accountant gives [`ClientLevelPrivacy::epsilon_after`] (DP-FTRL's exact
    /// Gaussian ε counts as PLD: it is the privacy loss itself).
    pub fn accountant(&self) -> Accountant {
        match self.one_round {
            OneRound::Rdp(_) => Accountant::Rdp,
            OneRound::Pld(_) | OneRound::Tree => Accountant::Pld,
        }
    }
}

/// The distributed mechanism's accountant: each release composed with the noise its sum
/// really carried, σ·√(n/m) for n clients' shares (the one-step RDP kept by n).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ShareAccountant {
    spent: RdpAccountant,
    by_count: std::collections::BTreeMap<usize, Vec<f64>>,
}

impl ShareAccountant {
    pub fn new() -> Self {
        ShareAccountant {
            spent: RdpAccountant::default(),
            by_count: Default::default(),
        }
    }

    /// Composes one release of `privacy` whose sum carried `summed` (≥ 1) clients' shares;
    /// returns its noise multiplier σ·√(n/m).
    pub fn release(&mut self, privacy: &ClientLevelPrivacy, summed: usize) -> f64 {
        let sigma = privacy.shares_noise_multiplier(summed);
        let orders = self.spent.orders().to_vec();
        let rdp = self.by_count.entry(summed).or_insert_with(|| {
            let mechanism = SubsampledGaussian {
                sampling: privacy.sampling,
                noise_multiplier: sigma,
            };
            mechanism.rdp(&orders)
        });
        self.spent.compose_rdp(rdp, 1);
        sigma
    }

    /// ε at `delta` of the releases so far.
    pub fn epsilon(&self, delta: f64) -> f64 {
        self.spent.epsilon(delta).0
    }
}

impl Default for ShareAccountant {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    fn spec(yaml: &str) -> PrivacySpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn resolved(yaml: &str) -> ClientLevelPrivacy {
        spec(yaml)
            .resolve(100, Participation::FixedSize(10), 50)
            .unwrap()
    }

    /// Δ = (3, 4) and (0, 12) together: ‖Δ‖ = 13; C = 6.5 halves every change.
    #[test]
    fn clipping_by_hand() {
        let p = resolved("{clip: 6.5, noise_multiplier: 1}");
        let (b1, b2) = ([1.0f32, 1.0], [0.0f32, 2.0]);
        let (mut s1, mut s2) = ([4.0f32, 5.0], [0.0f32, 14.0]);
        let norm = ClientLevelPrivacy::clip(&mut [(&b1, &mut s1), (&b2, &mut s2)], p.clip);
        assert_eq!(norm, 13.0);
        assert_eq!((s1, s2), ([2.5, 3.0], [0.0, 8.0]));
        // Within the bound: untouched, bit for bit.
        let mut s3 = [1.25f32, 0.1];
        assert!(ClientLevelPrivacy::clip(&mut [(&[1.0, 0.0], &mut s3)], p.clip) < 6.5);
        assert_eq!(s3, [1.25, 0.1]);
    }

    /// A change of (2, −4) from (1, 1) scaled by 0.25: (1.5, 0).
    #[test]
    fn scaling_a_change_by_hand() {
        let mut moved = [3.0f32, -3.0];
        ClientLevelPrivacy::scale_changes(&mut [(&[1.0, 1.0], &mut moved)], 0.25);
        assert_eq!(moved, [1.5, 0.0]);
    }

    #[test]
    fn noise_is_the_streams_and_has_the_asked_spread() {
        let p = resolved("{clip: 0.5, noise_multiplier: 2}");
        assert_eq!(p.sensitivity(p.clip), 1.0);
        assert_eq!(p.noise_std(p.clip, 4.0), 0.5);
        let noised = |seed| {
            let mut v = vec![0.0f32; 20_000];
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            ClientLevelPrivacy::add_noise(&mut [&mut v[..]], p.noise_std(p.clip, 4.0), &mut rng);
            v
        };
        let v = noised(7);
        assert_eq!(v, noised(7), "the same stream, the same noise");
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        // 20 000 draws: the mean within 4 standard errors, the std within 2 %.
        assert!(
            mean.abs() < 4.0 * 0.5 / (v.len() as f64).sqrt(),
            "mean {mean}"
        );
        assert!((var.sqrt() - 0.5).abs() < 0.01, "std {}", var.sqrt());
        let mut untouched = vec![1.0f32; 3];
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        ClientLevelPrivacy::add_noise(&mut [&mut untouched[..]], 0.0, &mut rng);
        assert_eq!(untouched, vec![1.0; 3]);
    }

    #[test]
    fn epsilon_grows_with_rounds_and_is_infinite_without_noise() {
        let p = resolved("{clip: 1, noise_multiplier: 1}");
        assert_eq!(
            p.sampling,
            Subsampling::FixedSize {
                sample: 10,
                population: 100
            }
        );
        let (e1, e50) = (p.epsilon_after(1), p.epsilon_after(50));
        assert!(0.0 < e1 && e1 < e50 && e50.is_finite(), "{e1} {e50}");
        assert_eq!(
            resolved("{clip: 1, noise_multiplier: 0}").epsilon_after(1),
            f64::INFINITY
        );
    }

    #[test]
    fn a_target_epsilon_is_met_over_the_run() {
        let p = resolved("{clip: 1, target_epsilon: 4, delta: 1e-6}");
        assert!(p.calibrated);
        let eps = p.epsilon_after(50);
        assert!((0.99 * 4.0..=4.0).contains(&eps), "{eps}");
    }

    /// DP-FTRL's target is met by a client aggregated in every one of the 50 rounds, the most
    /// any client can spend.
    #[test]
    fn a_dp_ftrl_target_epsilon_holds_for_a_client_in_every_round() {
        let p = resolved("{mechanism: dp_ftrl, clip: 1, target_epsilon: 4}");
        assert!(p.calibrated && p.tree_aggregation());
        let eps = p.epsilon_after(50);
        assert!((0.99 * 4.0..=4.0).contains(&eps), "{eps}");
    }

    /// Local: no amplification by sampling, so the same σ spends more than central with
    /// K of N; a client that sent r updates spends the Gaussian mechanism's ε composed r
    /// times, whatever the sampling.
    #[test]
    fn local_noise_spends_per_message_without_amplification() {
        let local = resolved("{mechanism: local, clip: 0.5, noise_multiplier: 3}");
        let central = resolved("{clip: 0.5, noise_multiplier: 3}");
        assert_eq!(local.sampling, Subsampling::Poisson { rate: 1.0 });
        assert_eq!(local.client_noise_std(), Some(3.0));
        assert!(local.epsilon_after(10) > central.epsilon_after(10));
        let gaussian = Subsampling::FixedSize {
            sample: 1,
            population: 1,
        };
        assert_eq!(
            local.epsilon_after(10),
            super::super::epsilon(gaussian, 3.0, 10, 1e-5)
        );
        let target = spec("{mechanism: local, clip: 1, target_epsilon: 8}");
        let solved = target
            .resolve(100, Participation::FixedSize(10), 50)
            .unwrap();
        assert!((0.99 * 8.0..=8.0).contains(&solved.epsilon_after(50)));
    }

    /// Poisson participation at q = 0.05 of 200: add/remove neighbours (sensitivity C), the
    /// accountant of Poisson sampling, a fixed denominator of qN = 10, and Andrew et al.'s
    /// count noise qN/20; the local mechanism ignores how clients are drawn.
    #[test]
    fn poisson_participation_counts_one_client_more_or_less() {
        let central = spec("{clip: 0.5, noise_multiplier: 1.5}");
        let p = central
            .resolve(200, Participation::Poisson(0.05), 50)
            .unwrap();
        assert_eq!(p.sampling, Subsampling::Poisson { rate: 0.05 });
        assert_eq!(
            (p.neighbours, p.fixed_count),
            (Neighbours::AddRemove, Some(10.0))
        );
        assert_eq!(p.sensitivity(0.5), 0.5);
        assert_eq!(p.noise_std(0.5, 10.0), 1.5 * 0.5 / 10.0);
        assert_eq!(
            p.epsilon_after(50),
            super::super::epsilon(Subsampling::Poisson { rate: 0.05 }, 1.5, 50, 1e-5)
        );
        let adaptive = spec("{clip: 0.5, noise_multiplier: 0.3, adaptive: {}}");
        let a = adaptive
            .resolve(200, Participation::Poisson(0.05), 50)
            .unwrap();
        assert_eq!(a.adaptive.unwrap().count_noise, 0.5);
        let local = spec("{mechanism: local, clip: 0.5, noise_multiplier: 1.5}");
        let l = local
            .resolve(200, Participation::Poisson(0.05), 50)
            .unwrap();
        assert_eq!(
            (l.neighbours, l.fixed_count),
            (Neighbours::ReplaceOne, None)
        );
        assert_eq!(l.client_noise_std(), Some(1.5));
    }

    /// Distributed: K = 10 of 100, C = 0.5 (S = 2C = 1), σ = 2, shares sized for half of the
    /// drawn clients (m = 5): each client adds σ·S/√m = 2/√5; a sum of 5 shares carries σ = 2
    /// and spends what central noise of σ = 2 spends, a sum of 2 shares σ·√(2/5), more.
    #[test]
    fn noise_shares_make_up_the_central_noise_among_their_survivors() {
        let p = resolved(
            "{mechanism: distributed, clip: 0.5, noise_multiplier: 2, share_survivors: 0.5}",
        );
        let central = resolved("{clip: 0.5, noise_multiplier: 2}");
        assert_eq!((p.noise_at, p.shares_for), (NoiseAt::Shares, Some(5.0)));
        assert_eq!(
            (p.sampling, p.neighbours),
            (central.sampling, central.neighbours)
        );
        assert_eq!(p.client_noise_std(), Some(2.0 / 5f64.sqrt()));
        assert_eq!(central.client_noise_std(), None);
        assert_eq!(p.shares_noise_multiplier(5), 2.0);
        assert_eq!(p.shares_noise_multiplier(2), 2.0 * (2.0f64 / 5.0).sqrt());
        let mut full = ShareAccountant::new();
        for _ in 0..3 {
            assert_eq!(full.release(&p, 5), 2.0);
        }
        let (composed, multiplied) = (full.epsilon(1e-5), central.epsilon_after(3));
        assert!((composed - multiplied).abs() <= 1e-12 * multiplied);
        let mut short = ShareAccountant::new();
        for n in [5, 2, 5] {
            short.release(&p, n);
        }
        let two = SubsampledGaussian {
            sampling: p.sampling,
            noise_multiplier: 2.0 * 0.4f64.sqrt(),
        };
        let mut by_hand = RdpAccountant::default();
        by_hand.compose(
            &SubsampledGaussian {
                noise_multiplier: 2.0,
                ..two
            },
            2,
        );
        by_hand.compose(&two, 1);
        assert_eq!(short.epsilon(1e-5), by_hand.epsilon(1e-5).0);
        assert!(short.epsilon(1e-5) > full.epsilon(1e-5));
        // Every drawn client by default; Poisson participation refused (the count is seen).
        let all = resolved("{mechanism: distributed, clip: 0.5, noise_multiplier: 2}");
        assert_eq!(all.shares_for, Some(10.0));
        let poisson = spec("{mechanism: distributed, clip: 1, noise_multiplier: 1}")
            .resolve(100, Participation::Poisson(0.1), 50)
            .unwrap_err();
        assert_eq!(poisson.path, "mechanism");
    }

    /// σ = 1 with σ_b = 2: the updates keep (1 − 1/4)^(−1/2) = 2/√3 of the bound's noise, and
    /// ε stays that of σ.
    #[test]
    fn adaptive_clipping_splits_sigma_between_the_count_and_the_updates() {
        let fixed = resolved("{clip: 0.1, noise_multiplier: 1}");
        let p = resolved("{clip: 0.1, noise_multiplier: 1, adaptive: {count_noise: 2}}");
        assert_eq!(fixed.update_noise_multiplier, 1.0);
        assert!((p.update_noise_multiplier - 2.0 / 3f64.sqrt()).abs() < 1e-15);
        assert_eq!(p.epsilon_after(50), fixed.epsilon_after(50));
        assert!((p.noise_std(0.5, 10.0) - 2.0 / 3f64.sqrt() * 2.0 * 0.5 / 10.0).abs() < 1e-15);
        // The defaults: γ = 0.5, η = 0.2, σ_b = K/20 (K = 100 of 1 000 here).
        let a = spec("{clip: 0.1, noise_multiplier: 1, adaptive: {}}")
            .resolve(1000, Participation::FixedSize(100), 50)
            .unwrap()
            .adaptive
            .unwrap();
        assert_eq!(
            (a.quantile, a.learning_rate, a.count_noise),
            (0.5, 0.2, 5.0)
        );
        // No noise at all: none on the updates either.
        let clip_only = resolved("{clip: 0.1, noise_multiplier: 0, adaptive: {count_noise: 1}}");
        assert_eq!(clip_only.update_noise_multiplier, 0.0);
    }

    /// 7 of 10 within C = 2 and the count's standard normal z: b̃ = (7 + 0.5·z)/10 and
    /// C' = 2·exp(−0.2·(b̃ − 0.5)); nothing aggregated leaves C alone and draws nothing.
    #[test]
    fn the_bound_moves_by_the_noised_fraction() {
        let a = AdaptiveClipping {
            quantile: 0.5,
            learning_rate: 0.2,
            count_noise: 0.5,
        };
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let z: f64 = rng.clone().sample(StandardNormal);
        let (next, fraction) = a.next_bound(2.0, 7, 10.0, &mut rng);
        let expected = (7.0 + 0.5 * z) / 10.0;
        assert_eq!(fraction, Some(expected));
        assert_eq!(next, 2.0 * (-0.2 * (expected - 0.5)).exp());
        let before = rng.clone();
        assert_eq!(a.next_bound(2.0, 0, 0.0, &mut rng), (2.0, None));
        assert_eq!(rng, before, "nothing drawn");
    }

    /// Norms 1, 2, …, 100 every round: from C = 1 the bound climbs to their median and stays
    /// near it (γ = 0.5), or near the 90th percentile (γ = 0.9).
    #[test]
    fn the_bound_tracks_the_quantile_of_the_norms() {
        for (quantile, target) in [(0.5, 50.0), (0.9, 90.0)] {
            let a = AdaptiveClipping {
                quantile,
                learning_rate: 0.2,
                count_noise: 100.0 / 20.0,
            };
            let mut rng = ChaCha20Rng::seed_from_u64(1);
            let mut bound = 1.0;
            let mut late = Vec::new();
            for round in 0..400 {
                let within = (1..=100).filter(|&n| n as f64 <= bound).count();
                bound = a.next_bound(bound, within, 100.0, &mut rng).0;
                if round >= 300 {
                    late.push(bound);
                }
            }
            let mean = late.iter().sum::<f64>() / late.len() as f64;
            assert!((mean - target).abs() < 0.1 * target, "γ {quantile}: {mean}");
        }
    }

    #[test]
    fn bad_settings_name_their_field() {
        let path = |yaml: &str| spec(yaml).validate().unwrap_err().path;
        assert_eq!(path("{clip: 0, noise_multiplier: 1}"), "clip");
        assert_eq!(path("{clip: 1, noise_multiplier: -1}"), "noise_multiplier");
        assert_eq!(
            path("{clip: 1, noise_multiplier: 1, share_survivors: 0.5}"),
            "share_survivors"
        );
        assert_eq!(
            path("{mechanism: distributed, clip: 1, noise_multiplier: 1, share_survivors: 0}"),
            "share_survivors"
        );
        assert_eq!(
            path("{mechanism: distributed, clip: 1, noise_multiplier: 1, accountant: pld}"),
            "accountant"
        );
        assert_eq!(path("{clip: 1}"), "noise_multiplier");
        assert_eq!(
            path("{clip: 1, noise_multiplier: 1, target_epsilon: 2}"),
            "target_epsilon"
        );
        assert_eq!(path("{clip: 1, target_epsilon: -2}"), "target_epsilon");
        assert_eq!(path("{clip: 1, noise_multiplier: 1, delta: 1}"), "delta");
        let sigma = "{clip: 1, noise_multiplier: 1, ";
        assert_eq!(
            path(&format!("{sigma}mechanism: local, adaptive: {{}}}}")),
            "adaptive"
        );
        assert_eq!(
            path(&format!("{sigma}adaptive: {{quantile: 1}}}}")),
            "adaptive.quantile"
        );
        assert_eq!(
            path(&format!("{sigma}adaptive: {{learning_rate: 0}}}}")),
            "adaptive.learning_rate"
        );
        assert_eq!(
            path(&format!("{sigma}adaptive: {{count_noise: -1}}}}")),
            "adaptive.count_noise"
        );
        // σ_b must exceed σ: by default K/20 = 0.5 of the 10 per round here.
        let resolve =
            |yaml: &str| (spec(yaml).resolve(100, Participation::FixedSize(10), 50)).unwrap_err();
        let e = resolve(&format!("{sigma}adaptive: {{}}}}"));
        assert_eq!(e.path, "adaptive");
        assert!(
            e.message.contains("10 clients per round / 20"),
            "{}",
            e.message
        );
        let e = resolve(&format!("{sigma}adaptive: {{count_noise: 0.9}}}}"));
        assert_eq!(e.path, "adaptive.count_noise");
        assert!(serde_yaml::from_str::<PrivacySpec>("{clip: 1, sigma: 1}").is_err());
        assert!(serde_yaml::from_str::<PrivacySpec>("{clip: 1, adaptive: {gamma: 0.5}}").is_err());
        assert!(serde_yaml::from_str::<PrivacySpec>("{mechanism: shuffle, clip: 1}").is_err());
    }
}
