//! Which rounds are evaluated, and on which clients: all of them (the default), or a seeded
//! sample, the same one every evaluation (`sample: fixed`) or a fresh one each time (`fresh`).
//!
//! A sample is a function of (run seed, round) alone, drawn from the run's
//! `evaluation_clients` stream; this room draws, it sends nothing.

use crate::sim::{Entity, SeedTree};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::{Arc, Mutex};

/// How many clients an evaluation tests: `all`, a count, or a fraction of the population.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum EvalClients {
    #[default]
    All,
    /// `count` clients, 1 ≤ `count` ≤ T (checked when the scenario is validated).
    Count(usize),
    /// `max(1, ⌊fraction · T⌋)` of the T clients, with `fraction` in (0, 1].
    Fraction(f64),
}

impl EvalClients {
    pub fn is_all(&self) -> bool {
        *self == EvalClients::All
    }

    /// How many of `total` clients are evaluated.
    pub fn count(&self, total: usize) -> usize {
        match *self {
            EvalClients::All => total,
            EvalClients::Count(k) => k.min(total),
            EvalClients::Fraction(f) => ((f * total as f64).floor() as usize).clamp(1, total),
        }
    }

    /// The problem with these settings, if any.
    pub fn check(&self) -> Result<(), String> {
        match *self {
            EvalClients::Count(0) => Err("a count of clients must be at least 1".into()),
            EvalClients::Fraction(f) if !(f > 0.0 && f <= 1.0) => Err(format!(
                "a fraction of the clients must be in (0, 1], got {f}"
            )),
            _ => Ok(()),
        }
    }
}

const EVAL_CLIENTS_ALLOWED: &str =
    "`all`, a number of clients (an integer ≥ 1) or a fraction of them in (0, 1]";

impl Serialize for EvalClients {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            EvalClients::All => s.serialize_str("all"),
            EvalClients::Count(k) => s.serialize_u64(k as u64),
            EvalClients::Fraction(f) => s.serialize_f64(f),
        }
    }
}

