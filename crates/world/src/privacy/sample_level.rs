//! Sample-level differential privacy (`privacy: {mechanism: dp_sgd}`): every client trains
//! with DP-SGD ([`crate::models::DpSgd`]: Poisson-sampled minibatches, each record's gradient
//! clipped to C, Gaussian noise σ·C on each step's sum), so whatever a client sends is private
//! for each of its records, against anyone who sees it (the server included).
//!
//! Neighbouring data sets add or remove one record of one client. A step of a client's local
//! run is then the Poisson-subsampled Gaussian mechanism at its rate q = 1/⌈n/B⌉ (n its
//! training rows, B the batch size); the client's records spend the composition of every step
//! whose result it has sent: each vector it sends is the outcome of one local run (FedEM's M
//! components: M runs a round). The sizes n are treated as public, as Opacus does. No
//! amplification by the sampling of clients is claimed, so the ε reported is that of a client
//! whatever the server does; it is the largest over the clients so far ([`RecordAccountant`]).
//! A `target_epsilon` is met by the most any record can spend: a client drawn in every round
//! ([`SampleLevelPrivacy::worst_case_epsilon`], [`resolve`]).
//!
//! This room does arithmetic only: it is told what each client sent and knows nothing of
//! rounds, streams or tensors.

use super::accounting::{calibrate, RdpAccountant, SubsampledGaussian, Subsampling};
use super::PrivacySpec;
use crate::models::{DpSgd, LocalPlan};
use crate::settings::FieldError;
use std::collections::{BTreeMap, BTreeSet};

/// Sample-level DP as a run applies it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SampleLevelPrivacy {
    pub dp_sgd: DpSgd,
    pub delta: f64,
}

impl SampleLevelPrivacy {
    /// The most a record can spend over `rounds` rounds: that of a client drawn in every
    /// round, sending the outcome of `runs` local runs each time (FedEM: one per component),
    /// the largest over the training-set sizes `sizes` (each size n: rate 1/⌈n/B⌉, `runs` ×
    /// the plan's steps over n a round). 0 without sizes.
    pub fn worst_case_epsilon(
        &self,
        plan: &LocalPlan,
        sizes: &[usize],
        rounds: u64,
        runs: u64,
    ) -> f64 {
        // The rate and the steps depend on n through ⌈n/B⌉ only: one ε per distinct pair.
        let cases: BTreeSet<(u64, u64)> = (sizes.iter())
            .filter(|&&n| n > 0)
            .map(|&n| {
                (
                    plan.dp_sampling_rate(n).to_bits(),
                    rounds * runs * plan.steps(n),
                )
            })
            .collect();
        let mut accountant = RecordAccountant::new(*self);
        (cases.into_iter())
            .map(|(rate, steps)| accountant.epsilon(f64::from_bits(rate), steps))
            .fold(0.0, f64::max)
    }
}

/// `privacy: {mechanism: dp_sgd}` for a run of `rounds` rounds over clients of training-set
/// sizes `sizes`, each update the outcome of `runs` local runs: σ as given, or the largest
/// that keeps [`SampleLevelPrivacy::worst_case_epsilon`] at most `target_epsilon` (within
/// 1 %). `None` for the client-level mechanisms.
pub fn resolve(
    spec: &PrivacySpec,
    plan: &LocalPlan,
    sizes: &[usize],
    rounds: u64,
    runs: u64,
) -> Result<Option<SampleLevelPrivacy>, FieldError> {
    let Some(mut privacy) = spec.sample_level() else {
        return Ok(None);
    };
    if let Some(target) = spec.target_epsilon {
        let epsilon = |sigma| {
            let mut at = privacy;
            at.dp_sgd.noise_multiplier = sigma;
            at.worst_case_epsilon(plan, sizes, rounds, runs)
        };
        privacy.dp_sgd.noise_multiplier = calibrate(epsilon, target)
            .map_err(|e| FieldError::new("target_epsilon".into(), e.to_string()))?
            .sigma;
    }
    Ok(Some(privacy))
}

/// What each client's records have spent, and the most any client's have.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RecordAccountant {
    privacy: SampleLevelPrivacy,
    orders: Vec<f64>,
    /// One step's RDP at each order, by sampling rate (its bits).
    one_step: BTreeMap<u64, Vec<f64>>,
    /// Each client's DP-SGD steps sent so far, with its rate.
    steps: BTreeMap<u32, (f64, u64)>,
    /// The largest ε of any client so far.
    worst: f64,
}

impl RecordAccountant {
    /// Nothing spent yet.
    pub fn new(privacy: SampleLevelPrivacy) -> Self {
        Self {
            privacy,
            orders: RdpAccountant::default().orders().to_vec(),
            one_step: BTreeMap::new(),
            steps: BTreeMap::new(),
            worst: 0.0,
        }
    }

