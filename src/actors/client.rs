//! A client: trains when the server asks, evaluates when asked, and keeps its own state
//! between rounds. Its jobs run on the trainer pool; their results come back to it as
//! pending messages at the time the system model says they finish. Under `evaluation.novelty:
//! max_over_clients` (`mean_weights`) its evaluation sends the server its classifier (its
//! mixture weights), and it scores its rows when the server hands it every evaluated client's
//! (their mean).

use super::checkpoint::{decode, decode_from, encode_into};
use super::cohort::{Dispatch, EvalJob, TrainJob};
use super::divergence::{DivergenceWatch, Seen};
use super::evaluation::EvalContext;
use super::job::JobContext;
use super::messages::{
    FinishedWork, FlEffects, Msg, PooledNovelty, PrivacyNote, SavedOrder, ToClient, ToServer,
    TrainOrder,
};
use super::resident::KeptFloats;
use super::world::{Deliver, Members, Outbox, Routed};
use crate::algorithms::{Algorithm, ClientReport, Evaluation, Finite};
use crate::io::Stored;
use crate::models::{LocalPlan, LocalWork};
use crate::records::Split;
use crate::records::{DivergenceStage, NoveltyRecord, Record};
use crate::sim::{Entity, SeedTree, SimDuration, SimError, SimTime};
use crate::system::{payload_bytes, Link, SystemModel};
use actix::prelude::*;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::rc::{Rc, Weak};
use std::sync::Arc;

pub(super) struct Client<A: Algorithm> {
    id: u32,
    /// Held out of training: adapts to the trained model only to be tested.
    unseen: bool,
    /// What outlives this actor; `None` only once it has gone back to the roster.
    kept: Option<Kept<A>>,
    jobs: Arc<JobContext<A>>,
    dispatch: Dispatch<A>,
    system: Arc<SystemModel>,
    seeds: SeedTree,
    /// Results of this client's own jobs still to come: it stays awake until they have.
    awaited: usize,
    /// Where it goes to sleep when it has nothing to wait for (`None`: it never sleeps).
    roster: Option<Weak<Roster<A>>>,
    /// Its device is still to be recorded (with the effects of its first message ever).
    introduce: bool,
    /// Its training and evaluation jobs in flight, in the order they started (what a
    /// checkpoint saves of them).
    in_flight: Vec<JobInFlight<A::Global>>,
    /// How many times its state has changed (a training job's result): an evaluation in
    /// flight started from the state of its version.
    version: u64,
}

/// A client's job in flight as a checkpoint saves it. Each starts from the client's [`Kept`]
/// state (which changes only when a training job's result comes): a training job from its
/// order (less the model, which the server saves) and the residual it took; an evaluation from
/// the round's global model (the server's, where a checkpoint can be saved).
enum JobInFlight<G> {
    Training {
        started: SimTime,
        order: SavedOrder,
        residual: Option<Stored<Vec<f32>>>,
    },
    Evaluation {
        started: SimTime,
        round: u32,
        global: Arc<G>,
        version: u64,
    },
}

/// What a client keeps between its participations, whether awake (an actor) or asleep (in
/// the roster).
pub(super) struct Kept<A: Algorithm> {
    /// Spilled while the client is idle, where the run spills values of its size.
    state: Stored<A::ClientState>,
    /// Under compression with error feedback, what has not been sent yet (from the client's
    /// first compressed update on; spilled as `state` is).
    residual: Option<Stored<Vec<f32>>>,
    last_trained: Option<u32>,
    watch: DivergenceWatch,
}

impl<A: Algorithm> Client<A> {
    /// A client on its own, awake for good (for unit tests; runs wake clients from a
    /// [`Roster`]).
    #[cfg(test)]
    pub fn new(
        id: u32,
        unseen: bool,
        state: A::ClientState,
        jobs: Arc<JobContext<A>>,
        dispatch: Dispatch<A>,
        system: Arc<SystemModel>,
        seeds: SeedTree,
    ) -> Self {
        Client {
            kept: Some(Kept {
                state: Stored::in_memory(state),
                residual: None,
                last_trained: None,
                watch: DivergenceWatch::new(jobs.on_divergence),
            }),
            id,
            unseen,
            jobs,
            dispatch,
            system,
            seeds,
            awaited: 0,
            roster: None,
            introduce: false,
            in_flight: Vec::new(),
            version: 0,
        }
    }

    fn kept(&mut self) -> &mut Kept<A> {
        self.kept.as_mut().expect("an awake client keeps its state")
    }

    #[cfg(test)]
    fn me(&self) -> crate::sim::EntityId {
        super::world::member_entity(self.id)
    }

