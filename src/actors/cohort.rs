//! Cohort training: the training jobs the scheduler has dispatched and not yet had to wait
//! for, trained as one stacked computation (clients' and peers' alike), and their evaluations.
//!
//! Where the algorithm's update is made of local SGD runs ([`LocalUpdate::Sgd`]) or of
//! minibatch steps by its own rule ([`LocalUpdate::Batchwise`]), the model stacks
//! ([`Architecture::stacks`]) and `training.cohorts` asks for it where it pays
//! ([`stacking_pays`]), clients (and peers) queue their training jobs here instead of on the
//! trainer pool. The scheduler
//! flushes the queue before it awaits any pending result ([`World::flush`]): the jobs queued
//! since the last flush are a cohort, so its membership is a pure function of the event order
//! (in a synchronous round, all of the round's jobs; under FedBuff, the jobs started before the
//! scheduler next waits). A cohort's jobs are sorted by their clients' training rows (largest
//! first, ties in queue order) and cut into shards of consecutive jobs of about equal rows by a
//! rule that depends on the cohort alone ([`shard_sizes`]); each shard trains as one job on the
//! pool, so results never depend on the number of threads.
//!
//! Evaluations go the same way where they stack ([`stacking_evaluations_pays`]): queued,
//! flushed with the training jobs, cut into shards by the same rule (all splits' rows), and
//! each shard's models evaluated in stacked forward passes ([`evaluate_stacked`]); elsewhere
//! each is a job on the pool ([`EvalJob`]). Where evaluations stack, so do the E-steps' losses
//! of a training shard ([`sample_losses_stacked`]).
//!
//! This room must not look at the clock, the thread count or which jobs have finished, order
//! jobs by anything but the cohort itself, or draw from any stream but each job's own.
//!
//! [`Architecture::stacks`]: crate::models::Architecture::stacks
//! [`World::flush`]: crate::sim::World::flush

use super::job::JobContext;
use super::resident::{
    keep_state_vector, take_kept_vector, to_host, Held, KeptFloats, Reservation,
};
use super::trainer::TrainerPool;
use super::world::Flush;
use crate::algorithms::LocalUpdate;
use crate::algorithms::{
    Algorithm, BatchwiseClient, BatchwiseUpdate, ClientReport, Evaluation, LocalContext,
    NoveltyShare, SentRuns, SgdRun, Tested,
};
use crate::algorithms::{ContrastiveTerm, ProximalTerm};
use crate::data::ClientRows;
use crate::io::Stored;
use crate::models::precision::PrecisionLease;
use crate::models::profile::{computed, timed, Phase};
use crate::models::{
    dropout_stream, evaluate_stacked, for_each_stacked_batch, sample_losses_stacked,
    train_sgd_stacked, Architecture, BatchwiseRun, DeviceRows, DpSgdRun, EvalRequest, LocalWork,
    Placement, SplitModels, StackedRun,
};
use crate::records::NoveltyScores;
use crate::records::Split;
use crate::settings::Cohorts;
use crate::settings::NoveltyScoring;
use crate::sim::Pending;
use rand_chacha::ChaCha20Rng;
use std::borrow::Cow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use tch::Tensor;
use tokio::sync::oneshot;

/// A cohort is cut into at most this many shards: enough to keep a machine's cores busy.
const SHARDS: usize = 8;
/// Shards hold at least this many jobs where the cohort has them (a smaller cohort is one
/// shard). Small shards pay on the CPU: with 60 FedEM jobs (180 runs of the linear model) in
/// 7 shards instead of one, 200 rounds took 1.5 s against 1.9 s on 2 cores, and an MLP's 0.6 s
/// a round against 0.8 s (2026-11-25); a lone cohort of 20 (pFedMe's MNIST clients) is two.
const MIN_SHARD_JOBS: usize = 8;

/// On the CPU, updates by the algorithm's own rule train in cohorts only with models of at most
/// this many forward FLOPs per row. Stacking pays where libtorch's per-op cost outweighs the
/// arithmetic; with bigger layers a batched product is slower than each client's own (pFedMe's
/// MNIST DNN, 158 800 FLOPs per row: 21 s in lockstep against 12.6 s alone for 40 rounds on 2
/// cores; its MLR, 15 700: 2.9 s against 3.5 s; an MLP 150 → 64 → 1 on the FedEM synthetic
/// data, 19 300: 5.8 s against 6.6 s).
const BATCHWISE_MAX_FLOPS_PER_ROW: u64 = 50_000;

/// Whether `training.cohorts: auto` stacks `arch` for algorithm `A` on `placement` (the model
/// stacks: [`Architecture::stacks`]). On a GPU, always: a client's minibatch is far too small
/// to fill one. On the CPU, dense models only, and for updates by the algorithm's own rule
/// only up to [`BATCHWISE_MAX_FLOPS_PER_ROW`]: on 2 cores, a local epoch of FedEM's CNN for 20
/// clients of 60 images took 1.79 s stacked against 0.61 s alone (`cargo bench --bench
/// kernel -- cnn_cohort`), and a round of FedAvg with the Shakespeare LSTM 64 s stacked (one
/// batched cell per step) against 7.5 s alone (oneDNN's fused LSTM).
fn stacking_pays<A: Algorithm>(arch: &Architecture, placement: &Placement) -> bool {
    placement.on_gpu()
        || arch.is_dense()
            && (!matches!(A::UPDATE, LocalUpdate::Batchwise(_))
                || arch.flops_per_sample() <= BATCHWISE_MAX_FLOPS_PER_ROW)
}

/// Whether a run whose training stacks also stacks its evaluations: on a GPU (`auto`), and
/// under `always`. On the CPU under `auto` each client is evaluated alone, where stacking was
/// slower on 2 cores: the FedEM synthetic benchmark's 300 mixtures 141 ms against 63 ms per
/// evaluation, 20 clients' FEMNIST CNN mixtures 1.35 s against 0.59 s (`cargo bench --bench
/// kernel -- cnn_cohort`).
fn stacking_evaluations_pays(cohorts: Cohorts, placement: &Placement) -> bool {
    cohorts == Cohorts::Always || placement.on_gpu()
}

