//! The context every job of a run shares, and what a job does besides the algorithm's own work:
//! the upload pipeline (attack, clipping and noise, compression), robust rounds, novelty
//! scoring and spilling. It runs on the trainer pool; it sends no message.

use super::messages::{PooledNovelty, PrivacyNote};
use crate::algorithms::Tested;
use crate::algorithms::{Algorithm, Training};
use crate::compression::{compress_changes, CompressorSpec};
use crate::data::{ClientRows, FederatedData};
use crate::io::{Floats, SpillStore, Stored};
use crate::models::{Architecture, Placement, Predictor};
use crate::plan::Setup;
use crate::privacy::ClientLevelPrivacy;
use crate::records::{ModelKind, NoveltyScores, Split};
use crate::robust::{Adversaries, RobustRuleSpec};
use crate::sampling::ReportedLoss;
use crate::settings::{EvaluatedSplits, NoveltyScoring, OnDivergence};
use crate::system::payload_bytes;
use rand_chacha::ChaCha20Rng;
use std::sync::Arc;

/// Immutable context shared by all jobs of a run.
pub(crate) struct JobContext<A: Algorithm> {
    pub(super) algorithm: A,
    pub(super) arch: Architecture,
    pub(super) training: Training,
    /// Where cohorts train: `training.device` resolved on this machine.
    pub(super) placement: Placement,
    pub(super) data: Arc<FederatedData>,
    pub(super) on_divergence: OnDivergence,
    /// Where idle values wait (`training.spill`), if anywhere.
    pub(super) spill: Option<Arc<SpillStore>>,
    /// Client-level privacy (`privacy:`): clients clip what they send, the server noises it.
    pub(super) privacy: Option<ClientLevelPrivacy>,
    /// How clients compress what they send (`compression.uplink`).
    pub(super) uplink: Option<CompressorSpec>,
    /// Which clients are malicious, and their attack (`adversary:`).
    pub(super) adversary: Option<Adversaries>,
    /// The server's robust rule (`aggregation:`).
    pub(super) robust: Option<RobustRuleSpec>,
    /// The splits an evaluation measures (`evaluation.splits`).
    pub(super) evaluated: EvaluatedSplits,
    /// Clients report the loss of the model they start from (`sampling.strategy` reads it).
    pub(super) reports_loss: bool,
    /// Clients copy their own models into their evaluation reports
    /// ([`RunSpec::saves_client_models`]).
    pub(super) saves_client_models: bool,
    /// How rows are scored for novelty (`evaluation.novelty`; `own` where no client has
    /// novel rows, so that nothing is gathered).
    pub(super) novelty: NoveltyScoring,
    /// Clients' momentum buffers kept on the device between rounds (cohorts only).
    pub(super) resident_momenta: super::resident::ResidentMomenta,
    /// What the run may keep on the device, momentum buffers and updates together
    /// (`training.device_state_gib`).
    pub(super) device_budget: Arc<super::resident::DeviceBudget>,
}

impl<A: Algorithm> JobContext<A> {
    /// The context of the jobs of `setup`'s run: `algorithm` training its model on its data,
    /// with a spill file if `training.spill` asks for one, and its client-level privacy.
    pub(super) fn new(algorithm: A, setup: &Setup) -> Self {
        let (spec, data) = (&setup.spec, setup.data.clone());
        let spill = (spec
            .training
            .spill
            .store_settings(crate::io::machine_memory().unwrap_or(0.0)))
        .map(|(min_floats, budget)| SpillStore::new(min_floats, budget));
        // The pooled scores gather every evaluated client's share, so only where some client
        // has novel rows to score.
        let novelty = match spec.evaluation.novelty {
            pooled if !pooled.is_own() && data.has_novel_rows() => pooled,
            _ => NoveltyScoring::Own,
        };
        let device_budget = super::resident::DeviceBudget::new(spec.training.device_state_bytes);
        JobContext {
            algorithm,
            arch: setup.arch.clone(),
            training: spec.training.clone(),
            placement: setup.placement.clone(),
            data,
            on_divergence: spec.on_divergence,
            spill,
            privacy: setup.client_privacy.clone(),
            uplink: spec.compression.as_ref().and_then(|c| c.uplink.clone()),
            adversary: (spec.adversary.as_ref()).map(|a| Adversaries {
                attack: a.attack.clone(),
                malicious: setup.malicious.clone(),
            }),
            robust: spec.aggregation.clone(),
            evaluated: spec.evaluation.splits,
            reports_loss: setup.reports_losses,
            saves_client_models: spec.saves_client_models,
            novelty,
            resident_momenta: super::resident::ResidentMomenta::new(device_budget.clone()),
            device_budget,
        }
    }

