//! Which rounds are evaluated, and on which clients: all of them (the default), or a seeded
//! sample, the same one every evaluation (`sample: fixed`) or a fresh one each time (`fresh`).
//!
//! A sample is a function of (run seed, round) alone, drawn from the run's
//! `evaluation_clients` stream; this room draws, it sends nothing.

use crate::algorithms::{ClientReport, Evaluation};
use crate::records::{
    ClientModelsRecord, EvalRecord, ExtraRecord, MixtureRecord, NoveltyRecord, Record,
};
use crate::settings::{EvalSample, EvaluationPlan};
use crate::sim::{Entity, SeedTree, SimTime};
use std::sync::{Arc, Mutex};

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

/// Whose evaluation it is: client (or peer) `client`'s after `round`, at `time`; whether it
/// trained in that round (`sampled`) and whether it is held out of training (`unseen`).
pub(super) struct EvalContext {
    pub(super) round: u32,
    pub(super) time: SimTime,
    pub(super) client: u32,
    pub(super) sampled: bool,
    pub(super) unseen: bool,
}

/// The records of one client's evaluation: what the algorithm reports (mixture weights,
/// extras), then one row per (model, split).
pub(super) fn evaluation_records(
    EvalContext {
        round,
        time: now,
        client,
        sampled,
        unseen,
    }: EvalContext,
    results: Vec<Evaluation>,
    report: ClientReport,
) -> Vec<Record> {
    let ClientReport {
        mixture,
        cluster,
        extras,
        novelty,
        models,
        // Sent to the server by the client (`evaluation.novelty`).
        novelty_share: _,
    } = report;
    let models = (!models.is_empty()).then_some({
        Record::ClientModels(ClientModelsRecord {
            round,
            client,
            models,
        })
    });
    let novelty = novelty.map(|scores| {
        Record::Novelty(NoveltyRecord {
            round,
            client,
            unseen,
            scores,
        })
    });
    let weights = mixture.map(|weights| {
        Record::Mixture(MixtureRecord {
            round,
            client,
            unseen,
            weights,
        })
    });
    let extras = extras.into_iter().map(|(name, values)| {
        Record::Extra(ExtraRecord {
            round,
            client,
            unseen,
            name,
            values,
        })
    });
    let rows = results.into_iter().map(|e| {
        Record::Eval(EvalRecord {
            round,
            time: now,
            client,
            split: e.split,
            model: e.model,
            n_samples: e.stats.n,
            loss: e.stats.loss,
            accuracy: e.stats.accuracy,
            sampled,
            cluster,
            unseen,
        })
    });
    weights
        .into_iter()
        .chain(extras)
        .chain(novelty)
        .chain(models)
        .chain(rows)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::EvalClients;

    fn plan(clients: EvalClients, sample: EvalSample) -> EvaluationPlan {
        EvaluationPlan {
            every: 5,
            clients,
            sample,
            splits: crate::settings::EvaluatedSplits::ALL,
            novelty: crate::settings::NoveltyScoring::Own,
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
