//! The run's entry point: a [`RunPlan`] assembled into its entities (a server and clients, or
//! peers) and run, in one visible place. The plan has decided everything; what can fail here
//! is the simulation itself (a job, the clock), never the input.

use super::checkpoint::{decode, encode, Checkpoints, Restarted, RunState};
use super::client::{self, Restart, SaveClient};
use super::evaluation;
use super::init;
use super::job::JobContext;
use super::messages::{Msg, Saved, SavedEvent, ToClient, ToServer, TrainOrder};
use super::peer;
use super::server::{self, Restored, SaveState, Server};
use super::world::{member_entity, run_world, HubWorld, Routed, Saver, SimOutput, Start, HUB};
use crate::algorithms::{Algorithm, Gossip, Planned, RunBuilt};
use crate::plan::{RunPlan, Setup};
use crate::policy::FedbuffSpec;
use crate::records::Record;
use crate::sim::{EntityId, Payload, Queued, RecordObserver, Resume, Saving, SimError};
use actix::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// Runs `plan`: its algorithm with a server or on peers, as it is registered. `observer` sees
/// every record as it is made, and says whether the output keeps them.
/// With `checkpoints`, the run saves its state where it can and one is due (see
/// [`Checkpoints`]), and starts from the checkpoint it is given, if any.
pub fn simulate(
    plan: RunPlan,
    observer: RecordObserver<Record>,
    checkpoints: Option<Checkpoints>,
) -> Result<SimOutput, SimError> {
    let RunPlan { algorithm, setup } = plan;
    algorithm.run(Assemble {
        setup,
        observer,
        checkpoints,
    })
}

/// What [`Built::run`](crate::algorithms::Built::run) hands the algorithm to.
struct Assemble {
    setup: Setup,
    observer: RecordObserver<Record>,
    checkpoints: Option<Checkpoints>,
}

impl RunBuilt for Assemble {
    type Output = Result<SimOutput, SimError>;

    fn server<A: Algorithm>(self, planned: Planned<A>) -> Self::Output {
        simulate_server(planned, self.setup, self.observer, self.checkpoints)
    }

    fn peers<A: Gossip>(self, planned: Planned<A>) -> Self::Output {
        peer::simulate_peers(planned, self.setup, self.observer, self.checkpoints)
    }
}

/// Runs `planned` with a server and clients, over `setup`.
fn simulate_server<A: Algorithm>(
    planned: Planned<A>,
    setup: Setup,
    observer: RecordObserver<Record>,
    checkpoints: Option<Checkpoints>,
) -> Result<SimOutput, SimError> {
    let system = actix::System::new();
    system.block_on(async move {
        let init::Started {
            global,
            jobs,
            dispatch,
        } = init::start(planned, &setup);
        let Setup {
            spec,
            seeds,
            data,
            unseen,
            system: system_model,
            sample_privacy,
            ..
        } = setup;
        let num_clients = data.num_clients() as u32;
        let asynchronous = spec.policy.settings::<FedbuffSpec>().is_some();
        let system_model = Arc::new(system_model);
        let sample_privacy = sample_privacy.map(|(p, _)| p);
        let _drain = dispatch.pool().drain_on_drop();
        let global = Arc::new(global);
        let clients = client::Roster::new(client::RosterParts {
            jobs: jobs.clone(),
            dispatch: dispatch.clone(),
            system: system_model.clone(),
            seeds,
            unseen: unseen.clone(),
            initial: global.clone(),
            clients: num_clients as usize,
        });
        let mut server = Server::new(
            server::ServerConfig {
                algorithm: jobs.clone(),
                rounds: spec.rounds,
                evaluated: evaluation::EvaluatedClients::new(
                    spec.evaluation,
                    num_clients as usize,
                    seeds,
                ),
                num_clients,
                participants: (0..num_clients)
                    .filter(|c| unseen.binary_search(c).is_err())
                    .collect(),
                sampling: spec.sampling.clone(),
                policy: spec.policy.clone(),
                system: system_model,
                seeds,
                sample_privacy,
                secure_aggregation: spec.secure_aggregation.clone(),
                downlink: spec.compression.as_ref().and_then(|c| c.downlink.clone()),
                server_optimizer: spec.server_optimizer.clone(),
            },
            global,
        );
        let (resume, checkpoints) = match checkpoints {
            Some(mut c) => (c.resume.take(), Some(c)),
            None => (None, None),
        };
        let resume = match resume {
            Some(mut from) => {
                let restored = server.restore(&from.state.server)?;
                let restarts = clients.read_kept(&mut from.clients)?;
                jobs.resident_momenta.read_kept(&mut from.clients)?;
                Some((from.state, restored, restarts))
            }
            None => None,
        };
        let server = server.start();
        let mut world: HubWorld<_, _, ToServer<A>, ToClient<A>> =
            HubWorld::new(server.clone(), clients.clone());
        world.cohorts = dispatch
            .queue()
            .map(|queue| queue as Arc<dyn super::world::Flush>);
        world.saver = (checkpoints)
            .map(|c| checkpoint_saver(c, server, clients.clone(), jobs.clone(), asynchronous));
        let start = match resume {
            Some((state, restored, restarts)) => {
                let restarted = restart_jobs(&clients, &restored, restarts).await?;
                Start::Resume(resumed_events(state, &restored, restarted, &jobs)?)
            }
            None => {
                let start = vec![(HUB, HUB, Routed::Hub(ToServer::StartRound { round: 1 }))];
                // The malicious clients come first; each client's device is recorded when it
                // first wakes.
                let malicious =
                    (jobs.adversary.as_ref()).map(|a| Record::Malicious(a.malicious.clone()));
                let first = malicious.into_iter().collect();
                Start::Fresh { start, first }
            }
        };
        run_world(world, start, observer).await
    })
}