/// The sizes of the consecutive shards of a cohort whose jobs have `rows` training rows each
/// (sorted, largest first): k = ⌊jobs / 8⌋ shards (between 1 and 8), cut where the
/// running total of rows first reaches i/k of the whole, so that shards carry about equal
/// work, each at least one job. A function of the cohort alone.
pub(super) fn shard_sizes(rows: &[usize]) -> Vec<usize> {
    let jobs = rows.len();
    if jobs == 0 {
        return Vec::new();
    }
    let k = (jobs / MIN_SHARD_JOBS).clamp(1, SHARDS);
    let total: usize = rows.iter().sum::<usize>().max(1);
    let mut sizes = Vec::with_capacity(k);
    let (mut start, mut sum) = (0, 0);
    for (j, &n) in rows.iter().enumerate() {
        sum += n;
        let shard = sizes.len() + 1;
        // Close this shard once it holds its share, leaving a job for each shard still to come.
        if shard < k && sum * k >= shard * total && jobs - (j + 1) >= k - shard {
            sizes.push(j + 1 - start);
            start = j + 1;
        }
    }
    sizes.push(jobs - start);
    sizes
}

/// One client's (or peer's) training job: everything its local update depends on.
pub(super) struct TrainJob<A: Algorithm> {
    pub client: u32,
    pub round: u32,
    pub lr: f64,
    pub global: Arc<A::Global>,
    /// Read back on the pool when the job starts, if it was spilled.
    pub state: Stored<A::ClientState>,
    pub rng: ChaCha20Rng,
    /// The job's local work: the plan's, or the part of it the system model draws
    /// (`system.local_work`).
    pub work: LocalWork,
    /// Whether the update goes to the server (a client's upload; never a peer's model).
    pub uploads: bool,
    /// Whether the state goes back to a client, which keeps it as a [`Stored`] (a peer keeps
    /// its own in memory).
    pub keeps_state: bool,
}

/// What a training job yields: the update and the client's new state.
pub(super) struct Trained<A: Algorithm> {
    /// Its float vectors empty where they stay on the device (`on_device`).
    pub update: A::Update,
    pub state: A::ClientState,
    /// The update's float vectors, where they stay on the device for the server to sum there
    /// ([`keeps_update_on_device`]).
    pub on_device: Option<KeptFloats>,
    /// The state's float vectors, where the client's own model stays on the device
    /// ([`keeps_state_on_device`]): `state` is then their skeleton.
    pub state_on_device: Option<KeptFloats>,
}

impl<A: Algorithm> TrainJob<A> {
    /// What the job's local update sees: its rows are the `k`-th of `rows`, and its training
    /// plan does the job's work.
    fn context<'a>(
        &self,
        jobs: &'a JobContext<A>,
        rows: (&'a ClientRows<'_>, usize),
    ) -> LocalContext<'a> {
        let mut ctx = jobs.local(rows, self.client, self.round, self.lr);
        if ctx.training.plan.work != self.work {
            ctx.training.to_mut().plan.work = self.work;
        }
        ctx
    }

    /// Trains this client alone.
    fn train_alone(mut self, jobs: &JobContext<A>) -> Trained<A> {
        restore(&mut self.state);
        let rows = jobs.data.rows_for(&[self.client]);
        let ctx = self.context(jobs, (&rows, 0));
        let state = self.state.get_mut();
        let update = jobs
            .algorithm
            .local_update(&ctx, &self.global, state, &mut self.rng);
        self.finished(update)
    }

    /// The job's result: its update and the state it leaves.
    fn finished(self, update: A::Update) -> Trained<A> {
        let state = self
            .state
            .into_inner()
            .expect("restored when the job started");
        Trained {
            update,
            state,
            on_device: None,
            state_on_device: None,
        }
    }
}

/// Reads a job's state back from the spill file, on the pool, as the job starts (a failed
/// read fails the job with the spill file's error).
fn restore<S: crate::io::Floats>(state: &mut Stored<S>) {
    if let Err(e) = state.restore() {
        panic!("reading a client's state back: {e}");
    }
}

/// One client's (or peer's) evaluation: everything it depends on.
pub(super) struct EvalJob<A: Algorithm> {
    pub client: u32,
    pub round: u32,
    pub global: Arc<A::Global>,
    /// Read back on the pool when the job starts, if it was spilled.
    pub state: Stored<A::ClientState>,
    /// Held out of training: the state is fitted first ([`Algorithm::adapt_unseen`]).
    pub unseen: bool,
    /// Score the client's novel rows, where the data set has them ([`Algorithm::typicality`]).
    pub scores_novelty: bool,
    /// The client's evaluation stream for the round.
    pub rng: ChaCha20Rng,
}

/// What an evaluation yields: results per model and split, and the algorithm's report.
pub(super) struct Evaluated {
    pub results: Vec<Evaluation>,
    pub report: ClientReport,
}

