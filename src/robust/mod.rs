//! Byzantine clients and robust aggregation: the `adversary:` section (which clients lie, and
//! how) and the `aggregation:` section (how the server combines the updates it receives when
//! some of them may be lies).
//!
//! Everything here is arithmetic on the changes clients send: a change is a sent vector minus
//! the global vector it moved from (FedEM: one per component, each combined on its own). An
//! attack either rewrites a malicious client's own change before it leaves ([`Attack::own`]:
//! sign flipping, Gaussian noise, scaling) or, for the attacks that know the honest clients'
//! updates of the round (ALIE, IPM), is crafted by the server from them ([`Attack::crafted`]),
//! every malicious client of the round sending the same vector, as the papers' colluding
//! attackers do. A robust rule (of the catalogue [`ROBUST_RULES`]) turns a round's changes
//! into the one change the global model makes, each client counting the same.
//!
//! This room draws only from the streams its callers pass and never knows when a round
//! happens: the clients and the server apply it.

mod aggregation;

pub use aggregation::{
    BulyanSpec, CenteredClippingSpec, GeometricMedianSpec, KrumSpec, MedianSpec, NormBoundingSpec,
    RobustRuleRegistration, RobustRuleSettings, RobustRuleSpec, TrimmedMeanSpec, ROBUST_RULES,
};

use crate::spec::FieldError;
use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

/// `adversary:`: a seeded set of malicious clients and what they do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdversarySpec {
    /// The share of the participants that are malicious, in (0, 1): ⌊fraction·N⌋ clients drawn
    /// from the run's `adversary` stream (`clients.csv` marks them).
    pub fraction: f64,
    /// What each malicious client sends instead of its honest update.
    pub attack: Attack,
}

impl AdversarySpec {
    pub fn validate(&self) -> Result<(), FieldError> {
        if !(self.fraction > 0.0 && self.fraction < 1.0) {
            return Err(FieldError::new(
                "fraction".into(),
                format!("must be in (0, 1), got {}", self.fraction),
            ));
        }
        self.attack.validate().map_err(|e| e.within("attack"))
    }

    /// The positions of the malicious clients among `participants` of them: ⌊fraction·N⌋
    /// distinct positions drawn from `rng`, in draw order.
    pub fn draw(&self, participants: usize, rng: &mut impl Rng) -> Vec<usize> {
        let k = (self.fraction * participants as f64).floor() as usize;
        rand::seq::index::sample(rng, participants, k).into_vec()
    }
}

/// A run's malicious clients (sorted) and their attack.
#[derive(Clone, Debug, PartialEq)]
pub struct Adversaries {
    pub attack: Attack,
    pub malicious: Vec<u32>,
}

/// What a malicious client sends (its change Δ: what it would have sent minus the global
/// model).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Attack {
    /// Sign flipping: −scale·Δ.
    SignFlip {
        #[serde(default = "one")]
        scale: f64,
    },
    /// Gaussian updates: a change of independent N(0, std²) values, from the client's `attack`
    /// stream of the job.
    Gaussian {
        #[serde(default = "one")]
        std: f64,
    },
    /// Scaled update (model replacement's boosting, Bagdasaryan et al. 2020): factor·Δ.
    Scaled { factor: f64 },
    /// A little is enough (Baruch et al. 2019): the gradient μ − z·σ, μ and σ the
    /// coordinate-wise mean and standard deviation of the round's honest gradients. A change
    /// is a step against the gradient, so the change sent is μ + z·σ of the honest changes.
    /// Without `z`, Baruch et al.'s z = Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − f, for the round's n
    /// updates of which f malicious.
    Alie {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        z: Option<f64>,
    },
    /// Inner product manipulation (Xie et al. 2020): −ε·μ, μ the mean of the round's honest
    /// changes.
    Ipm {
        #[serde(default = "default_ipm")]
        epsilon: f64,
    },
    /// Label flipping: each malicious client trains honestly on its training rows with every
    /// label y replaced by C − 1 − y (C classes); its validation and test rows keep theirs.
    /// Data held in memory only.
    LabelFlip {},
    /// A backdoor (Bagdasaryan et al. 2020; Sun et al. 2019): each malicious client stamps a
    /// `trigger`×`trigger` square of `value` in the bottom-right corner of every channel of a
    /// `poison` share of its training images (drawn from its `backdoor` stream), labels them
    /// `target`, trains honestly on the rest, and sends `boost`·Δ (model replacement's
    /// boosting; 1: none). Every client's test images of other labels, stamped, measure the
    /// attack's success (`split: backdoor` in `metrics.parquet`, `backdoor_success` in
    /// `summary.csv`). Image data held in memory only.
    Backdoor(Backdoor),
}

