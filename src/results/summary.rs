//! One row per run: accuracy and fairness of the final evaluation on the clients' test data.

use crate::records::ModelKind;
use crate::records::Split;
use crate::records::{
    DivergenceRecord, EarlyEndRecord, EvalRecord, NoveltyRecord, Record, RoundPrivacy,
};
use std::collections::BTreeMap;

/// Fairness figures over per-client accuracies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fairness {
    /// Mean weighted by each client's number of test samples.
    pub weighted_mean: f64,
    /// The ⌊T/10⌋-th worst client accuracy (the worst one when T < 10): the FedEM paper's
    /// "bottom decile".
    pub bottom_decile: f64,
    /// 10th percentile with linear interpolation (numpy's default).
    pub p10: f64,
    /// Mean accuracy of the worst max(1, ⌊T/10⌋) clients.
    pub worst10_mean: f64,
    /// Standard deviation of the clients' accuracies (population, unweighted).
    pub std: f64,
    /// Jain's fairness index (Σa)² / (T·Σa²): 1 when every client is equally accurate.
    pub jain: f64,
}

impl Fairness {
    /// From `(accuracy, weight)` per client. NaN everywhere when empty.
    pub fn of(per_client: &[(f64, f64)]) -> Fairness {
        if per_client.is_empty() {
            return Fairness {
                weighted_mean: f64::NAN,
                bottom_decile: f64::NAN,
                p10: f64::NAN,
                worst10_mean: f64::NAN,
                std: f64::NAN,
                jain: f64::NAN,
            };
        }
        let total: f64 = per_client.iter().map(|&(_, w)| w).sum();
        let weighted_mean = per_client.iter().map(|&(a, w)| a * w).sum::<f64>() / total;
        let mut acc: Vec<f64> = per_client.iter().map(|&(a, _)| a).collect();
        acc.sort_by(f64::total_cmp);
        let k = (acc.len() / 10).max(1);
        let t = acc.len() as f64;
        let mean = acc.iter().sum::<f64>() / t;
        let sum_sq: f64 = acc.iter().map(|a| a * a).sum();
        Fairness {
            std: (acc.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / t).sqrt(),
            jain: if sum_sq > 0.0 {
                (mean * t).powi(2) / (t * sum_sq)
            } else {
                f64::NAN
            },
            weighted_mean,
            bottom_decile: acc[k - 1],
            p10: percentile(&acc, 10.0),
            worst10_mean: acc[..k].iter().sum::<f64>() / k as f64,
        }
    }
}

/// Linear-interpolation percentile of sorted values (numpy's default method).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let h = (sorted.len() - 1) as f64 * q / 100.0;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub run_id: String,
    pub name: String,
    pub algorithm: String,
    /// Which model was evaluated ([`ModelKind::as_str`]).
    pub model: String,
    /// Whether these are the clients held out of training.
    pub unseen: bool,
    pub seed: u64,
    pub clients: u32,
    pub final_round: u32,
    pub test: Fairness,
    /// Mean test loss weighted by test samples.
    pub test_loss_mean: f64,
    /// Simulated seconds until the weighted mean test accuracy first reached the scenario's
    /// `target_accuracy` (`None`: no target, or never reached).
    pub time_to_target_s: Option<f64>,
    /// Decentralized runs: the mean over rounds of the mixing matrix's spectral gap.
    pub spectral_gap_mean: Option<f64>,
    /// Decentralized runs: the consensus distance after the last round.
    pub consensus_distance_final: Option<f64>,
    pub sim_seconds: f64,
    /// Wall-clock seconds of the run: the only figure in the results that is not reproducible.
    pub wall_seconds: f64,
    /// Where the run's numbers first stopped being finite (`None`: they never did).
    pub divergence: Option<DivergenceRecord>,
    /// The run ended before its last round because no client would be online again.
    pub ended_early: Option<EarlyEndRecord>,
    /// Novel-sample detection at the last evaluation (data sets with novel rows, algorithms
    /// that score them).
    pub novelty: Option<super::NoveltyFigures>,
    /// With `privacy:`, σ and the ε the whole run spent (at the scenario's δ), as of its
    /// last round.
    pub privacy: Option<RoundPrivacy>,
    /// Runs with a server: the bytes of every round, up (updates, and secure aggregation's
    /// own) and down (models and the protocol's), as `rounds.parquet` counts them.
    pub bytes: Option<(u64, u64)>,
    /// Under a backdoor adversary, the attack's success rate at the last evaluation: the share
    /// of the clients' triggered test images of other labels classified as the target
    /// (pooled over clients).
    pub backdoor_success: Option<f64>,
}

