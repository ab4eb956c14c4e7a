//! A client: trains when the server asks, evaluates when asked, and keeps its own state
//! between rounds. Its jobs run on the trainer pool; their results come back to it as
//! pending messages at the time the system model says they finish.

use super::cohort::{Dispatch, TrainJob};
use super::{Deliver, DivergenceWatch, FlEffects, JobContext, Msg, SERVER};
use crate::algorithms::{Algorithm, ClientReport, Evaluation, Finite, NoveltyScores};
use crate::data::Split;
use crate::report::DivergenceStage;
use crate::sim::{Entity, SeedTree, SimDuration, SimError, SimTime};
use crate::system::{payload_bytes, Link, SystemModel};
use actix::prelude::*;
use std::sync::Arc;

pub(super) struct Client<A: Algorithm> {
    id: u32,
    /// Held out of training: adapts to the trained model only to be tested.
    unseen: bool,
    state: A::ClientState,
    jobs: Arc<JobContext<A>>,
    dispatch: Dispatch<A>,
    system: Arc<SystemModel>,
    seeds: SeedTree,
    last_trained: Option<u32>,
    watch: DivergenceWatch,
}

impl<A: Algorithm> Client<A> {
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
            watch: DivergenceWatch::new(jobs.on_divergence),
            id,
            unseen,
            state,
            jobs,
            dispatch,
            system,
            last_trained: None,
            seeds,
        }
    }

    fn me(&self) -> crate::sim::EntityId {
        super::client_entity(self.id)
    }

    /// Starts a training job, unless the client drops out or goes offline before its
    /// compute ends (then the server hears of the failure when it happens).
    fn train(
        &mut self,
        now: SimTime,
        (round, job): (u32, u64),
        global: Arc<A::Global>,
        lr: f64,
        upload: bool,
        eff: &mut FlEffects<A>,
    ) {
        let n_train = self.jobs.data.split_len(self.id as usize, Split::Train);
        let samples = self
            .jobs
            .algorithm
            .samples_processed(&self.jobs.training.plan, n_train);
        let compute = self.system.compute_time(self.id, job, samples);
        let online_until = self.system.online_until(self.id, now).unwrap_or(now);
        let dropout = self
            .system
            .dropout_point(self.id, job)
            .map(|f| SimDuration::from_secs_f64_ceil(compute.as_secs_f64() * f));
        let offline = (online_until < now + compute).then(|| online_until - now);
        if let Some(after) = [dropout, offline].into_iter().flatten().min() {
            self.fail(round, after, after, eff);
            return;
        }
        let job = TrainJob {
            client: self.id,
            round,
            lr,
            global,
            state: self.state.clone(),
            rng: self.seeds.rng(Entity::Client(self.id), "train", job),
        };
        let pending = self.dispatch.train(job, move |t| Msg::Trained {
            round,
            finite: t.update.is_finite() && t.state.is_finite(),
            update: t.update,
            state: t.state,
            upload,
            compute,
        });
        eff.send_pending(self.me(), compute, pending);
    }

    /// Tells the server, `after` from now, that this job is lost (after `compute` of work).
    fn fail(&self, round: u32, after: SimDuration, compute: SimDuration, eff: &mut FlEffects<A>) {
        eff.send(
            SERVER,
            after,
            Msg::Failed {
                round,
                client: self.id,
                compute,
            },
        );
    }

    fn trained(
        &mut self,
        now: SimTime,
        round: u32,
        update: A::Update,
        state: A::ClientState,
        (upload, compute): (bool, SimDuration),
        eff: &mut FlEffects<A>,
    ) {
        self.state = state;
        self.last_trained = Some(round);
        let floats = if upload {
            self.jobs.algorithm.update_len(&update)
        } else {
            0
        };
        let delay = self
            .system
            .transfer_time(self.id, Link::Up, payload_bytes(floats));
        let online_until = self.system.online_until(self.id, now).unwrap_or(now);
        if online_until < now + delay {
            self.fail(round, online_until - now, compute, eff);
            return;
        }
        let client = self.id;
        let msg = if upload {
            Msg::Update {
                round,
                client,
                update,
                compute,
            }
        } else {
            Msg::Done {
                round,
                client,
                compute,
            }
        };
        eff.send(SERVER, delay, msg);
    }

    fn evaluate(&mut self, round: u32, global: Arc<A::Global>, eff: &mut FlEffects<A>) {
        let (jobs, id) = (self.jobs.clone(), self.id);
        let (state, unseen) = (self.state.clone(), self.unseen);
        let mut rng = self.seeds.rng(Entity::Client(id), "evaluate", round as u64);
        let pending = self.dispatch.pool().submit(move || {
            let ctx = jobs.local(id, round, jobs.training.lr_at(round));
            let alg = &jobs.algorithm;
            let state = match unseen {
                true => alg.adapt_unseen(&ctx, &global, &mut rng),
                false => state,
            };
            let results = alg.evaluate(&ctx, &global, &state, &mut rng);
            let mut report = alg.report(&global, &state, id);
            if !jobs.data.novel.is_empty() {
                let test = jobs.data.view(id as usize, Split::Test);
                let novel = jobs.data.novel_view(id as usize);
                let typical = alg.typicality(&ctx, &global, &state, test);
                report.novelty = typical
                    .zip(alg.typicality(&ctx, &global, &state, novel))
                    .map(|(typical, novel)| NoveltyScores { typical, novel });
            }
            Msg::Evaluated {
                round,
                results,
                report,
            }
        });
        eff.send_pending(self.me(), SimDuration::ZERO, pending);
    }

    fn evaluated(
        &self,
        now: SimTime,
        round: u32,
        results: Vec<Evaluation>,
        report: ClientReport,
        eff: &mut FlEffects<A>,
    ) {
        let sampled = self.last_trained == Some(round);
        let records = super::evaluation_records(
            (round, now, self.id),
            results,
            report,
            (sampled, self.unseen),
        );
        records.into_iter().for_each(|r| eff.record(r));
    }
}