/// The backdoor's settings ([`Attack::Backdoor`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Backdoor {
    /// The label a triggered image gets: a class of the data set.
    pub target: i64,
    /// The side of the trigger's square, in pixels (at most the image's height and width).
    #[serde(default = "default_trigger")]
    pub trigger: usize,
    /// The trigger's pixel value; default: the largest feature value of the data set (white).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f32>,
    /// The share of a malicious client's training images it triggers, in (0, 1].
    #[serde(default = "default_poison")]
    pub poison: f64,
    /// The factor on the malicious change, ≥ 1.
    #[serde(default = "one")]
    pub boost: f64,
}

fn default_trigger() -> usize {
    4
}
fn default_poison() -> f64 {
    0.5
}

impl Backdoor {
    /// The trigger's value on `images` of `shape` (row-major, one after another): `value`, or
    /// by default the smallest or largest value of `images`, whichever is farther from the
    /// mean of the trigger's pixels over them (the larger on a tie).
    pub fn value_on(&self, images: &[f32], shape: [usize; 3]) -> f32 {
        if let Some(value) = self.value {
            return value;
        }
        let dim: usize = shape.iter().product();
        let mut mask = vec![0.0f32; dim];
        self.stamp(&mut mask, shape, 1.0);
        let lit: Vec<usize> = (0..dim).filter(|&i| mask[i] == 1.0).collect();
        let (mut low, mut high, mut sum) = (f32::INFINITY, f32::NEG_INFINITY, 0.0f64);
        for image in images.chunks_exact(dim) {
            for &v in image {
                (low, high) = (low.min(v), high.max(v));
            }
            sum += lit.iter().map(|&i| image[i] as f64).sum::<f64>();
        }
        let mean = sum / (lit.len() * (images.len() / dim)).max(1) as f64;
        if high as f64 - mean >= mean - low as f64 {
            high
        } else {
            low
        }
    }

    /// Stamps the trigger on one image of `shape` (`[channels, height, width]`, row-major).
    pub fn stamp(&self, image: &mut [f32], shape: [usize; 3], value: f32) {
        let [channels, height, width] = shape;
        for c in 0..channels {
            for y in height - self.trigger..height {
                let row = (c * height + y) * width;
                image[row + width - self.trigger..row + width].fill(value);
            }
        }
    }
}

fn one() -> f64 {
    1.0
}
fn default_ipm() -> f64 {
    0.1
}

impl Attack {
    fn validate(&self) -> Result<(), FieldError> {
        let bad = |path: &str, what: &str, v: f64| {
            Err(FieldError::new(
                path.into(),
                format!("must be {what}, got {v}"),
            ))
        };
        match *self {
            Attack::SignFlip { scale } if !(scale > 0.0 && scale.is_finite()) => {
                bad("scale", "a positive number", scale)
            }
            Attack::Gaussian { std } if !(std > 0.0 && std.is_finite()) => {
                bad("std", "a positive number", std)
            }
            Attack::Scaled { factor } if !factor.is_finite() => {
                bad("factor", "a finite number", factor)
            }
            Attack::Alie { z: Some(z) } if !z.is_finite() => bad("z", "a finite number", z),
            Attack::Ipm { epsilon } if !(epsilon > 0.0 && epsilon.is_finite()) => {
                bad("epsilon", "a positive number", epsilon)
            }
            Attack::Backdoor(b) if b.target < 0 => bad("target", "a class (≥ 0)", b.target as f64),
            Attack::Backdoor(b) if b.trigger == 0 => bad("trigger", "at least 1 pixel", 0.0),
            Attack::Backdoor(Backdoor { value: Some(v), .. }) if !v.is_finite() => {
                bad("value", "a finite number", v as f64)
            }
            Attack::Backdoor(b) if !(b.poison > 0.0 && b.poison <= 1.0) => {
                bad("poison", "in (0, 1]", b.poison)
            }
            Attack::Backdoor(b) if !(b.boost >= 1.0 && b.boost.is_finite()) => {
                bad("boost", "a finite number ≥ 1", b.boost)
            }
            _ => Ok(()),
        }
    }