    /// Job `job`'s local plan over `n_train` rows and its compute time: the scenario's work,
    /// or the part of it `system.local_work` draws, cut (under `late_updates: partial_work`)
    /// to the most minibatch steps whose compute ends by `compute_by` (compute grows with the
    /// steps); a job that cannot fit one step keeps its whole work.
    fn job_work(
        &self,
        now: SimTime,
        job: u64,
        n_train: usize,
        compute_by: Option<SimTime>,
    ) -> Result<(LocalPlan, SimDuration), SimError> {
        let planned = &self.jobs.training.plan;
        let plan = LocalPlan {
            work: self.system.local_work(self.id, job, planned.work),
            ..*planned
        };
        let compute_of = |plan: &LocalPlan| {
            let samples = self.jobs.algorithm.samples_processed(plan, n_train);
            self.system.compute_time(self.id, job, samples)
        };
        let compute = compute_of(&plan)?;
        let Some(by) = compute_by.filter(|&by| now + compute > by) else {
            return Ok((plan, compute));
        };
        let steps = move |steps: u32| LocalPlan {
            work: LocalWork::Steps(steps),
            ..plan
        };
        // Binary search: `fitting` steps end in time, `too_many` do not (all of them did not).
        let (mut fitting, mut too_many) = (0, plan.steps(n_train).min(u32::MAX as u64) as u32);
        while too_many - fitting > 1 {
            let mid = fitting + (too_many - fitting) / 2;
            match now + compute_of(&steps(mid))? <= by {
                true => fitting = mid,
                false => too_many = mid,
            }
        }
        if fitting == 0 {
            return Ok((plan, compute));
        }
        let cut = steps(fitting);
        Ok((cut, compute_of(&cut)?))
    }

    /// Starts a training job, unless the client drops out or goes offline before its
    /// compute ends (then the server hears of the failure when it happens).
    fn train(
        &mut self,
        now: SimTime,
        order: TrainOrder<A>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let saved = order.saved();
        let TrainOrder {
            round,
            job,
            global,
            lr,
            upload,
            clip,
            compute_by,
        } = order;
        let n_train = self.jobs.data.split_len(self.id as usize, Split::Train);
        let (plan, compute) = self.job_work(now, job, n_train, compute_by)?;
        let steps = plan.steps(n_train);
        let online_until = self.system.online_until(self.id, now).unwrap_or(now);
        let cut_short = self
            .system
            .cut_short(self.id, job, now, online_until, compute);
        if let Some(after) = cut_short {
            self.fail(round, after, after, eff);
            return Ok(());
        }
        let residual = self.kept().residual.clone();
        self.in_flight.push(JobInFlight::Training {
            started: now,
            order: saved,
            residual,
        });
        let base = global.clone();
        // Local privacy's noise (or its share of the server's): the client's own stream for
        // this job.
        let mut noise = (self.jobs.privacy.as_ref())
            .filter(|p| p.client_noise_std().is_some())
            .map(|_| {
                self.seeds
                    .rng(Entity::Client(self.id), "privacy_noise", job)
            });
        // A malicious client's own attack (its Gaussian draws from its `attack` stream).
        let own_attack = (self.jobs.adversary.as_ref()).is_some_and(|a| a.attack.is_own());
        let mut attack = (own_attack && self.jobs.is_malicious(self.id))
            .then(|| self.seeds.rng(Entity::Client(self.id), "attack", job));
        // Compression's draws (random-k, QSGD, quantization) and error feedback's residual.
        let compression = self.jobs.uplink.is_some().then(|| {
            let rng = self.seeds.rng(Entity::Client(self.id), "compression", job);
            (rng, self.kept().residual.take())
        });
        let job = TrainJob {
            client: self.id,
            round,
            lr,
            global,
            state: self.kept().state.clone(),
            rng: self.seeds.rng(Entity::Client(self.id), "train", job),
            work: plan.work,
            uploads: upload,
            keeps_state: true,
        };
        let (jobs, client) = (self.jobs.clone(), self.id);
        // On the pool: checked, counted and spilled before the result waits for its time.
        let pending = self.dispatch.train(job, move |mut t| {
            let on_device = t.on_device.take();
            let state_on_device = t.state_on_device.take();
            let finite = t.update.is_finite()
                && t.state.is_finite()
                && on_device.as_ref().is_none_or(KeptFloats::is_finite)
                && state_on_device.as_ref().is_none_or(KeptFloats::is_finite);
            let loss = upload
                .then(|| jobs.starting_loss(client, &base, &mut t.update))
                .flatten();
            // The residual read back (empty before the client's first compressed update).
            let mut compression = compression.map(|(rng, kept)| {
                let residual = kept.map(|r| {
                    r.into_inner()
                        .unwrap_or_else(|e| panic!("reading a residual back: {e}"))
                });
                (rng, residual.unwrap_or_default())
            });
            let (update, bytes, privacy) = if upload {
                let dp_sgd_steps = jobs.dp_sgd_steps(&base, &mut t.update, steps);
                let (mut privacy, bytes) = jobs.prepare_upload(
                    &base,
                    &mut t.update,
                    attack.as_mut(),
                    clip,
                    noise.as_mut(),
                    compression.as_mut().map(|(rng, r)| (rng, r)),
                );
                privacy.dp_sgd_steps = dp_sgd_steps;
                match on_device {
                    // Nothing above touched it (`keeps_update_on_device`); its vectors count.
                    Some(kept) => {
                        let bytes = bytes + payload_bytes(kept.floats());
                        (Stored::on_device(t.update, Arc::new(kept)), bytes, privacy)
                    }
                    None => (jobs.keep(t.update), bytes, privacy),
                }
            } else {
                (Stored::in_memory(t.update), 0, PrivacyNote::default())
            };
            let residual = compression.map(|(_, r)| r).filter(|r| !r.is_empty());
            Routed::Member(ToClient::Trained(FinishedWork {
                round,
                finite,
                update,
                bytes,
                state: match state_on_device {
                    Some(kept) => Stored::on_device(t.state, Arc::new(kept)),
                    None => jobs.keep(t.state),
                },
                residual: residual.map(|r| jobs.keep(r)),
                upload,
                compute,
                privacy,
                loss,
            }))
        });
        self.awaited += 1;
        eff.to_member_pending(self.id, compute, pending);
        Ok(())
    }

