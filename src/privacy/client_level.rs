//! Client-level differential privacy (`privacy:` as written, [`PrivacySpec`], and as a run
//! applies it, [`ClientLevelPrivacy`]): what one client sends is private, whatever its data.
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
//! This room does the arithmetic only (clip, noise, ε); the actors decide when. Noise is drawn
//! from the stream the caller passes, one standard normal per coordinate in order.

use super::accounting::{
    calibrate_noise_multiplier, RdpAccountant, SubsampledGaussian, Subsampling,
};
use crate::spec::FieldError;
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
}

/// Client-level differential privacy (`privacy:`): each client's update clipped, Gaussian
/// noise added to the server's sum (or to each update), and the ε spent reported after every
/// round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrivacySpec {
    /// `central`: the server noises the sum of the clipped updates (DP-FedAvg); `local`: each
    /// client noises its own before sending it.
    #[serde(default)]
    pub mechanism: Mechanism,
    /// C: each client's update (its change from the global model it started from, every
    /// vector it sends taken as one) is scaled down to at most this L2 norm.
    pub clip: f64,
    /// σ: Gaussian noise of standard deviation σ·2C (2C: how far one client's clipped update
    /// can move when its data are replaced) is added to the sum of the clipped updates
    /// (`central`) or to each of them (`local`); 0 adds none (ε is then infinite). Give this or
    /// `target_epsilon`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_multiplier: Option<f64>,
    /// The ε the whole run may spend: the smallest σ that spends at most this (to within 1 %)
    /// is solved for before the run and reported. Give this or `noise_multiplier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_epsilon: Option<f64>,
    /// δ of the (ε, δ) guarantee, in (0, 1); below 1/N for N clients is the usual choice.
    #[serde(default = "default_delta")]
    pub delta: f64,
}

fn default_delta() -> f64 {
    1e-5
}

