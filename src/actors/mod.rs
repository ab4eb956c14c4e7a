//! The federated entities as actix actors: the server, the clients, the peers of decentralized
//! runs (with their monitor) and the trainer pool.
//!
//! Actors handle one message at a time, delivered by the kernel's scheduler, and return the
//! effects they want; they never message each other directly. Training and evaluation run on
//! the trainer pool and come back as pending messages at times fixed by the system model.
//! This room wires entities to the kernel; it holds no polars code and reads no wall clock.
//!
//! Its rooms, bottom up: `messages` (what entities send), `world` (the adapter between
//! entities and the scheduler), `job` (what every job shares, the upload pipeline among it),
//! the entities (`client`, `server`, `peer`) and `run` (the entry point, [`simulate`]).

mod checkpoint;
mod client;
mod cohort;
mod divergence;
mod evaluation;
mod gossip;
mod init;
mod job;
mod messages;
mod peer;
mod resident;
mod run;
mod server;
mod trainer;
mod world;

pub use checkpoint::{Checkpoints, Resumed, RunState, WriteClients};
pub use messages::{FinishedWork, PooledNovelty, PrivacyNote, ToClient, ToServer, TrainOrder};
pub use peer::{consensus_distance, PeerMsg};
pub use run::simulate;
pub use trainer::TrainerPool;
pub use world::{Routed, SimOutput};

/// A tiny FedAvg run for the actors' unit tests: two clients of three features, 3 rounds.
#[cfg(test)]
pub(crate) mod testkit {
    use super::job::JobContext;
    use crate::algorithms::FedAvg;
    use crate::plan::RunPlan;
    use crate::scenario::Scenario;
    use crate::sim::SeedTree;
    use crate::system::SystemModel;
    use std::path::Path;
    use std::sync::Arc;

    /// The scenario `rounds: 3` on that data with `fedavg` and the extra YAML lines `extra`,
    /// then `overrides`; its job context and system model, all from seed 1.
    pub fn fedavg_run(
        extra: &str,
        overrides: &[&str],
    ) -> (Scenario, Arc<JobContext<FedAvg>>, Arc<SystemModel>) {
        let text = format!(
            "rounds: 3\ndata: {{kind: fedem_synthetic, clients: 2, dim: 3}}\n\
             algorithm: {{name: fedavg}}\n{extra}"
        );
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let s = Scenario::from_yaml(&text, Path::new("t.yaml"), &overrides).unwrap();
        let data = Arc::new(s.data.build(&s.split, &SeedTree::new(1)).unwrap());
        let plan = RunPlan::new(&s.run, data, 1).unwrap();
        let jobs = Arc::new(JobContext::new(FedAvg::plain(), &plan.setup));
        (s, jobs, Arc::new(plan.setup.system))
    }
}