    /// Tells the server, `after` from now, that this job is lost (after `compute` of work).
    fn fail(&self, round: u32, after: SimDuration, compute: SimDuration, eff: &mut FlEffects<A>) {
        eff.to_hub(
            after,
            ToServer::Failed {
                round,
                client: self.id,
                compute,
            },
        );
    }

    fn trained(
        &mut self,
        now: SimTime,
        work: FinishedWork<A>,
        eff: &mut FlEffects<A>,
    ) -> Result<(), SimError> {
        let FinishedWork {
            round,
            update,
            bytes,
            state,
            residual,
            upload,
            compute,
            privacy,
            loss,
            ..
        } = work;
        (self.in_flight).retain(|j| !matches!(j, JobInFlight::Training { .. }));
        self.version += 1;
        let kept = self.kept();
        kept.state = state;
        kept.residual = residual;
        kept.last_trained = Some(round);
        let delay = self.system.transfer_time(self.id, Link::Up, bytes)?;
        let online_until = self.system.online_until(self.id, now).unwrap_or(now);
        if online_until < now + delay {
            self.fail(round, online_until - now, compute, eff);
            return Ok(());
        }
        let client = self.id;
        let msg = if upload {
            ToServer::Update {
                round,
                client,
                update,
                bytes,
                compute,
                privacy,
                loss,
            }
        } else {
            ToServer::Done {
                round,
                client,
                compute,
            }
        };
        eff.to_hub(delay, msg);
        Ok(())
    }

    fn evaluate(
        &mut self,
        now: SimTime,
        round: u32,
        global: Arc<A::Global>,
        eff: &mut FlEffects<A>,
    ) {
        self.in_flight.push(JobInFlight::Evaluation {
            started: now,
            round,
            global: global.clone(),
            version: self.version,
        });
        let job = EvalJob {
            client: self.id,
            round,
            global,
            state: self.kept().state.clone(),
            unseen: self.unseen,
            scores_novelty: true,
            rng: self
                .seeds
                .rng(Entity::Client(self.id), "evaluate", round as u64),
        };
        let pending = self.dispatch.evaluate(job, move |e| {
            Routed::Member(ToClient::Evaluated {
                round,
                results: e.results,
                report: e.report,
            })
        });
        self.awaited += 1;
        eff.to_member_pending(self.id, SimDuration::ZERO, pending);
    }

    fn evaluated(
        &mut self,
        now: SimTime,
        round: u32,
        results: Vec<Evaluation>,
        mut report: ClientReport,
        eff: &mut FlEffects<A>,
    ) {
        if let Some(share) = report.novelty_share.take() {
            let client = self.id;
            let msg = ToServer::NoveltyShare {
                round,
                client,
                share,
            };
            eff.to_hub(SimDuration::ZERO, msg);
        }
        let sampled = self.kept().last_trained == Some(round);
        let context = EvalContext {
            round,
            time: now,
            client: self.id,
            sampled,
            unseen: self.unseen,
        };
        let records = super::evaluation::evaluation_records(context, results, report);
        records.into_iter().for_each(|r| eff.record(r));
    }

    /// Scores this client's rows by what every evaluated client shared, on the pool
    /// (`evaluation.novelty: max_over_clients` or `mean_weights`).
    fn score_novelty(
        &mut self,
        round: u32,
        pooled: Arc<PooledNovelty<A::Global>>,
        eff: &mut FlEffects<A>,
    ) {
        let (jobs, client) = (self.jobs.clone(), self.id);
        let pending = self.dispatch.pool().submit(move || {
            let scores = jobs.novelty_pooled(client, round, &pooled);
            Routed::Member(ToClient::NoveltyScored { round, scores })
        });
        self.awaited += 1;
        eff.to_member_pending(self.id, SimDuration::ZERO, pending);
    }
}