    /// Client `client`'s test and novel rows of round `round`'s evaluation, each scored by
    /// what every evaluated client shared: the highest confidence maxᵧ p(y | x) of their
    /// classifiers, or the algorithm's score with their mean mixture weights
    /// (`evaluation.novelty`); `None` where the data set has no novel rows. Runs on the pool.
    pub(super) fn novelty_pooled(
        &self,
        client: u32,
        round: u32,
        pooled: &PooledNovelty<A::Global>,
    ) -> Option<NoveltyScores> {
        let rows = self.data.rows_for(&[client]);
        let (data, index) = (rows.data(), rows.index(0));
        if data.novel.is_empty() {
            return None;
        }
        let (test, novel) = (data.view(index, Split::Test), data.novel_view(index));
        match pooled {
            PooledNovelty::Classifiers(models) => {
                let models: Vec<&[f32]> = models.iter().map(Vec::as_slice).collect();
                let highest = |view| crate::models::highest_confidence(&self.arch, &models, view);
                Some(NoveltyScores {
                    typical: highest(test),
                    novel: highest(novel),
                })
            }
            PooledNovelty::MeanWeights { weights, global } => {
                // Validation has checked that the algorithm has mixture weights.
                let mixture = A::MIXTURE_WEIGHTS.expect("the algorithm has mixture weights");
                let state = (mixture.state)(weights.clone());
                let ctx = self.local((&rows, 0), client, round, self.training.lr_at(round));
                let score = |view| self.algorithm.typicality(&ctx, global, &state, view);
                score(test)
                    .zip(score(novel))
                    .map(|(typical, novel)| NoveltyScores { typical, novel })
            }
        }
    }