/// Saves a checkpoint where one is due and the run can be saved: before a round's start, and
/// (`asynchronous`: FedBuff) before an update arrives, where every event waiting is one a
/// checkpoint holds ([`saved_events`]), the server can be saved and every awake client is
/// doing its training job alone.
fn checkpoint_saver<A: Algorithm>(
    checkpoints: Checkpoints,
    server: Addr<Server<A>>,
    clients: Rc<client::Roster<A>>,
    jobs: Arc<JobContext<A>>,
    asynchronous: bool,
) -> Saver<ToServer<A>, ToClient<A>> {
    let checkpoints = Rc::new(RefCell::new(checkpoints));
    let asked = checkpoints.clone();
    let wants = Rc::new(move |msg: &ToServer<A>| match *msg {
        ToServer::StartRound { round } => (asked.borrow_mut().due)(round),
        ToServer::Update { round, .. } if asynchronous => (asked.borrow_mut().due)(round),
        _ => false,
    });
    let save = Rc::new(move |events, queued: Vec<Queued<Option<&Msg<A>>>>| {
        let now = queued.first()?.at;
        let waiting = match saved_events(&queued) {
            Ok(waiting) => encode(&waiting?),
            Err(e) => return Some(Box::pin(std::future::ready(Err(e))) as Saving),
        };
        let (checkpoints, server) = (checkpoints.clone(), server.clone());
        let (clients, jobs) = (clients.clone(), jobs.clone());
        let saving: Saving = Box::pin(async move {
            let gone =
                |who: String| move |e: MailboxError| SimError::ActorGone(format!("{who}: {e}"));
            let saved = server.send(SaveState::new()).await;
            let Some(server) = saved.map_err(gone("the server".into()))?? else {
                return Ok(());
            };
            let mut awake = Vec::new();
            for (id, client) in clients.awake() {
                let saved = client.send(SaveClient::new()).await;
                let Some((bytes, globals)) = saved.map_err(gone(format!("client {id}")))?? else {
                    return Ok(());
                };
                // An evaluation in flight is started again from the server's global model.
                if !globals.iter().all(|g| Arc::ptr_eq(g, &server.global)) {
                    return Ok(());
                }
                awake.push((id, bytes));
            }
            let state = RunState {
                now,
                events,
                round: server.round,
                waiting,
                server: server.bytes,
            };
            (checkpoints.borrow_mut().save)(&state, &mut |w| {
                clients.write_kept(w, &awake)?;
                jobs.resident_momenta.write_kept(w)
            })
        });
        Some(saving)
    });
    Saver { wants, save }
}