impl PrivacySpec {
    /// The settings' own checks (paths below `privacy`); the run's sizes are checked by
    /// [`PrivacySpec::resolve`].
    pub fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, message: String| Err(FieldError::new(path.into(), message));
        if !(self.clip > 0.0 && self.clip.is_finite()) {
            return bad(
                "clip",
                format!("must be a positive number, got {}", self.clip),
            );
        }
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
            (None, Some(e)) if !(e > 0.0 && e.is_finite()) => {
                return bad(
                    "target_epsilon",
                    format!("must be a positive number, got {e}"),
                )
            }
            _ => {}
        }
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return bad("delta", format!("must be in (0, 1), got {}", self.delta));
        }
        Ok(())
    }

    /// The mechanism of a run of `rounds` rounds that draws `per_round` of `population`
    /// clients each round; a `target_epsilon` is turned into σ here.
    pub fn resolve(
        &self,
        population: usize,
        per_round: usize,
        rounds: u32,
    ) -> Result<ClientLevelPrivacy, FieldError> {
        self.validate()?;
        let sampling = match self.mechanism {
            Mechanism::Central => Subsampling::FixedSize {
                sample: per_round as u64,
                population: population as u64,
            },
            // Every message is seen: no amplification; at worst a client sends every round.
            Mechanism::Local => Subsampling::Poisson { rate: 1.0 },
        };
        let noise_multiplier = match (self.noise_multiplier, self.target_epsilon) {
            (Some(sigma), _) => sigma,
            (None, Some(target)) => {
                calibrate_noise_multiplier(sampling, rounds as u64, target, self.delta)
                    .map_err(|e| FieldError::new("target_epsilon".into(), e.to_string()))?
            }
            (None, None) => unreachable!("validated"),
        };
        let mechanism = SubsampledGaussian {
            sampling,
            noise_multiplier,
        };
        let accountant = RdpAccountant::default();
        let one_round = mechanism.rdp(accountant.orders());
        Ok(ClientLevelPrivacy {
            mechanism: self.mechanism,
            clip: self.clip,
            noise_multiplier,
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
    pub mechanism: Mechanism,
    pub clip: f64,
    /// σ, as given or solved for from `target_epsilon`.
    pub noise_multiplier: f64,
    /// Whether σ was solved for (`target_epsilon`).
    pub calibrated: bool,
    pub delta: f64,
    /// How a release reaches a client's data, for the accountant: the round's sampling
    /// (central), or every message seen (local).
    pub sampling: Subsampling,
    /// One release's RDP at the accountant's default orders.
    one_round: Vec<f64>,
}

impl ClientLevelPrivacy {
    /// The sensitivity of the sum of clipped updates: 2C (one client's data replaced).
    pub fn sensitivity(&self) -> f64 {
        2.0 * self.clip
    }

    /// Scales each `(base, sent)` pair's change `sent − base` by min(1, C/‖Δ‖), ‖Δ‖ the L2 norm
    /// of all the changes together (f64, in order); returns ‖Δ‖ before clipping. An update
    /// within the bound is left exactly as it was.
    pub fn clip(&self, pairs: &mut [(&[f32], &mut [f32])]) -> f64 {
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
        if norm > self.clip {
            let factor = self.clip / norm;
            for (base, sent) in pairs.iter_mut() {
                for (&b, s) in base.iter().zip(sent.iter_mut()) {
                    *s = (b as f64 + factor * (*s as f64 - b as f64)) as f32;
                }
            }
        }
        norm
    }

    /// The standard deviation of the noise on a global model that moves by the sum of the
    /// clients' clipped changes divided by `divisor` (the clients aggregated, for a plain
    /// average): σ·2C/`divisor`, the sum's noise divided like the sum.
    pub fn noise_std(&self, divisor: f64) -> f64 {
        self.noise_multiplier * self.sensitivity() / divisor
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

    /// The standard deviation of the noise a client adds to each coordinate of its clipped
    /// update under the local mechanism: σ·2C.
    pub fn local_noise_std(&self) -> f64 {
        self.noise_multiplier * self.sensitivity()
    }

    /// ε at δ after `rounds` noised releases (∞ without noise): aggregations under the
    /// central mechanism, one client's updates under the local one.
    pub fn epsilon_after(&self, rounds: u64) -> f64 {
        let mut accountant = RdpAccountant::default();
        accountant.compose_rdp(&self.one_round, rounds);
        accountant.epsilon(self.delta).0
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
        spec(yaml).resolve(100, 10, 50).unwrap()
    }

    /// Δ = (3, 4) and (0, 12) together: ‖Δ‖ = 13; C = 6.5 halves every change.
    #[test]
    fn clipping_by_hand() {
        let p = resolved("{clip: 6.5, noise_multiplier: 1}");
        let (b1, b2) = ([1.0f32, 1.0], [0.0f32, 2.0]);
        let (mut s1, mut s2) = ([4.0f32, 5.0], [0.0f32, 14.0]);
        let norm = p.clip(&mut [(&b1, &mut s1), (&b2, &mut s2)]);
        assert_eq!(norm, 13.0);
        assert_eq!((s1, s2), ([2.5, 3.0], [0.0, 8.0]));
        // Within the bound: untouched, bit for bit.
        let mut s3 = [1.25f32, 0.1];
        assert!(p.clip(&mut [(&[1.0, 0.0], &mut s3)]) < 6.5);
        assert_eq!(s3, [1.25, 0.1]);
    }

    #[test]
    fn noise_is_the_streams_and_has_the_asked_spread() {
        let p = resolved("{clip: 0.5, noise_multiplier: 2}");
        assert_eq!(p.sensitivity(), 1.0);
        assert_eq!(p.noise_std(4.0), 0.5);
        let noised = |seed| {
            let mut v = vec![0.0f32; 20_000];
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            ClientLevelPrivacy::add_noise(&mut [&mut v[..]], p.noise_std(4.0), &mut rng);
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

    /// Local: no amplification by sampling, so the same σ spends more than central with
    /// K of N; a client that sent r updates spends the Gaussian mechanism's ε composed r
    /// times, whatever the sampling.
    #[test]
    fn local_noise_spends_per_message_without_amplification() {
        let local = resolved("{mechanism: local, clip: 0.5, noise_multiplier: 3}");
        let central = resolved("{clip: 0.5, noise_multiplier: 3}");
        assert_eq!(local.sampling, Subsampling::Poisson { rate: 1.0 });
        assert_eq!(local.local_noise_std(), 3.0);
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
        let solved = target.resolve(100, 10, 50).unwrap();
        assert!((0.99 * 8.0..=8.0).contains(&solved.epsilon_after(50)));
    }

    #[test]
    fn bad_settings_name_their_field() {
        let path = |yaml: &str| spec(yaml).validate().unwrap_err().path;
        assert_eq!(path("{clip: 0, noise_multiplier: 1}"), "clip");
        assert_eq!(path("{clip: 1, noise_multiplier: -1}"), "noise_multiplier");
        assert_eq!(path("{clip: 1}"), "noise_multiplier");
        assert_eq!(
            path("{clip: 1, noise_multiplier: 1, target_epsilon: 2}"),
            "target_epsilon"
        );
        assert_eq!(path("{clip: 1, target_epsilon: -2}"), "target_epsilon");
        assert_eq!(path("{clip: 1, noise_multiplier: 1, delta: 1}"), "delta");
        assert!(serde_yaml::from_str::<PrivacySpec>("{clip: 1, sigma: 1}").is_err());
        assert!(serde_yaml::from_str::<PrivacySpec>("{mechanism: shuffle, clip: 1}").is_err());
    }
}