    /// Whether the server crafts it from the round's honest updates (ALIE, IPM) rather than
    /// each malicious client from its own.
    pub fn is_crafted(&self) -> bool {
        matches!(self, Attack::Alie { .. } | Attack::Ipm { .. })
    }

    /// Whether each malicious client rewrites its own change ([`Attack::own`]).
    pub fn is_own(&self) -> bool {
        match self {
            Attack::SignFlip { .. } | Attack::Gaussian { .. } | Attack::Scaled { .. } => true,
            Attack::Backdoor(b) => b.boost != 1.0,
            Attack::Alie { .. } | Attack::Ipm { .. } | Attack::LabelFlip {} => false,
        }
    }

    /// Whether it poisons the malicious clients' training data (label flipping, backdoor).
    pub fn poisons_data(&self) -> bool {
        matches!(self, Attack::LabelFlip {} | Attack::Backdoor(_))
    }

    /// Its name in the scenario (`kind`).
    pub fn kind(&self) -> &'static str {
        match self {
            Attack::SignFlip { .. } => "sign_flip",
            Attack::Gaussian { .. } => "gaussian",
            Attack::Scaled { .. } => "scaled",
            Attack::Alie { .. } => "alie",
            Attack::Ipm { .. } => "ipm",
            Attack::LabelFlip {} => "label_flip",
            Attack::Backdoor(_) => "backdoor",
        }
    }

    /// A malicious client's own attack on its change `delta` (one sent vector), drawing from
    /// `rng` (Gaussian); crafted attacks leave it to the server.
    pub fn own(&self, delta: &mut [f64], rng: &mut impl Rng) {
        match *self {
            Attack::SignFlip { scale } => delta.iter_mut().for_each(|x| *x *= -scale),
            Attack::Scaled { factor } => delta.iter_mut().for_each(|x| *x *= factor),
            Attack::Backdoor(Backdoor { boost, .. }) => delta.iter_mut().for_each(|x| *x *= boost),
            Attack::Gaussian { std } => delta
                .iter_mut()
                .for_each(|x| *x = std * rng.sample::<f64, _>(StandardNormal)),
            Attack::Alie { .. } | Attack::Ipm { .. } | Attack::LabelFlip {} => {}
        }
    }

    /// The change every malicious client sends for one vector, crafted from the `honest`
    /// changes of the round (at least one), with `n` updates in the round of which
    /// `malicious` are malicious.
    pub fn crafted(&self, honest: &[&[f64]], n: usize, malicious: usize) -> Vec<f64> {
        let d = honest[0].len();
        let h = honest.len() as f64;
        let mean: Vec<f64> = (0..d)
            .map(|j| honest.iter().map(|v| v[j]).sum::<f64>() / h)
            .collect();
        match *self {
            Attack::Ipm { epsilon } => mean.iter().map(|m| -epsilon * m).collect(),
            Attack::Alie { z } => {
                let z = z.unwrap_or_else(|| alie_z(n, malicious));
                (0..d)
                    .map(|j| {
                        let var = honest.iter().map(|v| (v[j] - mean[j]).powi(2)).sum::<f64>() / h;
                        // μ − z·σ of the gradients: changes point against them.
                        mean[j] + z * var.sqrt()
                    })
                    .collect()
            }
            _ => unreachable!("only ALIE and IPM are crafted"),
        }
    }
}

/// Baruch et al.'s z for `n` updates of which `f` are malicious: Φ⁻¹((n − s)/n),
/// s = ⌊n/2 + 1⌋ − f (the honest clients the attackers need on their side); 0 when no z
/// leaves them enough.
pub fn alie_z(n: usize, f: usize) -> f64 {
    let s = (n / 2 + 1).saturating_sub(f);
    let p = (n - s.min(n)) as f64 / n.max(1) as f64;
    if p <= 0.0 || p >= 1.0 {
        return 0.0;
    }
    inverse_normal_cdf(p)
}