    /// Where the run saves its clients' own models, copies of those in `tested` (every kind but
    /// the server's model, whose parameters are in the final models; a mixture's weights are
    /// in the report already), for the client's report.
    pub(super) fn own_models(&self, tested: &[Tested<'_>]) -> Vec<(ModelKind, Vec<Vec<f32>>)> {
        if !self.saves_client_models {
            return Vec::new();
        }
        tested
            .iter()
            .filter(|t| t.kind != ModelKind::Global)
            .filter_map(|t| match &t.model {
                Predictor::Params(params) => Some((t.kind, vec![params.to_vec()])),
                Predictor::Mixture { .. } => None,
            })
            .collect()
    }

    /// Where clients report their loss, the loss of the model `client`'s job started from
    /// (the global vector `update` moves from) on its training rows; `None` where they do not.
    /// Runs on the pool.
    pub(super) fn starting_loss(
        &self,
        client: u32,
        global: &A::Global,
        update: &mut A::Update,
    ) -> Option<ReportedLoss> {
        let hooks = A::PRIVATE_UPDATES.filter(|_| self.reports_loss)?;
        let sent = (hooks.sent)(global, update);
        let [(base, _)] = &sent[..] else {
            panic!("a loss-guided strategy runs only with algorithms that send one vector");
        };
        let rows = self.data.rows_for(&[client]);
        let view = rows.data().view(rows.index(0), Split::Train);
        let losses = crate::models::sample_losses(&self.arch, &[base], view);
        Some(ReportedLoss::of(&losses[0]))
    }

    /// Whether the server rewrites a round's updates before aggregating them
    /// ([`JobContext::robust_round`]).
    pub(super) fn rewrites_rounds(&self) -> bool {
        self.robust.is_some() || (self.adversary.as_ref()).is_some_and(|a| a.attack.is_crafted())
    }

    /// Whether `client` is one of the run's malicious clients.
    pub(super) fn is_malicious(&self, client: u32) -> bool {
        (self.adversary.as_ref()).is_some_and(|a| a.malicious.binary_search(&client).is_ok())
    }

    /// Under a crafted attack or a robust rule, the round's fresh `updates` (in client order)
    /// rewritten so that the algorithm's own aggregation makes the move they call for: the
    /// malicious clients' vectors replaced by the attack crafted from the honest ones (ALIE,
    /// IPM), then every update's change replaced by the robust rule's (one per sent vector;
    /// FedEM: per component) with every client weighing the same. The algorithm's aggregation
    /// then moves the global model as it would by a round of clients that all sent the rule's
    /// change. Without either, nothing changes.
    /// `last` holds the rule's change of the previous round, per vector (empty before the
    /// first), and is set to this round's.
    pub(super) fn robust_round(
        &self,
        global: &A::Global,
        updates: &mut [(u32, A::Update)],
        last: &mut Vec<Vec<f64>>,
    ) {
        let crafted = (self.adversary.as_ref()).filter(|a| a.attack.is_crafted());
        let (Some(hooks), true) = (
            A::PRIVATE_UPDATES,
            crafted.is_some() || self.robust.is_some(),
        ) else {
            return;
        };
        let n = updates.len();
        // changes[i][j]: client i's change of sent vector j, in f64.
        let mut changes: Vec<Vec<Vec<f64>>> = (updates.iter_mut())
            .map(|(_, u)| {
                (hooks.sent)(global, u)
                    .iter()
                    .map(|(b, s)| crate::models::change(b, s))
                    .collect()
            })
            .collect();
        let vectors = changes.first().map_or(0, Vec::len);
        if let Some(adversary) = crafted {
            let bad: Vec<bool> = updates.iter().map(|(c, _)| self.is_malicious(*c)).collect();
            let malicious = bad.iter().filter(|&&b| b).count();
            if malicious > 0 && malicious < n {
                for j in 0..vectors {
                    let honest: Vec<&[f64]> = (changes.iter().zip(&bad))
                        .filter(|(_, &b)| !b)
                        .map(|(c, _)| &c[j][..])
                        .collect();
                    let lie = adversary.attack.crafted(&honest, n, malicious);
                    for (c, _) in changes.iter_mut().zip(&bad).filter(|(_, &b)| b) {
                        c[j].clone_from(&lie);
                    }
                }
            }
        }
        if let Some(rule) = &self.robust {
            last.resize(vectors, Vec::new());
            for (j, previous) in last.iter_mut().enumerate() {
                let round: Vec<&[f64]> = changes.iter().map(|c| &c[j][..]).collect();
                *previous = rule.combine(&round, previous);
                changes.iter_mut().for_each(|c| c[j].clone_from(previous));
            }
        }
        for ((_, u), change) in updates.iter_mut().zip(&changes) {
            for ((base, sent), c) in (hooks.sent)(global, u).into_iter().zip(change) {
                for ((s, &b), d) in sent.iter_mut().zip(base).zip(c) {
                    *s = (b as f64 + d) as f32;
                }
            }
            if self.robust.is_some() {
                (hooks.equal_weight)(&self.algorithm, u);
            }
        }
    }

    /// Whether anything between a client's training and the server's aggregation reads or
    /// changes its update's vectors on the host: a step of [`JobContext::prepare_upload`]
    /// (an attack, client-level privacy, compression), a reported loss
    /// ([`JobContext::starting_loss`]) or a rewritten round ([`JobContext::rewrites_rounds`]).
    /// Where none does, an update may stay on the device for the server to sum there; a step
    /// added to the upload is listed here too.
    pub(super) fn upload_reads_update(&self) -> bool {
        self.adversary.is_some()
            || self.privacy.is_some()
            || self.uplink.is_some()
            || self.reports_loss
            || self.rewrites_rounds()
    }

    /// A client's fresh update as it leaves the client, and the bytes it puts on the uplink
    /// (`update_len` floats of 4 bytes each, or what compression makes of them). In order:
    /// - a malicious client's own attack (`attack`: its `attack` stream of the job; crafted
    ///   attacks are the server's, [`JobContext::robust_round`]);
    /// - with client-level privacy, its changes from `global` clipped to `bound` (the
    ///   order's), noised from `noise` under the local mechanism or with its share of the noise
    ///   under the distributed one (the client's `privacy_noise` stream of the job);
    /// - with `compression.uplink`, each sent vector's change (plus its part of `residual`
    ///   under error feedback, which then keeps what was not sent) compressed, drawing from
    ///   the client's `compression` stream of the job;
    /// - with privacy, its weight made every client's.
    ///
    /// Under DP-SGD, privacy changes nothing here (see [`JobContext::dp_sgd_steps`]).
    pub(super) fn prepare_upload(
        &self,
        global: &A::Global,
        update: &mut A::Update,
        attack: Option<&mut ChaCha20Rng>,
        bound: Option<f64>,
        noise: Option<&mut ChaCha20Rng>,
        compression: Option<(&mut ChaCha20Rng, &mut Vec<f32>)>,
    ) -> (PrivacyNote, u64) {
        if let (Some(rng), Some(adversary), Some(hooks)) =
            (attack, &self.adversary, A::PRIVATE_UPDATES)
        {
            for (base, sent) in (hooks.sent)(global, update) {
                let mut change = crate::models::change(base, sent);
                adversary.attack.own(&mut change, rng);
                for ((s, &b), d) in sent.iter_mut().zip(base).zip(change) {
                    *s = (b as f64 + d) as f32;
                }
            }
        }
        let mut clipped = false;
        if let (Some(privacy), Some(hooks)) = (&self.privacy, A::PRIVATE_UPDATES) {
            let bound = bound.expect("a private run's order carries its bound");
            let mut sent = (hooks.sent)(global, update);
            clipped = ClientLevelPrivacy::clip(&mut sent, bound) > bound;
            if let Some(std) = privacy.client_noise_std() {
                let noise = noise.expect("the client's noise stream");
                let mut vectors: Vec<&mut [f32]> = sent.into_iter().map(|(_, v)| v).collect();
                ClientLevelPrivacy::add_noise(&mut vectors, std, noise);
            }
        }
        // (bytes of the compressed vectors, floats they stood for)
        let mut compressed = (0, 0);
        if let (Some(uplink), Some(hooks)) = (&self.uplink, A::PRIVATE_UPDATES) {
            let (rng, residual) = compression.expect("the client's compression stream");
            let mut sent = (hooks.sent)(global, update);
            let dense = sent.iter().map(|(b, _)| b.len()).sum();
            compressed = (compress_changes(uplink, &mut sent, residual, rng), dense);
        }
        if let (Some(_), Some(hooks)) = (&self.privacy, A::PRIVATE_UPDATES) {
            (hooks.equal_weight)(&self.algorithm, update);
        }
        let floats = self.algorithm.update_len(update);
        let bytes = compressed.0 + payload_bytes(floats.saturating_sub(compressed.1));
        let note = PrivacyNote {
            clipped,
            dp_sgd_steps: 0,
        };
        (note, bytes)
    }

    /// Under DP-SGD, the minibatch steps whose rows `update` has seen, what the server's
    /// accountant composes for the client's records: `steps` (the job's, of each local run)
    /// for each vector it sends, one local run's outcome; 0 without DP-SGD.
    pub(super) fn dp_sgd_steps(
        &self,
        global: &A::Global,
        update: &mut A::Update,
        steps: u64,
    ) -> u64 {
        match (self.training.plan.dp_sgd, A::PRIVATE_UPDATES) {
            (Some(_), Some(hooks)) => (hooks.sent)(global, update).len() as u64 * steps,
            _ => 0,
        }
    }

    /// `value`, spilled if the run spills values of its size. Runs on the pool: a failed write
    /// fails the job with the spill file's error.
    pub(super) fn keep<T: Floats>(&self, value: T) -> Stored<T> {
        match &self.spill {
            None => Stored::in_memory(value),
            Some(store) => store
                .keep(value)
                .unwrap_or_else(|e| panic!("spilling a finished job's result: {e}")),
        }
    }

    /// What client `client`'s job sees in `round`, at learning rate `lr`; its rows are the
    /// `k`-th of `rows` (from [`FederatedData::rows_for`]).
    pub(super) fn local<'a>(
        &'a self,
        (rows, k): (&'a ClientRows<'_>, usize),
        client: u32,
        round: u32,
        lr: f64,
    ) -> crate::algorithms::LocalContext<'a> {
        crate::algorithms::LocalContext {
            arch: &self.arch,
            training: std::borrow::Cow::Borrowed(&self.training),
            data: rows.data(),
            data_index: rows.index(k),
            client,
            round,
            lr,
            evaluated: self.evaluated,
            scored: None,
            tuned: None,
        }
    }
}