/// The events waiting, as a checkpoint saves them (updates read back where they were
/// spilled); `None` where one of them is not a kind a checkpoint holds (an evaluation's).
#[allow(clippy::type_complexity)]
fn saved_events<A: Algorithm>(
    queued: &[Queued<Option<&Msg<A>>>],
) -> Result<Option<Vec<SavedEvent<A::Update>>>, SimError> {
    let mut saved = Vec::with_capacity(queued.len());
    for q in queued {
        let event = match (q.to, q.msg) {
            (HUB, Some(Routed::Hub(msg))) => match msg {
                &ToServer::StartRound { round } => Saved::StartRound { round },
                &ToServer::Deadline { round } => Saved::Deadline { round },
                ToServer::Wake => Saved::Wake,
                ToServer::Update {
                    round,
                    client,
                    update,
                    bytes,
                    compute,
                    privacy,
                    loss,
                } => Saved::Update {
                    round: *round,
                    client: *client,
                    update: update.clone().into_inner().map_err(|e| {
                        SimError::JobFailed(format!(
                            "reading client {client}'s update for a checkpoint: {e}"
                        ))
                    })?,
                    bytes: *bytes,
                    compute: *compute,
                    privacy: *privacy,
                    loss: *loss,
                },
                &ToServer::Done {
                    round,
                    client,
                    compute,
                } => Saved::Done {
                    round,
                    client,
                    compute,
                },
                &ToServer::Failed {
                    round,
                    client,
                    compute,
                } => Saved::Failed {
                    round,
                    client,
                    compute,
                },
                ToServer::NoveltyShare { .. } => return Ok(None),
            },
            (EntityId(rank @ 1..), Some(Routed::Member(ToClient::Train(order)))) => Saved::Train {
                client: rank - 1,
                order: order.saved(),
            },
            (EntityId(rank @ 1..), None) => Saved::JobResult { client: rank - 1 },
            _ => return Ok(None),
        };
        saved.push(SavedEvent {
            at: q.at,
            origin: q.origin.0,
            event,
        });
    }
    Ok(Some(saved))
}

/// Starts again the jobs that were in flight where the run was saved, at each client (woken
/// with the state they started from), in the order they started: training jobs with the model
/// the server saved for them, evaluations with the global model.
async fn restart_jobs<A: Algorithm>(
    clients: &Rc<client::Roster<A>>,
    restored: &Restored<A::Global>,
    restarts: Vec<(u32, Vec<client::SavedJob>)>,
) -> Result<Restarted<Msg<A>>, SimError> {
    let mut restarted = Restarted::new("client");
    for (id, jobs) in restarts {
        let restart = Restart {
            jobs,
            job_model: restored.job_models.get(&id).cloned(),
            global: restored.global.clone(),
        };
        let sent = clients.wake(id).send(restart).await;
        let started = sent.map_err(|e| SimError::ActorGone(format!("client {id}: {e}")))??;
        restarted.add(id, started)?;
    }
    Ok(restarted)
}

/// The model the server saved for `client`'s job in flight.
fn job_model<G>(restored: &Restored<G>, client: u32) -> Result<Arc<G>, SimError> {
    (restored.job_models.get(&client).cloned()).ok_or_else(|| {
        SimError::Internal(format!(
            "client {client}'s training order in a checkpoint has no saved model"
        ))
    })
}

/// Where a resumed run starts: the clock, the events delivered, and the events waiting, each
/// job's result where its saved event was.
fn resumed_events<A: Algorithm>(
    state: RunState,
    restored: &Restored<A::Global>,
    mut restarted: Restarted<Msg<A>>,
    jobs: &JobContext<A>,
) -> Result<Resume<Msg<A>>, SimError> {
    let saved: Vec<SavedEvent<A::Update>> = decode(&state.waiting, "the events waiting")?;
    let mut waiting = Vec::with_capacity(saved.len());
    for SavedEvent { at, origin, event } in saved {
        let hub = |msg| (HUB, Payload::Ready(Routed::Hub(msg)));
        let (to, msg) = match event {
            Saved::StartRound { round } => hub(ToServer::StartRound { round }),
            Saved::Deadline { round } => hub(ToServer::Deadline { round }),
            Saved::Wake => hub(ToServer::Wake),
            Saved::Update {
                round,
                client,
                update,
                bytes,
                compute,
                privacy,
                loss,
            } => hub(ToServer::Update {
                round,
                client,
                update: jobs.keep(update),
                bytes,
                compute,
                privacy,
                loss,
            }),
            Saved::Done {
                round,
                client,
                compute,
            } => hub(ToServer::Done {
                round,
                client,
                compute,
            }),
            Saved::Failed {
                round,
                client,
                compute,
            } => hub(ToServer::Failed {
                round,
                client,
                compute,
            }),
            Saved::Train { client, order } => {
                let order = TrainOrder::from_saved(order, job_model(restored, client)?);
                let msg = Routed::Member(ToClient::Train(order));
                (member_entity(client), Payload::Ready(msg))
            }
            Saved::JobResult { client } => {
                let result = restarted.take(client, at)?;
                (member_entity(client), Payload::Pending(result))
            }
        };
        waiting.push(Queued {
            at,
            origin: EntityId(origin),
            to,
            msg,
        });
    }
    restarted.finish()?;
    Ok(Resume {
        now: state.now,
        events: state.events,
        waiting,
    })
}