/// What the summaries need of a run's records, gathered as they go past in event order, so a
/// run need not keep its records: per group of clients (training or held out) and evaluated
/// model, the last evaluated round's test results and every round's weighted test accuracy;
/// the first divergence; the gossip rounds' spectral gaps and last consensus distance; the
/// novelty scores of the last round that has any.
#[derive(Clone, Debug, Default)]
pub struct SummaryInputs {
    groups: BTreeMap<(bool, ModelKind), GroupInputs>,
    divergence: Option<DivergenceRecord>,
    ended_early: Option<EarlyEndRecord>,
    gossip: GossipInputs,
    novelty: Vec<NoveltyRecord>,
    /// The last round's privacy figures (runs with `privacy:`).
    privacy: Option<RoundPrivacy>,
    /// Σ bytes up and down over the server's rounds (`None`: no round records).
    bytes: Option<(u64, u64)>,
}

/// One group's evaluations (see [`SummaryInputs`]).
#[derive(Clone, Debug, Default)]
struct GroupInputs {
    /// The test evaluations of the latest round evaluated, in event order.
    last: Vec<EvalRecord>,
    /// Per round: Σ accuracy·n, Σ n and the latest time, over test evaluations.
    by_round: BTreeMap<u32, (f64, f64, f64)>,
    /// The latest round with backdoor evaluations: (round, Σ accuracy·n, Σ n).
    backdoor: Option<(u32, f64, f64)>,
}

#[derive(Clone, Debug, Default)]
struct GossipInputs {
    gap_sum: f64,
    rounds: usize,
    /// The last round's (round, consensus distance); a later record of the same round wins.
    last: Option<(u32, f64)>,
}

impl GroupInputs {
    fn see(&mut self, e: &EvalRecord) {
        if e.split == Split::Backdoor {
            let n = e.n_samples as f64;
            match &mut self.backdoor {
                Some((r, _, _)) if e.round < *r => {}
                Some((r, hits, total)) if e.round == *r => {
                    *hits += e.accuracy * n;
                    *total += n;
                }
                _ => self.backdoor = Some((e.round, e.accuracy * n, n)),
            }
            return;
        }
        if e.split != Split::Test {
            return;
        }
        match self.last.first().map(|l| l.round) {
            Some(r) if e.round < r => {}
            Some(r) if e.round == r => self.last.push(e.clone()),
            _ => self.last = vec![e.clone()],
        }
        let n = e.n_samples as f64;
        let entry = self.by_round.entry(e.round).or_insert((0.0, 0.0, 0.0));
        entry.0 += e.accuracy * n;
        entry.1 += n;
        entry.2 = entry.2.max(e.time.as_secs_f64());
    }

    /// The simulated time of the first evaluation whose weighted mean test accuracy is at
    /// least `target`.
    fn time_to(&self, target: f64) -> Option<f64> {
        self.by_round
            .values()
            .find(|(correct, n, _)| *n > 0.0 && correct / n >= target)
            .map(|&(_, _, t)| t)
    }
}

impl SummaryInputs {
    /// The inputs of all of `records`.
    pub fn of(records: &[Record]) -> SummaryInputs {
        let mut inputs = SummaryInputs::default();
        records.iter().for_each(|r| inputs.see(r));
        inputs
    }