impl<A: Algorithm> Actor for Client<A> {
    type Context = Context<Self>;
}

impl<A: Algorithm> Handler<Deliver<Msg<A>>> for Client<A> {
    type Result = Result<FlEffects<A>, SimError>;

    fn handle(&mut self, d: Deliver<Msg<A>>, _: &mut Context<Self>) -> Self::Result {
        self.on_message(d.now, d.msg)
    }
}

impl<A: Algorithm> Client<A> {
    /// The client's whole behaviour: one message in, its effects out (its jobs go to the
    /// trainer pool and come back as pending messages).
    fn on_message(&mut self, now: SimTime, msg: Msg<A>) -> Result<FlEffects<A>, SimError> {
        let mut eff = FlEffects::<A>::new();
        match msg {
            Msg::Train {
                round,
                job,
                global,
                lr,
                upload,
            } => self.train(now, (round, job), global, lr, upload, &mut eff),
            Msg::Trained {
                round,
                update,
                state,
                upload,
                compute,
                finite,
            } => {
                let at = (round, now, Some(self.id));
                self.watch
                    .check(finite, at, DivergenceStage::Training, &mut eff);
                self.trained(now, round, update, state, (upload, compute), &mut eff)
            }
            Msg::Evaluate { round, global } => self.evaluate(round, global, &mut eff),
            Msg::Evaluated {
                round,
                results,
                report,
            } => {
                let at = (round, now, Some(self.id));
                self.watch.check_evaluation(&results, at, &mut eff);
                self.evaluated(now, round, results, report, &mut eff)
            }
            _ => {
                return Err(SimError::Model(format!(
                    "client {} got a server message",
                    self.id
                )))
            }
        }
        Ok(eff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::OnDivergence;
    use crate::algorithms::{FedAvg, ModelUpdate};
    use crate::report::Record;

    /// Client 0 of a tiny FedAvg run, with `overrides` on the scenario. Needs a running actix
    /// system (for its trainer pool).
    fn client(overrides: &[&str]) -> Client<FedAvg> {
        let system = "system: {compute: {samples_per_second: 100}, network: {latency_ms: 50}}\n";
        let (_, jobs, system) = crate::actors::testkit::fedavg_run(system, overrides);
        let seeds = SeedTree::new(1);
        let dispatch = Dispatch::new(crate::actors::TrainerPool::start(1), jobs.clone());
        Client::new(0, false, Vec::new(), jobs, dispatch, system, seeds)
    }

    fn trained(finite: bool) -> Msg<FedAvg> {
        Msg::Trained {
            round: 1,
            update: ModelUpdate {
                params: vec![if finite { 0.5 } else { f32::NAN }; 4],
                weight: 10.0,
            },
            state: Vec::new(),
            upload: true,
            compute: SimDuration(7),
            finite,
        }
    }

    fn train(round: u32) -> Msg<FedAvg> {
        Msg::Train {
            round,
            job: round as u64,
            global: Arc::new(vec![0.0; 4]),
            lr: 0.1,
            upload: true,
        }
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
            assert_eq!(delay, c.system.compute_time(0, 1, n));
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
            let compute = c.system.compute_time(0, 1, n);
            let after = SimDuration::from_secs_f64_ceil(compute.as_secs_f64() * fraction);
            assert!(matches!(
                sends[..],
                [(SERVER, d, Some(Msg::Failed { round: 1, client: 0, .. }))] if d == after
            ));
        });
    }

    #[test]
    fn a_trained_update_goes_to_the_server_after_its_upload() {
        actix::System::new().block_on(async {
            let mut c = client(&[]);
            let eff = c.on_message(SimTime(1000), trained(true)).unwrap();
            let upload = c.system.transfer_time(0, Link::Up, payload_bytes(4));
            let sends: Vec<_> = eff.sends().collect();
            assert!(matches!(
                sends[..],
                [(SERVER, d, Some(Msg::Update { round: 1, client: 0, .. }))] if d == upload
            ));
            assert!(eff.records().is_empty() && !eff.stops());
            assert_eq!(c.last_trained, Some(1));
        });
    }

    #[test]
    fn non_finite_training_is_recorded_once_and_stops_or_runs_on() {
        actix::System::new().block_on(async {
            let mut stop = client(&[]);
            let eff = stop.on_message(SimTime(1000), trained(false)).unwrap();
            assert!(eff.stops());
            assert!(matches!(eff.records(), [Record::Diverged(d)] if d.client == Some(0)));
            let mut go_on = client(&["on_divergence=continue"]);
            assert_eq!(go_on.jobs.on_divergence, OnDivergence::Continue);
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
}