    /// `client`, whose runs sample each of its records with probability `rate` a step, has
    /// sent the outcome of `steps` more DP-SGD steps; its ε (and perhaps the largest) moves.
    pub fn add(&mut self, client: u32, rate: f64, steps: u64) {
        let sent = self.steps.entry(client).or_insert((rate, 0));
        assert_eq!(
            sent.0, rate,
            "a client's sampling rate is fixed by its rows"
        );
        sent.1 += steps;
        let total = sent.1;
        let epsilon = self.epsilon(rate, total);
        self.worst = self.worst.max(epsilon);
    }

    /// ε at the run's δ of `steps` DP-SGD steps at sampling rate `rate`.
    pub fn epsilon(&mut self, rate: f64, steps: u64) -> f64 {
        let noise_multiplier = self.privacy.dp_sgd.noise_multiplier;
        let orders = &self.orders;
        let one_step = self.one_step.entry(rate.to_bits()).or_insert_with(|| {
            SubsampledGaussian {
                sampling: Subsampling::Poisson { rate },
                noise_multiplier,
            }
            .rdp(orders)
        });
        let mut accountant = RdpAccountant::new(orders.clone());
        accountant.compose_rdp(one_step, steps);
        accountant.epsilon(self.privacy.delta).0
    }

    /// The largest ε any client's records have spent (0 before anyone has sent anything).
    pub fn worst_epsilon(&self) -> f64 {
        self.worst
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::epsilon;

    fn accountant(noise_multiplier: f64) -> RecordAccountant {
        RecordAccountant::new(SampleLevelPrivacy {
            dp_sgd: DpSgd {
                clip: 1.0,
                noise_multiplier,
            },
            delta: 1e-5,
        })
    }

    /// A client's ε is the Poisson accountant's for all the steps it sent; the run's is the
    /// largest over clients, whichever way they arrive.
    #[test]
    fn each_client_composes_its_own_steps_and_the_worst_is_reported() {
        let mut a = accountant(1.0);
        assert_eq!(a.worst_epsilon(), 0.0);
        a.add(3, 0.1, 20);
        let poisson = |rate, steps| epsilon(Subsampling::Poisson { rate }, 1.0, steps, 1e-5);
        assert_eq!(a.worst_epsilon(), poisson(0.1, 20));
        a.add(7, 0.5, 10);
        assert_eq!(a.worst_epsilon(), poisson(0.5, 10));
        a.add(3, 0.1, 20);
        // Client 3 now has 40 steps at 0.1: less than client 7's 10 at 0.5.
        assert!(poisson(0.1, 40) < poisson(0.5, 10));
        assert_eq!(a.worst_epsilon(), poisson(0.5, 10));
        a.add(3, 0.1, 400);
        assert_eq!(a.worst_epsilon(), poisson(0.1, 440));
        assert_eq!(accountant(0.0).epsilon(0.1, 1), f64::INFINITY);
    }

    fn plan() -> LocalPlan {
        LocalPlan {
            work: crate::models::LocalWork::Epochs(1),
            batch_size: 10,
            momentum: 0.0,
            weight_decay: 0.0,
            dp_sgd: None,
        }
    }

    /// Sizes 5, 25 and 30 with B = 10 over 4 rounds, 3 runs an update: n = 5 is one batch
    /// (q = 1, 12 steps), n = 25 and 30 three (q = 1/3, 36 steps); the worst is the larger ε.
    #[test]
    fn the_worst_case_is_a_client_drawn_every_round() {
        let privacy = accountant(2.0).privacy;
        let poisson = |rate, steps| epsilon(Subsampling::Poisson { rate }, 2.0, steps, 1e-5);
        let worst = poisson(1.0, 12).max(poisson(1.0 / 3.0, 36));
        assert_eq!(
            privacy.worst_case_epsilon(&plan(), &[5, 25, 30, 0], 4, 3),
            worst
        );
        assert_eq!(privacy.worst_case_epsilon(&plan(), &[], 4, 3), 0.0);
    }

    /// A target ε is met by that worst case, within 1 % and never above.
    #[test]
    fn a_target_epsilon_is_met_by_the_worst_case() {
        let spec: PrivacySpec =
            serde_yaml::from_str("{mechanism: dp_sgd, clip: 1, target_epsilon: 3}").unwrap();
        let solved = resolve(&spec, &plan(), &[25, 40, 120], 20, 2)
            .unwrap()
            .unwrap();
        let sigma = solved.dp_sgd.noise_multiplier;
        assert!(sigma > 0.0);
        let spent = solved.worst_case_epsilon(&plan(), &[25, 40, 120], 20, 2);
        assert!((0.99 * 3.0..=3.0).contains(&spent), "σ {sigma}: ε {spent}");
        let given: PrivacySpec =
            serde_yaml::from_str("{mechanism: dp_sgd, clip: 1, noise_multiplier: 1.5}").unwrap();
        let kept = resolve(&given, &plan(), &[25], 20, 2).unwrap().unwrap();
        assert_eq!(kept.dp_sgd.noise_multiplier, 1.5);
        let central: PrivacySpec = serde_yaml::from_str("{clip: 1, target_epsilon: 3}").unwrap();
        assert_eq!(resolve(&central, &plan(), &[25], 20, 2).unwrap(), None);
    }
}