    /// Takes in the next record.
    pub fn see(&mut self, r: &Record) {
        match r {
            Record::Eval(e) => self.groups.entry((e.unseen, e.model)).or_default().see(e),
            Record::Diverged(d) if self.divergence.is_none() => self.divergence = Some(d.clone()),
            Record::EndedEarly(e) => self.ended_early = Some(e.clone()),
            Record::Round(r) => {
                let (up, down) = self.bytes.get_or_insert((0, 0));
                *up += r.bytes_up;
                *down += r.bytes_down;
                if r.privacy.is_some() {
                    self.privacy = r.privacy;
                }
            }
            Record::Gossip(g) => {
                let gossip = &mut self.gossip;
                gossip.gap_sum += g.spectral_gap;
                gossip.rounds += 1;
                if gossip.last.is_none_or(|(round, _)| g.round >= round) {
                    gossip.last = Some((g.round, g.consensus_distance));
                }
            }
            Record::Novelty(n) => match self.novelty.first().map(|l| l.round) {
                Some(round) if n.round < round => {}
                Some(round) if n.round == round => self.novelty.push(n.clone()),
                _ => self.novelty = vec![n.clone()],
            },
            _ => {}
        }
    }

    /// Where the run's numbers first stopped being finite.
    pub fn divergence(&self) -> Option<&DivergenceRecord> {
        self.divergence.as_ref()
    }

    /// Why and when the run ended before its last round, if it did.
    pub fn ended_early(&self) -> Option<&EarlyEndRecord> {
        self.ended_early.as_ref()
    }

    /// A decentralized run's mean spectral gap over rounds and its last round's consensus
    /// distance (`None` without gossip records).
    fn gossip_figures(&self) -> (Option<f64>, Option<f64>) {
        let g = &self.gossip;
        let gap = (g.rounds > 0).then(|| g.gap_sum / g.rounds as f64);
        (gap, g.last.map(|(_, distance)| distance))
    }
}

/// Who a run was and how long it took: the fields of every summary row that are not figures.
#[derive(Clone, Copy, Debug)]
pub struct RunIdentity<'a> {
    pub run_id: &'a str,
    pub name: &'a str,
    pub algorithm: &'a str,
    pub seed: u64,
    pub sim_seconds: f64,
    pub wall_seconds: f64,
}

impl Summary {
    /// One summary per group of clients (training clients, then held-out ones) and evaluated
    /// model (in [`ModelKind`] order, so the most client-specific model comes last), each of the
    /// last evaluated round's test split.
    pub fn per_model(
        run: RunIdentity,
        inputs: &SummaryInputs,
        target_accuracy: Option<f64>,
    ) -> Vec<Summary> {
        let divergence = inputs.divergence.clone();
        if inputs.groups.is_empty() && divergence.is_some() {
            // Stopped before its first evaluation: one row that says so.
            let mut s = Summary::of_group(run, &GroupInputs::default());
            s.divergence = divergence;
            return vec![s];
        }
        inputs
            .groups
            .iter()
            .map(|(&(unseen, model), group)| {
                let mut s = Summary::of_group(run, group);
                s.model = model.as_str().into();
                s.unseen = unseen;
                s.divergence = divergence.clone();
                s.ended_early = inputs.ended_early.clone();
                s.novelty = super::NoveltyFigures::of_round(&inputs.novelty, unseen);
                s.time_to_target_s = target_accuracy.and_then(|t| group.time_to(t));
                s.privacy = inputs.privacy;
                s.bytes = inputs.bytes;
                (s.spectral_gap_mean, s.consensus_distance_final) = inputs.gossip_figures();
                s
            })
            .collect()
    }

    /// Summarises the last evaluated round's test split of all evaluation records.
    pub fn from_records(run: RunIdentity, records: &[Record]) -> Summary {
        let mut group = GroupInputs::default();
        for r in records {
            if let Record::Eval(e) = r {
                group.see(e);
            }
        }
        Summary::of_group(run, &group)
    }

