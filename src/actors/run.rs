//! The run's entry point: a [`RunPlan`] assembled into its entities (a server and clients, or
//! peers) and run, in one visible place. The plan has decided everything; what can fail here
//! is the simulation itself (a job, the clock), never the input.

use super::checkpoint::{Checkpoints, RunState, Waiting};
use super::client;
use super::evaluation;
use super::init;
use super::messages::{ToClient, ToServer};
use super::peer;
use super::server::SaveState;
use super::server::{self, Server};
use super::world::{run_world, AtRest, HubWorld, Routed, SimOutput, Start, HUB};
use crate::algorithms::{Algorithm, Gossip, Planned, RunBuilt};
use crate::plan::{RunPlan, Setup};
use crate::records::Record;
use crate::sim::{Queued, RecordObserver, Resume, Saving, SimError};
use actix::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// Runs `plan`: its algorithm with a server or on peers, as it is registered. `observer` sees
/// every record as it is made, and says whether the output keeps them.
/// With `checkpoints`, the run saves its state where it comes to rest and one is due (see
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
        peer::simulate_peers(planned, self.setup, self.observer)
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
        let system_model = Arc::new(system_model);
        let sample_privacy = sample_privacy.map(|(p, _)| p);
        let _drain = dispatch.pool().drain_on_drop();
        let global = Arc::new(global);
        // Where cohorts keep momentum on the device between rounds, part of the clients'
        // state is outside them: such runs take no checkpoint yet.
        let checkpoints = checkpoints.filter(|_| !dispatch.keeps_state_outside_clients());
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
                server.restore(&from.state.server)?;
                clients.read_kept(&mut from.clients)?;
                Some(from.state)
            }
            None => None,
        };
        let server = server.start();
        let mut world: HubWorld<_, _, ToServer<A>, ToClient<A>> =
            HubWorld::new(server.clone(), clients.clone());
        world.cohorts = dispatch
            .queue()
            .map(|queue| queue as Arc<dyn super::world::Flush>);
        world.at_rest = checkpoints.map(|c| saving_at_rest(c, server, clients));
        let start = match resume {
            Some(from) => Start::Resume(Resume {
                now: from.now,
                events: from.events,
                waiting: (from.waiting.into_iter())
                    .map(|w| Queued {
                        at: w.at,
                        origin: HUB,
                        to: HUB,
                        msg: Routed::Hub(ToServer::saved(w.event)),
                    })
                    .collect(),
            }),
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

/// Saves a checkpoint before a round's start where one is due and the server and every
/// client are at rest.
fn saving_at_rest<A: Algorithm>(
    checkpoints: Checkpoints,
    server: Addr<Server<A>>,
    clients: Rc<client::Roster<A>>,
) -> AtRest<ToServer<A>> {
    let checkpoints = Rc::new(RefCell::new(checkpoints));
    let asked = checkpoints.clone();
    let wants = Rc::new(move |msg: &ToServer<A>| match *msg {
        ToServer::StartRound { round } => (asked.borrow_mut().due)(round),
        _ => false,
    });
    let save = Rc::new(move |events, queued: Vec<Queued<&ToServer<A>>>| {
        let &ToServer::StartRound { round } = queued.first()?.msg else {
            return None;
        };
        // Only the server's messages to itself can wait (and be saved) at rest.
        let waiting: Vec<Waiting> = (queued.iter())
            .map(|q| {
                let event = q.msg.as_saved().filter(|_| q.origin == HUB)?;
                Some(Waiting { at: q.at, event })
            })
            .collect::<Option<_>>()?;
        if !clients.at_rest() {
            return None;
        }
        let now = waiting[0].at;
        let (checkpoints, server, clients) = (checkpoints.clone(), server.clone(), clients.clone());
        let saving: Saving = Box::pin(async move {
            let saved = server.send(SaveState).await;
            let server = saved.map_err(|e| SimError::ActorGone(format!("the server: {e}")))?;
            let Some(server) = server else {
                return Ok(());
            };
            let state = RunState {
                now,
                events,
                round,
                waiting,
                server,
            };
            (checkpoints.borrow_mut().save)(&state, &mut |w| clients.write_kept(w))
        });
        Some(saving)
    });
    AtRest { wants, save }
}