impl<A: Algorithm> EvalJob<A> {
    fn context<'a>(
        &self,
        jobs: &'a JobContext<A>,
        rows: (&'a ClientRows<'_>, usize),
    ) -> LocalContext<'a> {
        jobs.local(
            rows,
            self.client,
            self.round,
            jobs.training.lr_at(self.round),
        )
    }

    /// A held-out client's state, fitted as its algorithm fits a newcomer's.
    fn adapt(&mut self, jobs: &JobContext<A>, ctx: &LocalContext<'_>) {
        if self.unseen {
            self.state = Stored::in_memory(jobs.algorithm.adapt_unseen(
                ctx,
                &self.global,
                &mut self.rng,
            ));
        }
    }

    /// The algorithm's report, with the novelty scores where asked for (under
    /// `evaluation.novelty: max_over_clients` or `mean_weights`, what the client shares for
    /// them to be scored with).
    fn report(&self, jobs: &JobContext<A>, ctx: &LocalContext<'_>) -> ClientReport {
        let alg = &jobs.algorithm;
        let state = self.state.get();
        let mut report = alg.report(&self.global, state, self.client);
        let data = ctx.data;
        if !self.scores_novelty {
            return report;
        }
        // Under the pooled scores, scored once every evaluated client's share is in, so every
        // evaluated client shares, with novel rows or without (validation has checked that the
        // algorithm has what is shared).
        match jobs.novelty {
            NoveltyScoring::Own => {}
            NoveltyScoring::MaxOverClients => {
                let model = A::CONFIDENCE_MODEL.expect("the algorithm scores by confidence");
                let model = model(self.client, &self.global, state).to_vec();
                report.novelty_share = Some(NoveltyShare::Classifier(model));
                return report;
            }
            NoveltyScoring::MeanWeights => {
                let mixture = A::MIXTURE_WEIGHTS.expect("the algorithm has mixture weights");
                let weights = (mixture.of)(state).to_vec();
                let unseen = self.unseen;
                report.novelty_share = Some(NoveltyShare::MixtureWeights { weights, unseen });
                return report;
            }
        }
        if data.novel.is_empty() {
            return report;
        }
        let test = data.view(ctx.data_index, Split::Test);
        let novel = data.novel_view(ctx.data_index);
        let typical = alg.typicality(ctx, &self.global, state, test);
        report.novelty = typical
            .zip(alg.typicality(ctx, &self.global, state, novel))
            .map(|(typical, novel)| NoveltyScores { typical, novel });
        report
    }

    /// Evaluates this client alone.
    fn evaluate_alone(mut self, jobs: &JobContext<A>) -> Evaluated {
        restore(&mut self.state);
        let rows = jobs.data.rows_for(&[self.client]);
        let ctx = self.context(jobs, (&rows, 0));
        self.adapt(jobs, &ctx);
        let tested =
            jobs.algorithm
                .tested_models(&ctx, &self.global, self.state.get(), &mut self.rng);
        let results = ctx.evaluate(&tested);
        let models = jobs.own_models(&tested);
        drop(tested);
        let mut report = self.report(jobs, &ctx);
        report.models = models;
        Evaluated { results, report }
    }
}

/// Where a client's jobs go: the trainer pool, each job alone, or the run's cohort queue.
pub(super) enum Dispatch<A: Algorithm> {
    Alone(TrainerPool, Arc<JobContext<A>>),
    Cohorts(Arc<CohortQueue<A>>),
}

impl<A: Algorithm> Clone for Dispatch<A> {
    fn clone(&self) -> Self {
        match self {
            Dispatch::Alone(pool, jobs) => Dispatch::Alone(pool.clone(), jobs.clone()),
            Dispatch::Cohorts(queue) => Dispatch::Cohorts(queue.clone()),
        }
    }
}

impl<A: Algorithm> Dispatch<A> {
    /// Cohorts where the scenario, the algorithm and the model allow them.
    pub fn new(pool: TrainerPool, jobs: Arc<JobContext<A>>) -> Self {
        let can = crate::algorithms::trains_in_cohorts::<A>() && jobs.arch.stacks();
        let wanted = match jobs.training.cohorts {
            Cohorts::Auto => stacking_pays::<A>(&jobs.arch, &jobs.placement),
            Cohorts::Always => true,
            Cohorts::Off => false,
        };
        if can && wanted {
            let precision = jobs.placement.prepare(jobs.training.precision);
            let stacks_evaluations =
                stacking_evaluations_pays(jobs.training.cohorts, &jobs.placement);
            Dispatch::Cohorts(Arc::new(CohortQueue {
                pool,
                jobs,
                queued: Mutex::default(),
                evaluations: Mutex::default(),
                stacks_evaluations,
                resident: Mutex::default(),
                _precision: precision,
            }))
        } else {
            Dispatch::Alone(pool, jobs)
        }
    }

    pub fn pool(&self) -> &TrainerPool {
        match self {
            Dispatch::Alone(pool, _) => pool,
            Dispatch::Cohorts(queue) => &queue.pool,
        }
    }

    /// Whether part of the clients' state stays outside them between rounds (cohorts keep
    /// momentum on the device: [`super::resident::ResidentMomenta`]).
    pub fn keeps_state_outside_clients(&self) -> bool {
        match self {
            Dispatch::Alone(..) => false,
            Dispatch::Cohorts(queue) => keeps_momentum_on_device(&queue.jobs),
        }
    }

    /// The queue the scheduler flushes, if jobs train in cohorts.
    pub fn queue(&self) -> Option<Arc<CohortQueue<A>>> {
        match self {
            Dispatch::Alone(..) => None,
            Dispatch::Cohorts(queue) => Some(queue.clone()),
        }
    }

    /// Starts `job` (alone) or queues it for the next cohort; its result comes back as the
    /// message `into` makes of it (made on the pool).
    pub fn train<M: Send + 'static>(
        &self,
        job: TrainJob<A>,
        into: impl FnOnce(Trained<A>) -> M + Send + 'static,
    ) -> Pending<M> {
        match self {
            Dispatch::Alone(pool, jobs) => {
                let jobs = jobs.clone();
                pool.submit(move || into(job.train_alone(&jobs)))
            }
            Dispatch::Cohorts(queue) => {
                let (tx, pending) = oneshot::channel();
                // `into` may spill (on the pool): a failure there fails this job alone.
                let reply: Reply<Trained<A>> = Box::new(move |result| {
                    let made = result.and_then(|trained| {
                        catch_unwind(AssertUnwindSafe(|| into(trained)))
                            .map_err(|panic| super::trainer::panic_message(&*panic))
                    });
                    let _ = tx.send(made);
                });
                let mut queued = queue.queued.lock().unwrap_or_else(|e| e.into_inner());
                queued.push((job, reply));
                pending
            }
        }
    }
}

impl<A: Algorithm> Dispatch<A> {
    /// Starts `job` (alone, on the pool) or queues it for the next cohort's evaluations; its
    /// result comes back as the message `into` makes of it (made on the pool).
    pub fn evaluate<M: Send + 'static>(
        &self,
        job: EvalJob<A>,
        into: impl FnOnce(Evaluated) -> M + Send + 'static,
    ) -> Pending<M> {
        let (pool, jobs) = match self {
            Dispatch::Cohorts(queue) if queue.stacks_evaluations => {
                let (tx, pending) = oneshot::channel();
                let reply: Reply<Evaluated> = Box::new(move |result| {
                    let _ = tx.send(result.map(into));
                });
                let mut queued = queue.evaluations.lock().unwrap_or_else(|e| e.into_inner());
                queued.push((job, reply));
                return pending;
            }
            Dispatch::Cohorts(queue) => (&queue.pool, &queue.jobs),
            Dispatch::Alone(pool, jobs) => (pool, jobs),
        };
        let jobs = jobs.clone();
        pool.submit(move || into(job.evaluate_alone(&jobs)))
    }
}