/// The clients of a run, awake only while they have work: a client's actor starts when a
/// message comes for it and stops when it has handled one and awaits no result of its own,
/// leaving what it keeps here. A client that never took part costs nothing but its id (its
/// state is made when it first wakes, from the initial model, as it was made eagerly before,
/// and its device is recorded then: `clients.parquet` lists the clients that took part or were
/// evaluated).
pub(super) struct Roster<A: Algorithm> {
    parts: RosterParts<A>,
    awake: RefCell<HashMap<u32, Addr<Client<A>>>>,
    /// What sleeping clients keep; a client that never trained keeps nothing here (its state
    /// is still the initial one, made again when it wakes).
    asleep: RefCell<HashMap<u32, Kept<A>>>,
    /// Bit `c` is set once client `c` has woken (and its device has been recorded).
    woken: RefCell<Vec<u64>>,
}

/// What a [`Roster`] wakes clients with.
pub(super) struct RosterParts<A: Algorithm> {
    pub jobs: Arc<JobContext<A>>,
    pub dispatch: Dispatch<A>,
    pub system: Arc<SystemModel>,
    pub seeds: SeedTree,
    /// The held-out clients, sorted.
    pub unseen: Vec<u32>,
    /// The model new client states are made from.
    pub initial: Arc<A::Global>,
    /// How many clients there are.
    pub clients: usize,
}

impl<A: Algorithm> Roster<A> {
    pub fn new(parts: RosterParts<A>) -> Rc<Self> {
        let woken = RefCell::new(vec![0; parts.clients.div_ceil(64)]);
        Rc::new(Roster {
            parts,
            awake: RefCell::default(),
            asleep: RefCell::default(),
            woken,
        })
    }

    /// Client `id`'s actor, woken if it sleeps.
    pub fn wake(self: &Rc<Self>, id: u32) -> Addr<Client<A>> {
        if let Some(addr) = self.awake.borrow().get(&id) {
            return addr.clone();
        }
        let kept = self.asleep.borrow_mut().remove(&id);
        let introduce = {
            let (word, bit) = (id as usize / 64, 1u64 << (id % 64));
            let mut woken = self.woken.borrow_mut();
            let first = woken[word] & bit == 0;
            woken[word] |= bit;
            first
        };
        let p = &self.parts;
        let kept = kept.unwrap_or_else(|| Kept {
            state: Stored::in_memory(p.jobs.algorithm.init_client(&p.initial, id)),
            residual: None,
            last_trained: None,
            watch: DivergenceWatch::new(p.jobs.on_divergence),
        });
        let addr = Client {
            id,
            unseen: p.unseen.binary_search(&id).is_ok(),
            kept: Some(kept),
            jobs: p.jobs.clone(),
            dispatch: p.dispatch.clone(),
            system: p.system.clone(),
            seeds: p.seeds,
            awaited: 0,
            roster: Some(Rc::downgrade(self)),
            introduce,
            in_flight: Vec::new(),
            version: 0,
        }
        .start();
        self.awake.borrow_mut().insert(id, addr.clone());
        addr
    }

    fn sleep(&self, id: u32, kept: Kept<A>) {
        self.awake.borrow_mut().remove(&id);
        let untouched = kept.last_trained.is_none() && !kept.watch.seen;
        if !untouched {
            self.asleep.borrow_mut().insert(id, kept);
        }
    }

    /// The awake clients, in id order.
    pub fn awake(&self) -> Vec<(u32, Addr<Client<A>>)> {
        let mut awake: Vec<_> = (self.awake.borrow().iter())
            .map(|(&id, addr)| (id, addr.clone()))
            .collect();
        awake.sort_unstable_by_key(|(id, _)| *id);
        awake
    }