impl<'de> Deserialize<'de> for EvalClients {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = EvalClients;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(EVAL_CLIENTS_ALLOWED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EvalClients, E> {
                match v {
                    "all" => Ok(EvalClients::All),
                    _ => Err(E::custom(format!(
                        "expected {EVAL_CLIENTS_ALLOWED}, got `{v}`"
                    ))),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<EvalClients, E> {
                Ok(EvalClients::Count(v as usize))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<EvalClients, E> {
                usize::try_from(v)
                    .map(EvalClients::Count)
                    .map_err(|_| E::custom(format!("expected {EVAL_CLIENTS_ALLOWED}, got {v}")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<EvalClients, E> {
                Ok(EvalClients::Fraction(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a sample of clients is drawn once for the whole run or anew at each evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalSample {
    /// The same clients at every evaluation: curves over rounds follow the same population.
    #[default]
    Fixed,
    /// A fresh draw at every evaluation.
    Fresh,
}

/// When and on whom a run evaluates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvaluationPlan {
    /// Evaluate after every this many rounds (and always after the last one).
    pub every: u32,
    pub clients: EvalClients,
    pub sample: EvalSample,
}

impl EvaluationPlan {
    /// Every client after every `every` rounds.
    pub fn all_every(every: u32) -> EvaluationPlan {
        EvaluationPlan {
            every,
            clients: EvalClients::All,
            sample: EvalSample::Fixed,
        }
    }

    /// Whether the run evaluates after `round` of `rounds`.
    pub fn is_due(&self, round: u32, rounds: u32) -> bool {
        round % self.every == 0 || round == rounds
    }
}

/// The clients an evaluation tests, drawn lazily and kept for the latest round asked about
/// (shared by peers, which ask one at a time).
pub(super) struct EvaluatedClients {
    plan: EvaluationPlan,
    total: usize,
    seeds: SeedTree,
    latest: Mutex<Option<(u32, Arc<Vec<u32>>)>>,
}

impl EvaluatedClients {
    pub fn new(plan: EvaluationPlan, total: usize, seeds: SeedTree) -> Self {
        EvaluatedClients {
            plan,
            total,
            seeds,
            latest: Mutex::new(None),
        }
    }

    /// Whether the run evaluates after `round` of `rounds`.
    pub fn is_due(&self, round: u32, rounds: u32) -> bool {
        self.plan.is_due(round, rounds)
    }

    /// The clients evaluated after `round`, sorted; `None` means all of them.
    pub fn at(&self, round: u32) -> Option<Arc<Vec<u32>>> {
        if self.plan.clients.is_all() {
            return None;
        }
        let index = match self.plan.sample {
            EvalSample::Fixed => 0,
            EvalSample::Fresh => round,
        };
        let mut latest = self.latest.lock().expect("no panic while drawing");
        if let Some((i, chosen)) = &*latest {
            if *i == index {
                return Some(chosen.clone());
            }
        }
        let chosen = Arc::new(self.draw(index));
        *latest = Some((index, chosen.clone()));
        Some(chosen)
    }

    /// Whether `client` is evaluated after `round`.
    pub fn includes(&self, round: u32, client: u32) -> bool {
        self.at(round)
            .is_none_or(|chosen| chosen.binary_search(&client).is_ok())
    }

    fn draw(&self, index: u32) -> Vec<u32> {
        let count = self.plan.clients.count(self.total);
        let mut rng = self
            .seeds
            .rng(Entity::Run, "evaluation_clients", index as u64);
        let mut chosen: Vec<u32> = rand::seq::index::sample(&mut rng, self.total, count)
            .into_iter()
            .map(|i| i as u32)
            .collect();
        chosen.sort_unstable();
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(clients: EvalClients, sample: EvalSample) -> EvaluationPlan {
        EvaluationPlan {
            every: 5,
            clients,
            sample,
        }
    }

    #[test]
    fn counts_by_hand() {
        assert_eq!(EvalClients::All.count(300), 300);
        assert_eq!(EvalClients::Count(40).count(300), 40);
        assert_eq!(EvalClients::Fraction(0.1).count(305), 30);
        assert_eq!(EvalClients::Fraction(0.001).count(300), 1);
        assert!(EvalClients::Count(0).check().is_err());
        assert!(EvalClients::Fraction(1.5).check().is_err());
        assert!(EvalClients::Fraction(1.0).check().is_ok());
        let p = plan(EvalClients::All, EvalSample::Fixed);
        assert!(p.is_due(5, 12) && p.is_due(12, 12) && !p.is_due(6, 12));
    }

    #[test]
    fn fixed_samples_repeat_and_fresh_ones_change() {
        let seeds = SeedTree::new(7);
        let all = EvaluatedClients::new(plan(EvalClients::All, EvalSample::Fixed), 100, seeds);
        assert!(all.at(3).is_none() && all.includes(3, 99));
        let fixed =
            EvaluatedClients::new(plan(EvalClients::Count(10), EvalSample::Fixed), 100, seeds);
        let first = fixed.at(5).unwrap();
        assert_eq!(first.len(), 10);
        assert!(first.windows(2).all(|w| w[0] < w[1]) && first.iter().all(|&c| c < 100));
        assert_eq!(*fixed.at(10).unwrap(), *first);
        assert!(fixed.includes(10, first[3]));
        let fresh =
            EvaluatedClients::new(plan(EvalClients::Count(10), EvalSample::Fresh), 100, seeds);
        let (a, b) = (fresh.at(5).unwrap(), fresh.at(10).unwrap());
        assert_ne!(*a, *b);
        // A function of (seed, round) alone: asking again, or in another order, gives the same.
        let again =
            EvaluatedClients::new(plan(EvalClients::Count(10), EvalSample::Fresh), 100, seeds);
        assert_eq!(*again.at(10).unwrap(), *b);
        assert_eq!(*again.at(5).unwrap(), *a);
    }

    #[test]
    fn reads_all_counts_and_fractions() {
        let read = |s: &str| serde_yaml::from_str::<EvalClients>(s);
        assert_eq!(read("all").unwrap(), EvalClients::All);
        assert_eq!(read("1000").unwrap(), EvalClients::Count(1000));
        assert_eq!(read("0.05").unwrap(), EvalClients::Fraction(0.05));
        let e = read("most").unwrap_err().to_string();
        assert!(e.contains("`all`") && e.contains("most"), "{e}");
        assert!(read("-3").is_err());
        assert_eq!(
            serde_yaml::to_string(&EvalClients::Count(7)).unwrap(),
            "7\n"
        );
    }
}