/// Answers one queued job: makes its message and sends it to the waiting entity.
type Reply<R> = Box<dyn FnOnce(Result<R, String>) + Send>;

/// Jobs `J` waiting for the next flush, each with the reply its result `R` goes to.
type Queue<J, R> = Mutex<Vec<(J, Reply<R>)>>;

/// What a shard of jobs `J` is done with, on a device (from rows resident there when given):
/// results `R` in shard order.
type ShardWork<A, J, R> = fn(&JobContext<A>, Vec<J>, tch::Device, Option<DeviceRows>) -> Vec<R>;

/// The training jobs queued since the scheduler last waited.
pub(super) struct CohortQueue<A: Algorithm> {
    pool: TrainerPool,
    jobs: Arc<JobContext<A>>,
    queued: Queue<TrainJob<A>, Trained<A>>,
    /// The evaluations queued since then, where they stack ([`stacking_evaluations_pays`]).
    evaluations: Queue<EvalJob<A>, Evaluated>,
    stacks_evaluations: bool,
    /// The data set's rows on each GPU cohorts train on, uploaded when first needed.
    resident: Mutex<Vec<DeviceRows>>,
    /// The run's hold on libtorch's TF32 switch, on GPUs, until the run is over.
    _precision: PrecisionLease,
}

impl<A: Algorithm> CohortQueue<A> {
    /// The rows on `device`, uploaded on first use; `None` on the CPU (minibatches are
    /// gathered from the rows in memory) and where rows are made on demand (each shard
    /// uploads its own).
    fn resident_on(&self, device: tch::Device) -> Option<DeviceRows> {
        if !device.is_cuda() || !self.jobs.data.is_resident() {
            return None;
        }
        let mut resident = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rows) = resident.iter().find(|r| r.device() == device) {
            return Some(rows.share());
        }
        let rows = DeviceRows::upload(&self.jobs.data.all_rows(), device);
        let shared = rows.share();
        resident.push(rows);
        Some(shared)
    }
}

impl<A: Algorithm> Flush for CohortQueue<A> {
    /// Starts the queued jobs as a cohort, one pool job per shard, then the queued
    /// evaluations the same way.
    fn flush(&self) {
        self.flush_training();
        self.flush_evaluations();
    }
}

impl<A: Algorithm> CohortQueue<A> {
    fn flush_training(&self) {
        let cohort = std::mem::take(&mut *self.queued.lock().unwrap_or_else(|e| e.into_inner()));
        // Clients of similar sizes share a shard (largest first, ties in queue order): a
        // shard steps as long as its longest run, so fewer steps are mostly empty.
        let rows = |job: &TrainJob<A>| self.jobs.data.split_len(job.client as usize, Split::Train);
        self.start_shards(cohort, rows, train_cohort::<A>);
    }

    /// Sorts `cohort` by its jobs' `rows` (largest first, ties in queue order), cuts it into
    /// shards ([`shard_sizes`]) and starts each on the pool, on the device its index places it
    /// on ([`Placement::device_of`]): `work` does a shard's jobs (results in shard order), and
    /// every job is answered, with the panic's message if its shard panicked.
    fn start_shards<J: Send + 'static, R: 'static>(
        &self,
        mut cohort: Vec<(J, Reply<R>)>,
        rows: impl Fn(&J) -> usize,
        work: ShardWork<A, J, R>,
    ) {
        cohort.sort_by_key(|(job, _)| std::cmp::Reverse(rows(job)));
        let rows: Vec<usize> = cohort.iter().map(|(job, _)| rows(job)).collect();
        for (index, size) in shard_sizes(&rows).into_iter().enumerate() {
            let rest = cohort.split_off(size);
            let shard = std::mem::replace(&mut cohort, rest);
            let jobs = self.jobs.clone();
            let device = jobs.placement.device_of(index);
            let resident = self.resident_on(device);
            self.pool.spawn(move || {
                let (shard, replies): (Vec<_>, Vec<_>) = shard.into_iter().unzip();
                let run = || work(&jobs, shard, device, resident);
                match catch_unwind(AssertUnwindSafe(run)) {
                    Ok(results) => {
                        for (reply, result) in replies.into_iter().zip(results) {
                            reply(Ok(result));
                        }
                    }
                    Err(panic) => {
                        let message = super::trainer::panic_message(&*panic);
                        for reply in replies {
                            reply(Err(message.clone()));
                        }
                    }
                }
            });
        }
    }

    /// Starts the queued evaluations as shards of clients of similar sizes (all their splits'
    /// rows), cut by the rule training shards follow.
    fn flush_evaluations(&self) {
        let cohort =
            std::mem::take(&mut *self.evaluations.lock().unwrap_or_else(|e| e.into_inner()));
        let data = &self.jobs.data;
        let evaluated = self.jobs.evaluated;
        let rows = |job: &EvalJob<A>| {
            Split::EVALUATED
                .into_iter()
                .filter(|&s| crate::algorithms::is_measured(evaluated, s))
                .map(|s| data.split_len(job.client as usize, s))
                .sum::<usize>()
        };
        self.start_shards(cohort, rows, evaluate_cohort::<A>);
    }
}

/// Evaluates `shard`'s jobs on `device` (from `resident` rows when given): each held-out
/// client is fitted first and each job names its models (drawing from its own stream, as
/// alone), every model's logits on every split come from stacked forward passes
/// ([`evaluate_stacked`]), then each job's report is made alone. Results in shard order.
fn evaluate_cohort<A: Algorithm>(
    jobs: &JobContext<A>,
    shard: Vec<EvalJob<A>>,
    device: tch::Device,
    resident: Option<DeviceRows>,
) -> Vec<Evaluated> {
    timed(Phase::Evaluate, device, || {
        evaluate_shard(jobs, shard, device, resident)
    })
}