    /// Writes what the clients keep into `w`, one sleeping client at a time (read back from
    /// the spill file where it was spilled): who has woken, how many sleeping clients keep
    /// something, then each one's id and what it keeps, in id order; then `awake`, what each
    /// awake client saved ([`SaveClient`]), in id order.
    pub fn write_kept(&self, w: &mut dyn Write, awake: &[(u32, Vec<u8>)]) -> Result<(), SimError> {
        let asleep = self.asleep.borrow();
        encode_into(&*self.woken.borrow(), w)?;
        encode_into(&(asleep.len() as u64), w)?;
        let mut ids: Vec<u32> = asleep.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let k = &asleep[&id];
            let read = |e: crate::io::SpillError| {
                SimError::JobFailed(format!("reading client {id}'s state for a checkpoint: {e}"))
            };
            let kept = KeptState {
                state: k.state.clone().into_inner().map_err(read)?,
                residual: (k.residual.clone())
                    .map(Stored::into_inner)
                    .transpose()
                    .map_err(read)?,
                last_trained: k.last_trained,
                watch: k.watch,
            };
            encode_into(&(id, kept), w)?;
        }
        encode_into(&awake, w)
    }

    /// Gives a roster of sleeping clients what [`Roster::write_kept`] wrote, read from `r`
    /// one client at a time (each spilled as the run spills values of its size); the clients
    /// that were awake keep what their jobs in flight started from, and the jobs are handed
    /// back by client, in the order they started, to be started again ([`Restart`]).
    pub fn read_kept(&self, r: &mut dyn Read) -> Result<Vec<(u32, Vec<SavedJob>)>, SimError> {
        let woken: Vec<u64> = decode_from(r, "the clients who have woken")?;
        if woken.len() != self.woken.borrow().len() {
            return Err(SimError::Internal(
                "a checkpoint's clients do not match the scenario's".into(),
            ));
        }
        *self.woken.borrow_mut() = woken;
        let count: u64 = decode_from(r, "the number of clients kept")?;
        let jobs = &self.parts.jobs;
        let mut asleep = self.asleep.borrow_mut();
        let kept = |k: KeptState<A::ClientState>| Kept {
            state: jobs.keep(k.state),
            residual: k.residual.map(|r| jobs.keep(r)),
            last_trained: k.last_trained,
            watch: k.watch,
        };
        for _ in 0..count {
            let (id, k): (u32, KeptState<A::ClientState>) = decode_from(r, "a client's state")?;
            asleep.insert(id, kept(k));
        }
        let awake: Vec<(u32, Vec<u8>)> = decode_from(r, "the awake clients")?;
        let mut restarts = Vec::with_capacity(awake.len());
        for (id, bytes) in awake {
            let a: AwakeClient<A::ClientState> = decode(&bytes, "an awake client's state")?;
            asleep.insert(id, kept(a.kept));
            restarts.push((id, a.jobs));
        }
        Ok(restarts)
    }

    /// Clients awake now, and asleep with something kept.
    #[cfg(test)]
    pub fn counts(&self) -> (usize, usize) {
        (self.awake.borrow().len(), self.asleep.borrow().len())
    }
}

/// What a sleeping client keeps, as a checkpoint holds it.
#[derive(Serialize, Deserialize)]
struct KeptState<S> {
    state: S,
    residual: Option<Vec<f32>>,
    last_trained: Option<u32>,
    watch: DivergenceWatch,
}

impl<A: Algorithm> Actor for Client<A> {
    type Context = Context<Self>;
}

impl<A: Algorithm> Handler<Deliver<ToClient<A>, Msg<A>>> for Client<A> {
    type Result = Result<FlEffects<A>, SimError>;

    fn handle(&mut self, d: Deliver<ToClient<A>, Msg<A>>, ctx: &mut Context<Self>) -> Self::Result {
        let id = self.id;
        let mut eff =
            super::world::guarded(|| format!("client {id}"), || self.on_message(d.now, d.msg))?;
        if std::mem::take(&mut self.introduce) {
            eff.record(super::init::device_record(&self.system, self.id));
        }
        if self.awaited == 0 {
            if let Some(roster) = self.roster.as_ref().and_then(Weak::upgrade) {
                let kept = self.kept.take().expect("a client sleeps once");
                roster.sleep(self.id, kept);
                ctx.stop();
            }
        }
        Ok(eff)
    }
}

impl<A: Algorithm> Client<A> {
    /// The client's whole behaviour: one message in, its effects out (its jobs go to the
    /// trainer pool and come back as pending messages).
    fn on_message(&mut self, now: SimTime, msg: ToClient<A>) -> Result<FlEffects<A>, SimError> {
        let mut eff = FlEffects::<A>::new();
        match msg {
            ToClient::Train(order) => self.train(now, order, &mut eff)?,
            ToClient::Trained(work) => {
                self.awaited -= 1;
                let at = Seen {
                    round: work.round,
                    time: now,
                    client: Some(self.id),
                };
                self.kept()
                    .watch
                    .check(work.finite, at, DivergenceStage::Training, &mut eff);
                self.trained(now, work, &mut eff)?
            }
            ToClient::Evaluate { round, global } => self.evaluate(now, round, global, &mut eff),
            ToClient::Evaluated {
                round,
                results,
                report,
            } => {
                self.awaited -= 1;
                let done = (self.in_flight.iter()).position(
                    |j| matches!(j, JobInFlight::Evaluation { round: r, .. } if *r == round),
                );
                done.map(|i| self.in_flight.remove(i));
                let at = Seen {
                    round,
                    time: now,
                    client: Some(self.id),
                };
                self.kept().watch.check_evaluation(&results, at, &mut eff);
                self.evaluated(now, round, results, report, &mut eff)
            }
            ToClient::ScoreNovelty { round, pooled } => self.score_novelty(round, pooled, &mut eff),
            ToClient::NoveltyScored { round, scores } => {
                self.awaited -= 1;
                if let Some(scores) = scores {
                    eff.record(Record::Novelty(NoveltyRecord {
                        round,
                        client: self.id,
                        unseen: self.unseen,
                        scores,
                    }));
                }
            }
        }
        Ok(eff)
    }
}