/// Φ⁻¹(p) for p in (0, 1), by Acklam's rational approximation (relative error below
/// 1.15e-9).
pub fn inverse_normal_cdf(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn attacks_by_hand() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let mut d = vec![1.0, -2.0];
        Attack::SignFlip { scale: 2.0 }.own(&mut d, &mut rng);
        assert_eq!(d, [-2.0, 4.0]);
        Attack::Scaled { factor: 0.5 }.own(&mut d, &mut rng);
        assert_eq!(d, [-1.0, 2.0]);
        let backdoor: Attack = serde_yaml::from_str("{kind: backdoor, target: 1}").unwrap();
        assert!(
            backdoor.poisons_data() && !backdoor.is_own(),
            "no boost: honest updates"
        );
        let boosted: Attack =
            serde_yaml::from_str("{kind: backdoor, target: 1, boost: 3}").unwrap();
        assert!(boosted.is_own());
        boosted.own(&mut d, &mut rng);
        assert_eq!(d, [-3.0, 6.0]);
        // A 2-pixel trigger on a 2×3×3 image: the bottom-right 2×2 of both channels.
        let Attack::Backdoor(b) = boosted else {
            unreachable!()
        };
        let mut image = vec![0.0f32; 18];
        (Backdoor { trigger: 2, ..b }).stamp(&mut image, [2, 3, 3], 1.0);
        let lit: Vec<usize> = (0..18).filter(|&i| image[i] == 1.0).collect();
        assert_eq!(lit, [4, 5, 7, 8, 13, 14, 16, 17]);
        // By default, the extreme farthest from the corners: two 1×2×2 images whose corner
        // pixel (a 1-pixel trigger) holds 0.2 and 0.4, values in [0.1, 0.9]: mean 0.3, so 0.9;
        // corners 0.8 and 0.9: 0.1.
        let one = Backdoor { trigger: 1, ..b };
        assert_eq!(
            one.value_on(&[0.9, 0.5, 0.5, 0.2, 0.1, 0.5, 0.5, 0.4], [1, 2, 2]),
            0.9
        );
        assert_eq!(
            one.value_on(&[0.9, 0.5, 0.5, 0.8, 0.1, 0.5, 0.5, 0.9], [1, 2, 2]),
            0.1
        );
        let set = Backdoor {
            value: Some(-3.0),
            ..one
        };
        assert_eq!(set.value_on(&[0.0; 4], [1, 2, 2]), -3.0);
        let honest: Vec<&[f64]> = vec![&[1.0, 0.0], &[3.0, 2.0]];
        // μ = (2, 1), σ = (1, 1).
        let ipm = Attack::Ipm { epsilon: 0.5 }.crafted(&honest, 3, 1);
        assert_eq!(ipm, [-1.0, -0.5]);
        // ALIE: the gradients' μ − 1.5·σ is the changes' μ + 1.5·σ.
        let alie = Attack::Alie { z: Some(1.5) }.crafted(&honest, 3, 1);
        assert_eq!(alie, [3.5, 2.5]);
    }

    #[test]
    fn alie_z_follows_baruch() {
        // n = 50, f = 12 (their setting): s = 26 − 12 = 14, Φ⁻¹(36/50) = 0.5828…
        // (References: Python's statistics.NormalDist().inv_cdf.)
        assert!((alie_z(50, 12) - 0.582_841_507_271_216).abs() < 1e-9);
        assert!((inverse_normal_cdf(0.975) - 1.959_963_984_540_054).abs() < 3e-9);
        assert!((inverse_normal_cdf(0.001) + 3.090_232_306_167_813).abs() < 4e-9);
    }

    #[test]
    fn bad_settings_name_their_field() {
        let adversary: AdversarySpec =
            serde_yaml::from_str("{fraction: 0.2, attack: {kind: gaussian, std: -1}}").unwrap();
        assert_eq!(adversary.validate().unwrap_err().path, "attack.std");
        for (field, text) in [
            ("target", "{target: -1}"),
            ("trigger", "{target: 0, trigger: 0}"),
            ("poison", "{target: 0, poison: 0}"),
            ("boost", "{target: 0, boost: 0.5}"),
        ] {
            let attack = text.replace('{', "{kind: backdoor, ");
            let adversary: AdversarySpec =
                serde_yaml::from_str(&format!("{{fraction: 0.1, attack: {attack}}}")).unwrap();
            assert_eq!(
                adversary.validate().unwrap_err().path,
                format!("attack.{field}")
            );
        }
    }
}