/// [`evaluate_cohort`]'s work.
fn evaluate_shard<A: Algorithm>(
    jobs: &JobContext<A>,
    mut shard: Vec<EvalJob<A>>,
    device: tch::Device,
    resident: Option<DeviceRows>,
) -> Vec<Evaluated> {
    shard.iter_mut().for_each(|job| restore(&mut job.state));
    let clients: Vec<u32> = shard.iter().map(|job| job.client).collect();
    let rows = jobs.data.rows_for(&clients);
    let scored = held_out_scores(jobs, &shard, &rows, device, resident.as_ref());
    let contexts: Vec<LocalContext<'_>> = shard
        .iter()
        .enumerate()
        .map(|(k, job)| {
            let mut ctx = job.context(jobs, (&rows, k));
            ctx.scored = scored[k].as_deref();
            ctx
        })
        .collect();
    for (job, ctx) in shard.iter_mut().zip(&contexts) {
        job.adapt(jobs, ctx);
    }
    let tuned = fine_tunings(
        jobs,
        &mut shard,
        &contexts,
        &rows,
        device,
        resident.as_ref(),
    );
    let contexts: Vec<LocalContext<'_>> = (contexts.into_iter().zip(&tuned))
        .map(|(mut ctx, tuned)| {
            ctx.tuned = tuned.as_deref();
            ctx
        })
        .collect();
    let tested: Vec<Vec<Tested<'_>>> = shard
        .iter_mut()
        .zip(&contexts)
        .map(|(job, ctx)| {
            let EvalJob {
                global, state, rng, ..
            } = job;
            jobs.algorithm.tested_models(ctx, global, state.get(), rng)
        })
        .collect();
    // Every (model, split) of every job, in the order each job alone evaluates them.
    let mut labels = Vec::new();
    let mut requests = Vec::new();
    for (ctx, tested) in contexts.iter().zip(&tested) {
        for t in tested {
            for split in ctx.splits() {
                labels.push((t.kind, split));
                requests.push(EvalRequest {
                    model: &t.model,
                    view: ctx.data.view(ctx.data_index, split),
                    first_row: ctx.data.first_row(ctx.data_index, split),
                });
            }
        }
    }
    let forwards: usize = (requests.iter())
        .map(|r| r.view.len() * r.model.parameter_vectors().len())
        .sum();
    computed(
        Phase::Evaluate,
        jobs.arch.flops_per_sample() * forwards as u64,
    );
    let mut stats = evaluate_stacked(&jobs.arch, device, resident.as_ref(), &requests)
        .into_iter()
        .zip(labels)
        .map(|(stats, (model, split))| Evaluation {
            model,
            split,
            stats,
        });
    let counts: Vec<usize> = contexts
        .iter()
        .zip(&tested)
        .map(|(ctx, tested)| tested.len() * ctx.splits().len())
        .collect();
    drop(requests);
    let mut models: Vec<_> = tested.iter().map(|t| jobs.own_models(t)).collect();
    drop(tested);
    shard
        .iter()
        .zip(&contexts)
        .zip(counts)
        .zip(&mut models)
        .map(|(((job, ctx), count), models)| {
            let mut report = job.report(jobs, ctx);
            report.models = std::mem::take(models);
            Evaluated {
                results: stats.by_ref().take(count).collect(),
                report,
            }
        })
        .collect()
}