/// Asks an awake client for what a checkpoint saves of it: an [`AwakeClient`], encoded, with
/// the global model each of its evaluations in flight started from (which must be the
/// server's); `None` where it cannot be saved now (it is scoring novelty, or an evaluation
/// started from a state it has since changed).
pub(super) struct SaveClient<G>(std::marker::PhantomData<fn() -> G>);

impl<G> SaveClient<G> {
    pub fn new() -> Self {
        SaveClient(std::marker::PhantomData)
    }
}

impl<G: 'static> actix::Message for SaveClient<G> {
    type Result = Result<Option<(Vec<u8>, Vec<Arc<G>>)>, SimError>;
}

/// What a checkpoint saves of an awake client: what it keeps, as it was when its jobs in
/// flight started, and the jobs, in the order they started.
#[derive(Serialize, Deserialize)]
struct AwakeClient<S> {
    kept: KeptState<S>,
    jobs: Vec<SavedJob>,
}

/// A client's job in flight as a checkpoint saves it ([`JobInFlight`] less its models).
#[derive(Clone, Copy, Serialize, Deserialize)]
pub(super) enum SavedJob {
    Training { started: SimTime, order: SavedOrder },
    Evaluation { started: SimTime, round: u32 },
}

impl<A: Algorithm> Handler<SaveClient<A::Global>> for Client<A> {
    type Result = Result<Option<(Vec<u8>, Vec<Arc<A::Global>>)>, SimError>;

    fn handle(&mut self, _: SaveClient<A::Global>, _: &mut Context<Self>) -> Self::Result {
        let current = |j: &JobInFlight<_>| match j {
            JobInFlight::Evaluation { version, .. } => *version == self.version,
            JobInFlight::Training { .. } => true,
        };
        // Where cohorts keep momentum on the device, a started shard holds its buffer.
        let training = (self.in_flight.iter()).any(|j| matches!(j, JobInFlight::Training { .. }));
        let resident = training && self.dispatch.keeps_state_outside_clients();
        if self.awaited != self.in_flight.len() || !self.in_flight.iter().all(current) || resident {
            return Ok(None);
        }
        let id = self.id;
        let read = |e: crate::io::SpillError| {
            SimError::JobFailed(format!("reading client {id}'s state for a checkpoint: {e}"))
        };
        let kept = self.kept.as_ref().expect("an awake client keeps its state");
        // A training job took the residual: it started from it.
        let taken = self.in_flight.iter().find_map(|j| match j {
            JobInFlight::Training { residual, .. } => Some(residual),
            JobInFlight::Evaluation { .. } => None,
        });
        let residual = taken.unwrap_or(&kept.residual);
        let kept = KeptState {
            state: kept.state.clone().into_inner().map_err(read)?,
            residual: (residual.clone())
                .map(Stored::into_inner)
                .transpose()
                .map_err(read)?,
            last_trained: kept.last_trained,
            watch: kept.watch,
        };
        let mut globals = Vec::new();
        let jobs = (self.in_flight.iter())
            .map(|j| match j {
                JobInFlight::Training { started, order, .. } => SavedJob::Training {
                    started: *started,
                    order: *order,
                },
                JobInFlight::Evaluation {
                    started,
                    round,
                    global,
                    ..
                } => {
                    globals.push(global.clone());
                    SavedJob::Evaluation {
                        started: *started,
                        round: *round,
                    }
                }
            })
            .collect();
        let awake = AwakeClient { kept, jobs };
        Ok(Some((super::checkpoint::encode(&awake), globals)))
    }
}

/// Starts a client's saved jobs again, each at the time it started and in the order they
/// started ([`Roster::read_kept`] gave the client the state they started from): training
/// jobs with the model the server saved for them, evaluations with the server's global model.
pub(super) struct Restart<A: Algorithm> {
    pub jobs: Vec<SavedJob>,
    pub job_model: Option<Arc<A::Global>>,
    pub global: Arc<A::Global>,
}

impl<A: Algorithm> actix::Message for Restart<A> {
    type Result = Result<Vec<(SimTime, FlEffects<A>)>, SimError>;
}

impl<A: Algorithm> Handler<Restart<A>> for Client<A> {
    type Result = Result<Vec<(SimTime, FlEffects<A>)>, SimError>;

    fn handle(&mut self, r: Restart<A>, _: &mut Context<Self>) -> Self::Result {
        let mut restarted = Vec::with_capacity(r.jobs.len());
        for job in r.jobs {
            let mut eff = FlEffects::<A>::new();
            let at = match job {
                SavedJob::Training { started, order } => {
                    let model = (r.job_model.clone()).ok_or_else(|| {
                        SimError::Internal(format!(
                            "client {}'s training job in flight has no saved model",
                            self.id
                        ))
                    })?;
                    self.train(started, TrainOrder::from_saved(order, model), &mut eff)?;
                    started
                }
                SavedJob::Evaluation { started, round } => {
                    self.evaluate(started, round, r.global.clone(), &mut eff);
                    started
                }
            };
            restarted.push((at, eff));
        }
        Ok(restarted)
    }
}