    fn of_group(run: RunIdentity, group: &GroupInputs) -> Summary {
        let last = &group.last;
        let per_client: Vec<(f64, f64)> = last
            .iter()
            .map(|e| (e.accuracy, e.n_samples as f64))
            .collect();
        let n: f64 = last.iter().map(|e| e.n_samples as f64).sum();
        Summary {
            run_id: run.run_id.into(),
            name: run.name.into(),
            algorithm: run.algorithm.into(),
            model: last.first().map_or("none", |e| e.model.as_str()).into(),
            unseen: last.first().is_some_and(|e| e.unseen),
            seed: run.seed,
            clients: last.len() as u32,
            final_round: last.first().map_or(0, |e| e.round),
            test: Fairness::of(&per_client),
            test_loss_mean: last
                .iter()
                .map(|e| e.loss * e.n_samples as f64)
                .sum::<f64>()
                / n,
            time_to_target_s: None,
            spectral_gap_mean: None,
            consensus_distance_final: None,
            sim_seconds: run.sim_seconds,
            wall_seconds: run.wall_seconds,
            divergence: None,
            ended_early: None,
            novelty: None,
            privacy: None,
            bytes: None,
            backdoor_success: group
                .backdoor
                .filter(|&(_, _, n)| n > 0.0)
                .map(|(_, hits, n)| hits / n),
        }
    }
}

/// The simulated time of the first evaluation whose weighted mean test accuracy is at least
/// `target`, over all of `records`' test evaluations.
pub fn time_to_accuracy(records: &[Record], target: f64) -> Option<f64> {
    let mut group = GroupInputs::default();
    for r in records {
        if let Record::Eval(e) = r {
            group.see(e);
        }
    }
    group.time_to(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_by_hand() {
        // 20 clients with accuracies 0.00, 0.05, ..., 0.95, weights 1 except the best (weight 3).
        let per: Vec<(f64, f64)> = (0..20)
            .map(|i| (i as f64 * 0.05, if i == 19 { 3.0 } else { 1.0 }))
            .collect();
        let f = Fairness::of(&per);
        let plain: f64 = (0..20).map(|i| i as f64 * 0.05).sum();
        assert!((f.weighted_mean - (plain + 2.0 * 0.95) / 22.0).abs() < 1e-12);
        // ⌊20/10⌋ = 2nd worst.
        assert!((f.bottom_decile - 0.05).abs() < 1e-12);
        // numpy.percentile(arange(20)*0.05, 10) = 0.095.
        assert!((f.p10 - 0.095).abs() < 1e-12);
        assert!((f.worst10_mean - 0.025).abs() < 1e-12);
        // numpy.std(arange(20)*0.05) = 0.28831...; Jain = (9.5)² / (20 · 6.175).
        assert!((f.std - 0.288_314_064_866_769_9).abs() < 1e-12);
        assert!((f.jain - 9.5f64.powi(2) / (20.0 * 6.175)).abs() < 1e-12);
    }

    #[test]
    fn time_to_accuracy_by_hand() {
        use crate::sim::SimTime;
        let eval = |round: u32, secs: u64, accuracy: f64, n: usize| {
            Record::Eval(EvalRecord {
                round,
                time: SimTime(secs * 1_000_000),
                client: 0,
                split: Split::Test,
                model: ModelKind::Global,
                n_samples: n,
                loss: 0.0,
                accuracy,
                sampled: true,
                cluster: None,
                unseen: false,
            })
        };
        // Round 2's weighted mean is (0.9·1 + 0.6·3)/4 = 0.675; round 3's 0.75.
        let records = [
            eval(1, 10, 0.5, 1),
            eval(1, 10, 0.5, 3),
            eval(2, 20, 0.9, 1),
            eval(2, 20, 0.6, 3),
            eval(3, 30, 0.75, 4),
        ];
        assert_eq!(time_to_accuracy(&records, 0.7), Some(30.0));
        assert_eq!(time_to_accuracy(&records, 0.6), Some(20.0));
        assert_eq!(time_to_accuracy(&records, 0.8), None);
    }

    #[test]
    fn few_clients_use_the_worst() {
        let f = Fairness::of(&[(0.9, 1.0), (0.4, 1.0), (0.7, 1.0)]);
        assert_eq!(f.bottom_decile, 0.4);
        assert_eq!(f.worst10_mean, 0.4);
    }
}