/// The fine-tuned parameters of the fine-tunings `shard`'s jobs are tested after
/// ([`Algorithm::FINE_TUNING`]: FedAvg+), trained as one stacked computation from the global
/// model, which crosses once; each job's stream draws what [`LocalContext::fine_tune`] alone
/// draws (its passes, then its dropout masks' words). `None` for jobs without one.
fn fine_tunings<A: Algorithm>(
    jobs: &JobContext<A>,
    shard: &mut [EvalJob<A>],
    contexts: &[LocalContext<'_>],
    rows: &ClientRows<'_>,
    device: tch::Device,
    resident: Option<&DeviceRows>,
) -> Vec<Option<Vec<f32>>> {
    let mut tuned: Vec<Option<Vec<f32>>> = vec![None; shard.len()];
    let Some(declared) = A::FINE_TUNING else {
        return tuned;
    };
    let mut runs = Vec::new();
    for (k, (job, ctx)) in shard.iter_mut().zip(contexts).enumerate() {
        let EvalJob {
            global, state, rng, ..
        } = job;
        let Some(tuning) = declared(&jobs.algorithm, ctx, global, state.get()) else {
            continue;
        };
        let plan = tuning.plan(&jobs.training.plan);
        let passes = plan.passes(ctx.train_view().len(), rng);
        let dropout = dropout_stream(&jobs.arch, &passes, rng);
        runs.push((k, tuning, plan, passes, dropout));
    }
    let Some((_, _, plan, _, _)) = runs.first() else {
        return tuned;
    };
    // Only the passes differ between the runs' plans (drawn above).
    let plan = *plan;
    let tested: Vec<usize> = runs.iter().map(|(k, ..)| *k).collect();
    let starts: Vec<Cow<'_, [f32]>> = (runs.iter_mut())
        .map(|(_, tuning, ..)| std::mem::take(&mut tuning.start))
        .collect();
    let mut params: Vec<Vec<f32>> = vec![Vec::new(); runs.len()];
    let mut momenta: Vec<Vec<f32>> = vec![Vec::new(); runs.len()];
    let mut stacked: Vec<StackedRun<'_>> = (runs.into_iter())
        .zip(params.iter_mut().zip(&mut momenta).zip(&starts))
        .map(
            |((k, tuning, _, passes, dropout), ((params, momentum), start))| StackedRun {
                params,
                resident_momentum: None,
                resident_params: None,
                start: Some(start),
                momentum: Some(momentum),
                sample_weights: None,
                proximal: None,
                correction: None,
                contrastive: None,
                first_row: rows.data().first_row(rows.index(k), Split::Train),
                passes,
                dropout,
                private: None,
                lr: tuning.lr,
            },
        )
        .collect();
    let all_rows = rows.data().all_rows();
    let uploaded = rows_on(device, &all_rows, resident.map(DeviceRows::share));
    train_sgd_stacked(&jobs.arch, &plan, all_rows, uploaded.as_ref(), &mut stacked);
    drop(stacked);
    for (k, params) in tested.into_iter().zip(params) {
        tuned[k] = Some(params);
    }
    tuned
}

/// The training rows' losses of `shard`'s held-out clients under the models the update's
/// E-step declares ([`SgdUpdate::scores`]), for their fitting ([`Algorithm::adapt_unseen`]), in
/// stacked forward passes (the E-step of a training shard's way); `None` for the others, and
/// for every client where the update declares none.
///
/// [`SgdUpdate::scores`]: crate::algorithms::SgdUpdate::scores
fn held_out_scores<A: Algorithm>(
    jobs: &JobContext<A>,
    shard: &[EvalJob<A>],
    rows: &ClientRows<'_>,
    device: tch::Device,
    resident: Option<&DeviceRows>,
) -> Vec<Option<Vec<Vec<f32>>>> {
    let mut scored = vec![None; shard.len()];
    let Some(scores) = A::UPDATE.scored_models() else {
        return scored;
    };
    let held_out: Vec<usize> = (0..shard.len()).filter(|&k| shard[k].unseen).collect();
    let requests: Vec<SplitModels<'_>> = (held_out.iter())
        .map(|&k| SplitModels {
            vectors: scores(&shard[k].global),
            view: rows.data().view(rows.index(k), Split::Train),
            first_row: rows.data().first_row(rows.index(k), Split::Train),
        })
        .collect();
    if requests.is_empty() {
        return scored;
    }
    let forwards: usize = requests.iter().map(SplitModels::forward_rows).sum();
    computed(
        Phase::Evaluate,
        jobs.arch.flops_per_sample() * forwards as u64,
    );
    let losses = sample_losses_stacked(&jobs.arch, device, resident, &requests);
    for (k, losses) in held_out.into_iter().zip(losses) {
        scored[k] = Some(losses);
    }
    scored
}

/// The shard's rows on `device` for its stacked steps: the run's `resident` copy where there
/// is one, else (on a GPU, rows made on demand) the shard's own upload; `None` on the CPU.
fn rows_on(
    device: tch::Device,
    rows: &crate::data::SplitView<'_>,
    resident: Option<DeviceRows>,
) -> Option<DeviceRows> {
    match (device.is_cuda(), resident) {
        (true, None) => Some(DeviceRows::upload(rows, device)),
        (_, resident) => resident,
    }
}

/// Trains `shard`'s jobs as one stacked computation on `device` (from `resident` rows when
/// given): where the update declares an E-step's models ([`SgdUpdate::scores`]) and
/// evaluations stack, the shard's training rows are scored under them first
/// ([`sample_losses_stacked`]); each job's update begins (its runs and their passes drawn from
/// its stream, in the order training alone draws them), every run of every job trains stacked,
/// then each update finishes. Results in job order.
///
/// [`SgdUpdate::scores`]: crate::algorithms::SgdUpdate::scores
fn train_cohort<A: Algorithm>(
    jobs: &JobContext<A>,
    mut shard: Vec<TrainJob<A>>,
    device: tch::Device,
    resident: Option<DeviceRows>,
) -> Vec<Trained<A>> {
    let sgd = match A::UPDATE {
        LocalUpdate::Batchwise(batchwise) => {
            return train_batchwise_cohort(jobs, batchwise, shard, device, resident)
        }
        LocalUpdate::Sgd(sgd) => sgd,
        LocalUpdate::Own(_) => unreachable!("cohorts are formed only for updates that stack"),
    };
    // A client's own model kept on the device since its last job is where its run starts:
    // taken out before the rest of its state is read back.
    let kept_starts: Vec<Option<Tensor>> = (shard.iter_mut())
        .map(|job| {
            let keeps = sgd.keeps?;
            take_kept_vector(&mut job.state, keeps.state_vector)
        })
        .collect();
    timed(Phase::Restore, device, || {
        shard.iter_mut().for_each(|job| restore(&mut job.state))
    });
    let plan = &jobs.training.plan;
    let clients: Vec<u32> = shard.iter().map(|job| job.client).collect();
    let rows = jobs.data.rows_for(&clients);
    let all_rows = rows.data().all_rows();
    let uploaded = timed(Phase::UploadRows, device, || {
        rows_on(device, &all_rows, resident)
    });
    // The E-step's losses for the whole shard, in stacked forward passes, where evaluations
    // stack (a GPU, or `cohorts: always`); elsewhere each job's `begin` computes its own.
    let scored: Vec<Vec<Vec<f32>>> = match sgd.scores {
        Some(scores) if stacking_evaluations_pays(jobs.training.cohorts, &jobs.placement) => {
            timed(Phase::Score, device, || {
                let requests: Vec<SplitModels<'_>> = (shard.iter().enumerate())
                    .map(|(k, job)| SplitModels {
                        vectors: scores(&job.global),
                        view: rows.data().view(rows.index(k), Split::Train),
                        first_row: rows.data().first_row(rows.index(k), Split::Train),
                    })
                    .collect();
                let forwards: usize = requests.iter().map(SplitModels::forward_rows).sum();
                computed(Phase::Score, jobs.arch.flops_per_sample() * forwards as u64);
                sample_losses_stacked(&jobs.arch, device, uploaded.as_ref(), &requests)
            })
        }
        _ => Vec::new(),
    };
    // The runs may borrow from the global models (where they start): held apart from the jobs.
    let globals: Vec<Arc<A::Global>> = shard.iter().map(|job| job.global.clone()).collect();
    let begin = || -> Vec<(TrainJob<A>, Vec<SgdRun<'_>>, Vec<_>)> {
        shard
            .into_iter()
            .zip(&globals)
            .enumerate()
            .map(|(k, (mut job, global))| {
                let mut ctx = job.context(jobs, (&rows, k));
                ctx.scored = scored.get(k).map(Vec::as_slice);
                let runs = (sgd.begin)(
                    &jobs.algorithm,
                    &ctx,
                    global,
                    job.state.get_mut(),
                    &mut job.rng,
                );
                let (n, plan) = (ctx.train_view().len(), &ctx.training.plan);
                // Each run's passes, its DP-SGD noise stream, then its masks' words, as alone.
                let passes = runs
                    .iter()
                    .map(|_| {
                        let passes = plan.passes(n, &mut job.rng);
                        let private = DpSgdRun::draw(plan, n, &mut job.rng);
                        let dropout = dropout_stream(&jobs.arch, &passes, &mut job.rng);
                        (passes, private, dropout)
                    })
                    .collect();
                (job, runs, passes)
            })
            .collect()
    };
    let mut begun = timed(Phase::Begin, device, begin);
    // Each run's slot for its momentum buffer kept on the device, where buffers stay there.
    let kept = &jobs.resident_momenta;
    let buffer_bytes = 4 * jobs.arch.num_params() as u64;
    let mut slots: Vec<Vec<Option<Option<Tensor>>>> = (begun.iter())
        .map(|(job, runs, _)| {
            (runs.iter().enumerate())
                .map(|(r, run)| {
                    let keeps =
                        keeps_momentum_on_device(jobs) && !run.plain_sgd && !run.fresh_momentum;
                    keeps
                        .then(|| kept.take(job.client, r, buffer_bytes))
                        .flatten()
                })
                .collect()
        })
        .collect();
    // Each run's slot for its parameters on the device: a sent run's, where the job's update
    // stays there (its bytes reserved: all its runs' or none); the kept run's, where the
    // client's own model starts there or stays there.
    let mut sent: Vec<ParamSlots> = (begun.iter().zip(kept_starts))
        .map(|((job, runs, _), kept_start)| {
            let sends = |r: usize| sgd.sends.sends(r);
            let count = (0..runs.len()).filter(|&r| sends(r)).count() as u64;
            let update = (keeps_update_on_device(jobs, job) && count > 0)
                .then(|| jobs.device_budget.reserve(count * buffer_bytes))
                .flatten();
            let keeps = sgd.keeps.filter(|_| keeps_state_on_device(jobs, job));
            let state = keeps.and_then(|_| jobs.device_budget.reserve(buffer_bytes));
            let mut slots: Vec<_> = (0..runs.len())
                .map(|r| (update.is_some() && sends(r)).then_some(None))
                .collect();
            if let Some(keeps) = sgd.keeps {
                assert!(!sends(keeps.run), "a run is sent or kept, not both");
                if kept_start.is_some() || state.is_some() {
                    slots[keeps.run] = Some(kept_start);
                }
            }
            ParamSlots {
                update,
                state,
                slots,
            }
        })
        .collect();
    let mut stacked: Vec<StackedRun<'_>> = Vec::new();
    let jobs_slots = begun.iter_mut().zip(&mut slots).zip(&mut sent);
    for (k, (((job, runs, passes), slots), sent)) in jobs_slots.enumerate() {
        let first_row = rows.data().first_row(rows.index(k), Split::Train);
        let runs = runs
            .iter_mut()
            .zip(std::mem::take(passes))
            .zip(slots.iter_mut().zip(&mut sent.slots));
        for ((run, (passes, private, dropout)), (slot, sent)) in runs {
            let SgdRun {
                params,
                momentum,
                sample_weights,
                proximal,
                correction,
                contrastive,
                lr,
                plain_sgd,
                fresh_momentum: _,
            } = run;
            // A run that starts from a shared vector (borrowed from the global model) stacks
            // it as given, so that it crosses once; its own parameters are written at the end.
            let start = match params {
                Cow::Borrowed(shared) => {
                    let shared: &[f32] = shared;
                    *params = Cow::Owned(Vec::new());
                    Some(shared)
                }
                Cow::Owned(_) => None,
            };
            stacked.push(StackedRun {
                params: params.to_mut(),
                resident_momentum: slot.as_mut(),
                resident_params: sent.as_mut(),
                start,
                momentum: (!*plain_sgd).then_some(momentum),
                sample_weights: sample_weights.as_deref(),
                proximal: proximal.as_ref().map(ProximalTerm::borrow),
                correction: correction.as_deref(),
                contrastive: contrastive.as_ref().map(ContrastiveTerm::borrow),
                first_row,
                passes,
                dropout,
                private,
                lr: lr.unwrap_or(job.lr),
            });
        }
    }
    train_sgd_stacked(&jobs.arch, plan, all_rows, uploaded.as_ref(), &mut stacked);
    drop(stacked);

    let finish = || {
        begun
            .into_iter()
            .zip(slots)
            .zip(sent)
            .enumerate()
            .map(|(k, (((mut job, mut runs, _), slots), sent))| {
                for (r, (run, slot)) in runs.iter_mut().zip(slots).enumerate() {
                    jobs.training.settle_momentum(&mut run.momentum);
                    if let Some(slot) = slot {
                        kept.put(job.client, r, slot, buffer_bytes);
                    }
                }
                let ParamSlots {
                    update: update_bytes,
                    state: state_bytes,
                    mut slots,
                } = sent;
                // The kept run's parameters: staying on the device where there is room, else
                // crossing back into the run (to the state, as on the host).
                let own_model = sgd.keeps.and_then(|keeps| {
                    let trained = slots[keeps.run].take().flatten()?;
                    match state_bytes {
                        Some(bytes) => Some((keeps.state_vector, trained, bytes)),
                        None => {
                            let run = &mut runs[keeps.run];
                            run.params = Cow::Owned(to_host(&trained));
                            None
                        }
                    }
                });
                // Every sent run's parameters on the device, or (trained in plain Rust) none.
                let vectors: Option<Vec<Held>> = slots
                    .into_iter()
                    .flatten()
                    .map(|t| t.map(Held::Device))
                    .collect();
                let on_device = update_bytes
                    .zip(vectors.filter(|v| !v.is_empty()))
                    .map(|(bytes, vectors)| KeptFloats::new(vectors, bytes));
                let ctx = job.context(jobs, (&rows, k));
                let state = job.state.get_mut();
                let update = (sgd.finish)(&jobs.algorithm, &ctx, &job.global, state, runs);
                let state_on_device = own_model.map(|(vector, trained, bytes)| {
                    keep_state_vector(state, vector, trained, bytes)
                });
                Trained {
                    on_device,
                    state_on_device,
                    ..job.finished(update)
                }
            })
            .collect()
    };
    timed(Phase::Finish, device, finish)
}

/// Whether a run's momentum buffers stay on the device between rounds (`resident::ResidentMomenta`):
/// where cohorts are the GPU path (a GPU, or `training.cohorts: always`), the plan has
/// momentum and the scenario keeps it between rounds.
fn keeps_momentum_on_device<A: Algorithm>(jobs: &JobContext<A>) -> bool {
    stacking_evaluations_pays(jobs.training.cohorts, &jobs.placement)
        && jobs.training.plan.momentum != 0.0
        && jobs.training.keep_momentum
}

/// A job's runs' slots for their parameters on the device (`None`: the run's cross as on the
/// host), with the bytes reserved for what stays there.
struct ParamSlots {
    /// For the update's sent runs.
    update: Option<Reservation>,
    /// For the client's own model (the kept run's).
    state: Option<Reservation>,
    slots: Vec<Option<Option<Tensor>>>,
}

/// Whether `job`'s client keeps its own model (the run [`SgdUpdate::keeps`] names) on the
/// device between rounds: where cohorts are the GPU path and the job is a client's (a peer's
/// state stays with the peer).
///
/// [`SgdUpdate::keeps`]: crate::algorithms::SgdUpdate::keeps
fn keeps_state_on_device<A: Algorithm>(jobs: &JobContext<A>, job: &TrainJob<A>) -> bool {
    stacking_evaluations_pays(jobs.training.cohorts, &jobs.placement) && job.keeps_state
}

/// Whether `job`'s update stays on the device for the server to sum there
/// ([`KeptFloats`]): where cohorts are the GPU path (a GPU, or `training.cohorts: always`),
/// the algorithm's aggregation is summed ([`Algorithm::SUMMED`]) and its update is made of its
/// trained runs ([`SgdUpdate::sends`]), the client uploads it, and nothing on its way reads or
/// changes it ([`JobContext::upload_reads_update`]). Anything else that needs it later (a
/// stale aggregation) reads it back.
///
/// [`SgdUpdate::sends`]: crate::algorithms::SgdUpdate::sends
fn keeps_update_on_device<A: Algorithm>(jobs: &JobContext<A>, job: &TrainJob<A>) -> bool {
    let sends_runs = match A::UPDATE {
        LocalUpdate::Sgd(sgd) => sgd.sends != SentRuns::Computed,
        _ => false,
    };
    stacking_evaluations_pays(jobs.training.cohorts, &jobs.placement)
        && A::SUMMED.is_some()
        && sends_runs
        && job.uploads
        && !jobs.upload_reads_update()
}

/// Trains `shard`'s jobs of a [`BatchwiseUpdate`] in lockstep on `device`: each job begins and
/// draws its passes from its stream (as alone), the jobs are ordered by their number of steps
/// (longest first, ties in shard order), and at every minibatch step the jobs that have a
/// batch take it together, their gradient queries answered by one stacked computation. Results
/// in shard order.
fn train_batchwise_cohort<A: Algorithm>(
    jobs: &JobContext<A>,
    batchwise: BatchwiseUpdate<A>,
    mut shard: Vec<TrainJob<A>>,
    device: tch::Device,
    resident: Option<DeviceRows>,
) -> Vec<Trained<A>> {
    shard.iter_mut().for_each(|job| restore(&mut job.state));
    let plan = (batchwise.plan)(&jobs.algorithm, &jobs.training.plan);
    let clients: Vec<u32> = shard.iter().map(|job| job.client).collect();
    let rows = jobs.data.rows_for(&clients);
    let mut begun: Vec<(usize, TrainJob<A>, BatchwiseRun)> = shard
        .into_iter()
        .enumerate()
        .map(|(k, mut job)| {
            let ctx = job.context(jobs, (&rows, k));
            (batchwise.begin)(&jobs.algorithm, &ctx, &job.global, job.state.get_mut());
            let n = ctx.train_view().len();
            let job_plan = (batchwise.plan)(&jobs.algorithm, &ctx.training.plan);
            let passes = job_plan.passes(n, &mut job.rng);
            let run = BatchwiseRun {
                first_row: rows.data().first_row(rows.index(k), Split::Train),
                dropout: dropout_stream(&jobs.arch, &passes, &mut job.rng),
                passes,
            };
            (k, job, run)
        })
        .collect();
    // Longest first (a stable sort): the jobs with a batch at a step are then a prefix.
    let steps = |run: &BatchwiseRun| run.passes.iter().map(|(_, c)| c.len()).sum::<usize>();
    begun.sort_by_key(|(_, _, run)| std::cmp::Reverse(steps(run)));
    let (mut states, runs): (Vec<_>, Vec<_>) = begun
        .into_iter()
        .map(|(k, job, run)| ((k, job), run))
        .unzip();
    let all_rows = rows.data().all_rows();
    let uploaded = rows_on(device, &all_rows, resident);
    for_each_stacked_batch(
        &jobs.arch,
        &plan,
        all_rows,
        uploaded.as_ref(),
        &runs,
        |active, batch| {
            let mut step_clients: Vec<BatchwiseClient<'_, A>> = states[..active]
                .iter_mut()
                .map(|(_, job)| BatchwiseClient {
                    state: job.state.get_mut(),
                    lr: job.lr,
                })
                .collect();
            (batchwise.step)(&jobs.algorithm, &mut step_clients, batch);
        },
    );
    states.sort_by_key(|(k, _)| *k);
    states
        .into_iter()
        .map(|(k, mut job)| {
            let ctx = job.context(jobs, (&rows, k));
            let state = job.state.get_mut();
            let update = (batchwise.finish)(&jobs.algorithm, &ctx, &job.global, state);
            job.finished(update)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::shard_sizes;

    #[test]
    fn shards_depend_on_the_cohort_alone_and_carry_equal_rows() {
        assert_eq!(shard_sizes(&[]), Vec::<usize>::new());
        assert_eq!(shard_sizes(&[5; 7]), [7]);
        assert_eq!(shard_sizes(&[5; 15]), [15]);
        // Equal rows: equal counts (pFedMe's 20 MNIST clients: two shards).
        assert_eq!(shard_sizes(&[5; 20]), [10, 10]);
        assert_eq!(shard_sizes(&[7; 24]), [8, 8, 8]);
        assert_eq!(shard_sizes(&[1; 300]), [38, 37, 38, 37, 38, 37, 38, 37]);
        // 16 jobs, two shards: the big job alone carries half the rows.
        let mut rows = vec![15];
        rows.extend([1; 15]);
        assert_eq!(shard_sizes(&rows), [1, 15]);
        // Never an empty shard, whatever the sizes.
        let mut rows = vec![1000; 3];
        rows.extend([0; 21]);
        assert_eq!(shard_sizes(&rows), [1, 1, 22]);
        let big: Vec<usize> = (0..1000).rev().collect();
        let sizes = shard_sizes(&big);
        assert_eq!((sizes.len(), sizes.iter().sum::<usize>()), (8, 1000));
    }
}