impl<A: Algorithm> Members<ToClient<A>, Msg<A>> for Rc<Roster<A>> {
    type Actor = Client<A>;
    fn addr(&self, index: u32) -> Addr<Client<A>> {
        self.wake(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::{FedAvg, ModelUpdate};
    use crate::records::Record;
    use crate::settings::OnDivergence;

    /// Client 0 of a tiny FedAvg run, with `overrides` on the scenario. Needs a running actix
    /// system (for its trainer pool).
    fn client(overrides: &[&str]) -> Client<FedAvg> {
        let system = "system: {compute: {samples_per_second: 100}, network: {latency_ms: 50}}\n";
        let (_, jobs, system) = crate::actors::testkit::fedavg_run(system, overrides);
        let seeds = SeedTree::new(1);
        let dispatch = Dispatch::new(
            crate::actors::TrainerPool::start(1, crate::settings::Precision::Fp32),
            jobs.clone(),
        );
        Client::new(0, false, Vec::new(), jobs, dispatch, system, seeds)
    }

    fn trained(finite: bool) -> ToClient<FedAvg> {
        ToClient::Trained(FinishedWork {
            round: 1,
            update: Stored::in_memory(ModelUpdate {
                params: vec![if finite { 0.5 } else { f32::NAN }; 4],
                weight: 10.0,
            }),
            bytes: 16,
            state: Stored::in_memory(Vec::new()),
            residual: None,
            upload: true,
            compute: SimDuration(7),
            finite,
            privacy: PrivacyNote::default(),
            loss: None,
        })
    }

    fn train(round: u32) -> ToClient<FedAvg> {
        ToClient::Train(TrainOrder {
            round,
            job: round as u64,
            global: Arc::new(vec![0.0; 4]),
            lr: 0.1,
            upload: true,
            clip: None,
            compute_by: None,
        })
    }

    #[test]
    fn training_is_a_pending_job_due_when_the_device_finishes() {
        actix::System::new().block_on(async {
            let mut c = client(&[]);
            let eff = c.on_message(SimTime::ZERO, train(1)).unwrap();
            let sends: Vec<_> = eff.sends().collect();
            assert_eq!(sends.len(), 1);
            let (to, delay, msg) = sends[0];
            assert_eq!(to, c.me());
            assert!(msg.is_none(), "a pending result");
            let n = c.jobs.data.split_len(0, Split::Train) as u64;
            assert_eq!(delay, c.system.compute_time(0, 1, n).unwrap());
        });
    }

    /// Client 0's first training job with `training.spill` set to `spill`, as the client gets it.
    async fn first_job(spill: &str) -> FinishedWork<FedAvg> {
        let spill = format!("training.spill={spill}");
        let mut c = client(&[&spill, "training.momentum=0.9", "training.cohorts=off"]);
        let eff = c.on_message(SimTime::ZERO, train(1)).unwrap();
        let pending = eff.into_pending().pop().expect("a pending result");
        match pending.await.expect("answered").expect("trained") {
            Routed::Member(ToClient::Trained(work)) => work,
            _ => panic!("not a training result"),
        }
    }

    #[test]
    fn a_finished_jobs_state_and_update_wait_in_the_spill_file() {
        actix::System::new().block_on(async {
            let (kept, spilled) = (first_job("off").await, first_job("always").await);
            assert!(!kept.state.is_spilled() && !kept.update.is_spilled());
            assert!(spilled.state.is_spilled() && spilled.update.is_spilled());
            assert_eq!(spilled.bytes, kept.bytes);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let (a, b) = (
                kept.state.into_inner().unwrap(),
                spilled.state.into_inner().unwrap(),
            );
            assert!(!a.is_empty(), "a momentum buffer");
            assert_eq!(bits(&a), bits(&b));
            let (a, b) = (
                kept.update.into_inner().unwrap(),
                spilled.update.into_inner().unwrap(),
            );
            assert_eq!(bits(&a.params), bits(&b.params));
        });
    }

    #[test]
    fn a_client_that_drops_out_reports_the_failure_when_it_happens() {
        actix::System::new().block_on(async {
            let mut c = client(&["system.dropout=0.999"]);
            let eff = c.on_message(SimTime::ZERO, train(1)).unwrap();
            let sends: Vec<_> = eff.sends().collect();
            let fraction = c.system.dropout_point(0, 1).expect("drops out");
            let n = c.jobs.data.split_len(0, Split::Train) as u64;
            let compute = c.system.compute_time(0, 1, n).unwrap();
            let after = SimDuration::from_secs_f64_ceil(compute.as_secs_f64() * fraction);
            assert!(matches!(
                sends[..],
                [(to, d, Some(Routed::Hub(ToServer::Failed { round: 1, client: 0, .. })))]
                    if to == crate::actors::world::HUB && d == after
            ));
        });
    }

    #[test]
    fn a_trained_update_goes_to_the_server_after_its_upload() {
        actix::System::new().block_on(async {
            let mut c = client(&[]);
            // As if its training job had been started.
            c.awaited = 1;
            let eff = c.on_message(SimTime(1000), trained(true)).unwrap();
            let upload = c
                .system
                .transfer_time(0, Link::Up, crate::system::payload_bytes(4))
                .unwrap();
            let sends: Vec<_> = eff.sends().collect();
            assert!(matches!(
                sends[..],
                [(to, d, Some(Routed::Hub(ToServer::Update { round: 1, client: 0, .. })))]
                    if to == crate::actors::world::HUB && d == upload
            ));
            assert!(eff.records().is_empty() && !eff.stops());
            assert_eq!(c.kept().last_trained, Some(1));
        });
    }

    #[test]
    fn non_finite_training_is_recorded_once_and_stops_or_runs_on() {
        actix::System::new().block_on(async {
            let mut stop = client(&[]);
            // As if their training jobs had been started.
            stop.awaited = 1;
            let eff = stop.on_message(SimTime(1000), trained(false)).unwrap();
            assert!(eff.stops());
            assert!(matches!(eff.records(), [Record::Diverged(d)] if d.client == Some(0)));
            let mut go_on = client(&["on_divergence=continue"]);
            assert_eq!(go_on.jobs.on_divergence, OnDivergence::Continue);
            go_on.awaited = 2;
            let first = go_on.on_message(SimTime(1000), trained(false)).unwrap();
            assert!(!first.stops() && first.records().len() == 1);
            assert_eq!(
                first.sends().count(),
                1,
                "the update still goes to the server"
            );
            let second = go_on.on_message(SimTime(2000), trained(false)).unwrap();
            assert!(second.records().is_empty(), "recorded once per client");
        });
    }

    #[test]
    fn a_client_sleeps_when_it_awaits_nothing_and_wakes_with_what_it_kept() {
        use crate::actors::world::Deliver;
        use crate::algorithms::Evaluation;
        use crate::models::EvalStats;
        actix::System::new().block_on(async {
            let (_, jobs, system) = crate::actors::testkit::fedavg_run("", &[]);
            let dispatch = Dispatch::new(
                crate::actors::TrainerPool::start(1, crate::settings::Precision::Fp32),
                jobs.clone(),
            );
            let roster = Roster::new(RosterParts {
                initial: Arc::new(vec![0.0; 4]),
                jobs,
                dispatch,
                system,
                seeds: SeedTree::new(1),
                unseen: vec![1],
                clients: 2,
            });
            let deliver = |msg: ToClient<FedAvg>| {
                let addr = roster.wake(0);
                async move {
                    let now = SimTime(1000);
                    addr.send(Deliver::new(now, msg)).await.unwrap().unwrap()
                }
            };
            assert_eq!(roster.counts(), (0, 0), "nobody is awake before a message");
            let eff = deliver(train(1)).await;
            assert!(
                matches!(eff.sends().next(), Some((_, _, None))),
                "a pending job"
            );
            assert_eq!(roster.counts(), (1, 0), "awake while its job runs");
            deliver(trained(true)).await;
            assert_eq!(roster.counts(), (0, 1), "asleep once the update is sent");
            // Woken again for an evaluation, it still knows it trained in round 1.
            let stats = EvalStats {
                n: 5,
                loss: 0.3,
                accuracy: 0.8,
            };
            let results = vec![Evaluation {
                model: crate::records::ModelKind::Global,
                split: Split::Test,
                stats,
            }];
            let global = Arc::new(vec![0.0; 4]);
            deliver(ToClient::Evaluate { round: 1, global }).await;
            assert_eq!(roster.counts(), (1, 0));
            let report = ClientReport::default();
            let eff = deliver(ToClient::Evaluated {
                round: 1,
                results,
                report,
            })
            .await;
            assert!(matches!(eff.records(), [Record::Eval(e)] if e.sampled && !e.unseen));
            assert_eq!(roster.counts(), (0, 1));
            // Client 1 is only evaluated: it keeps nothing, and its device is recorded once.
            let evaluate = |round: u32| {
                let addr = roster.wake(1);
                let global = Arc::new(vec![0.0; 4]);
                async move {
                    let msg = ToClient::Evaluate { round, global };
                    let now = SimTime(1000);
                    addr.send(Deliver::new(now, msg)).await.unwrap().unwrap()
                }
            };
            let devices = |eff: &FlEffects<FedAvg>| {
                eff.records()
                    .iter()
                    .filter(|r| matches!(r, Record::Device(d) if d.client == 1))
                    .count()
            };
            assert_eq!(
                devices(&evaluate(1).await),
                1,
                "recorded when it first wakes"
            );
            let msg = ToClient::Evaluated {
                round: 1,
                results: Vec::new(),
                report: ClientReport::default(),
            };
            let now = SimTime(1000);
            roster
                .wake(1)
                .send(Deliver::new(now, msg))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(roster.counts(), (0, 1), "client 1 sleeps keeping nothing");
            assert_eq!(devices(&evaluate(2).await), 0, "and is not recorded again");
        });
    }
}
