//! The run's entry point: a [`RunPlan`] assembled into its entities (a server and clients, or
//! peers) and run, in one visible place. The plan has decided everything; what can fail here
//! is the simulation itself (a job, the clock), never the input.

use super::client;
use super::evaluation;
use super::init;
use super::messages::{ToClient, ToServer};
use super::peer;
use super::server::{self, Server};
use super::world::{run_world, HubWorld, Routed, SimOutput, HUB};
use crate::algorithms::{Algorithm, Gossip, Planned, RunBuilt};
use crate::plan::{RunPlan, Setup};
use crate::records::Record;
use crate::sim::{RecordObserver, SimError};
use actix::prelude::*;
use std::sync::Arc;

/// Runs `plan`: its algorithm with a server or on peers, as it is registered. `observer` sees
/// every record as it is made, and says whether the output keeps them.
pub fn simulate(plan: RunPlan, observer: RecordObserver<Record>) -> Result<SimOutput, SimError> {
    let RunPlan { algorithm, setup } = plan;
    algorithm.run(Assemble { setup, observer })
}

/// What [`Built::run`](crate::algorithms::Built::run) hands the algorithm to.
struct Assemble {
    setup: Setup,
    observer: RecordObserver<Record>,
}

impl RunBuilt for Assemble {
    type Output = Result<SimOutput, SimError>;

    fn server<A: Algorithm>(self, planned: Planned<A>) -> Self::Output {
        simulate_server(planned, self.setup, self.observer)
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
        let clients = client::Roster::new(client::RosterParts {
            jobs: jobs.clone(),
            dispatch: dispatch.clone(),
            system: system_model.clone(),
            seeds,
            unseen: unseen.clone(),
            initial: global.clone(),
            clients: num_clients as usize,
        });
        let server = Server::new(
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
        )
        .start();
        let mut world: HubWorld<_, _, ToServer<A>, ToClient<A>> = HubWorld::new(server, clients);
        world.cohorts = dispatch
            .queue()
            .map(|queue| queue as Arc<dyn super::world::Flush>);
        let start = vec![(HUB, HUB, Routed::Hub(ToServer::StartRound { round: 1 }))];
        // Each client's device is recorded when it first wakes.
        // The malicious clients come first; each client's device is recorded when it first
        // wakes.
        let malicious = (jobs.adversary.as_ref()).map(|a| Record::Malicious(a.malicious.clone()));
        run_world(world, start, malicious.into_iter().collect(), observer).await
    })
}
