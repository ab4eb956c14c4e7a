//! Byzantine clients (`adversary:`): a seeded set of malicious clients and the catalogue of
//! attacks they mount ([`ATTACKS`]). An attack rewrites a malicious client's own change before
//! it leaves (sign flipping, Gaussian noise, scaling, a backdoor's boost), is crafted by the
//! server from the round's honest changes (ALIE, IPM: every malicious client of the round
//! sends the same vector, as the papers' colluding attackers do), or poisons the malicious
//! clients' training data (label flipping, a backdoor's trigger).
//!
//! This room draws only from the streams its callers pass (and, for a backdoor's poisoned
//! rows, from the run's seed tree) and never knows when a round happens.

mod alie;
mod backdoor;
mod catalogue;
mod gaussian;
mod ipm;
mod label_flip;
mod scaled;
mod sign_flip;

pub use alie::{alie_z, inverse_normal_cdf, AlieSpec};
pub use backdoor::BackdoorSpec;
pub use catalogue::{
    AttackSettings, AttackSpec, Attacks, Registration as AttackRegistration, ATTACKS,
};
pub use gaussian::GaussianSpec;
pub use ipm::IpmSpec;
pub use label_flip::LabelFlipSpec;
pub use scaled::ScaledSpec;
pub use sign_flip::SignFlipSpec;

use super::mean_of;
use crate::settings::FieldError;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// `adversary:`: a seeded set of malicious clients and what they do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdversarySpec {
    /// The share of the participants that are malicious, in (0, 1): ⌊fraction·N⌋ clients drawn
    /// from the run's `adversary` stream (`clients.csv` marks them).
    pub fraction: f64,
    /// What each malicious client sends instead of its honest update.
    pub attack: AttackSpec,
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
    pub attack: AttackSpec,
    pub malicious: Vec<u32>,
}

fn one() -> f64 {
    1.0
}

/// `field` must be a finite number.
fn finite(field: &str, v: f64) -> Result<(), FieldError> {
    if !v.is_finite() {
        return Err(FieldError::new(
            field.into(),
            format!("must be a finite number, got {v}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn attack(text: &str) -> AttackSpec {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn attacks_by_hand() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let mut d = vec![1.0, -2.0];
        attack("{kind: sign_flip, scale: 2.0}").own(&mut d, &mut rng);
        assert_eq!(d, [-2.0, 4.0]);
        attack("{kind: scaled, factor: 0.5}").own(&mut d, &mut rng);
        assert_eq!(d, [-1.0, 2.0]);
        let backdoor = attack("{kind: backdoor, target: 1}");
        assert!(
            backdoor.poisons_data() && !backdoor.is_own(),
            "no boost: honest updates"
        );
        let boosted = attack("{kind: backdoor, target: 1, boost: 3}");
        assert!(boosted.is_own());
        boosted.own(&mut d, &mut rng);
        assert_eq!(d, [-3.0, 6.0]);
        // A 2-pixel trigger on a 2×3×3 image: the bottom-right 2×2 of both channels.
        let b = boosted.settings::<BackdoorSpec>().unwrap().clone();
        let mut image = vec![0.0f32; 18];
        (BackdoorSpec { trigger: 2, ..b }).stamp(&mut image, [2, 3, 3], 1.0);
        let lit: Vec<usize> = (0..18).filter(|&i| image[i] == 1.0).collect();
        assert_eq!(lit, [4, 5, 7, 8, 13, 14, 16, 17]);
        // By default, the extreme farthest from the corners: two 1×2×2 images whose corner
        // pixel (a 1-pixel trigger) holds 0.2 and 0.4, values in [0.1, 0.9]: mean 0.3, so 0.9;
        // corners 0.8 and 0.9: 0.1.
        let one = BackdoorSpec { trigger: 1, ..b };
        assert_eq!(
            one.value_on(&[0.9, 0.5, 0.5, 0.2, 0.1, 0.5, 0.5, 0.4], [1, 2, 2]),
            0.9
        );
        assert_eq!(
            one.value_on(&[0.9, 0.5, 0.5, 0.8, 0.1, 0.5, 0.5, 0.9], [1, 2, 2]),
            0.1
        );
        let set = BackdoorSpec {
            value: Some(-3.0),
            ..one
        };
        assert_eq!(set.value_on(&[0.0; 4], [1, 2, 2]), -3.0);
        let honest: Vec<&[f64]> = vec![&[1.0, 0.0], &[3.0, 2.0]];
        // μ = (2, 1), σ = (1, 1).
        let ipm = attack("{kind: ipm, epsilon: 0.5}");
        assert!(ipm.is_crafted() && !ipm.is_own());
        assert_eq!(ipm.crafted(&honest, 3, 1), [-1.0, -0.5]);
        // ALIE: the gradients' μ − 1.5·σ is the changes' μ + 1.5·σ.
        let alie = attack("{kind: alie, z: 1.5}");
        assert_eq!(alie.crafted(&honest, 3, 1), [3.5, 2.5]);
        let flip = attack("{kind: label_flip}");
        assert!(flip.poisons_data() && !flip.is_own() && !flip.is_crafted());
    }

    #[test]
    fn the_catalogue_says_which_attacks_are_crafted() {
        use crate::settings::catalogue::names_declaring;
        assert_eq!(
            names_declaring::<Attacks>(|d| d.crafted, "and"),
            "`alie` and `ipm`"
        );
        assert_eq!(
            names_declaring::<Attacks>(|d| d.poisons_data, "and"),
            "`label_flip` and `backdoor`"
        );
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
