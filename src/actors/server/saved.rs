//! The server's state at a point at rest, saved into a run's checkpoint and given back to a
//! server that resumes the run ([`super::super::checkpoint`]). At rest no job is in flight and
//! the round policy holds no update, so what is saved is the global model and what the server
//! has counted and learned so far; the rest is the scenario's.
//!
//! This room must not save what the scenario decides (it is built again from it), nor change
//! a value it saves: a resumed server holds the same bits.

use super::downlink::Downlink;
use super::online::OnlineIdle;
use super::{Core, Server};
use crate::actors::checkpoint::{decode, encode};
use crate::actors::divergence::DivergenceWatch;
use crate::algorithms::Algorithm;
use crate::privacy::{RecordAccountant, ShareAccountant, TreeAccountant};
use crate::records::{AdaptiveRound, RoundRecord};
use crate::sampling::Feedback;
use crate::server_optimizer::Moments;
use crate::sim::{SimError, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a round policy keeps between rounds at rest.
#[derive(Serialize, Deserialize)]
pub(super) enum PolicyState {
    /// Synchronous rounds: the last round's sampled clients.
    Synchronous { selected: Vec<u32> },
}

/// The server's [`Core`] at rest, less what the scenario decides.
#[derive(Serialize, Deserialize)]
struct CoreState<G> {
    global: G,
    round: u32,
    round_start: SimTime,
    counts: RoundRecord,
    online: Option<OnlineIdle>,
    finished: bool,
    watch: DivergenceWatch,
    private_releases: u64,
    uploads: BTreeMap<u32, u64>,
    most_uploads: u64,
    noise_std: f64,
    clip: f64,
    adaptive_round: Option<AdaptiveRound>,
    records: Option<RecordAccountant>,
    tree: Option<TreeAccountant>,
    shares: Option<ShareAccountant>,
    robust_last: Vec<Vec<f64>>,
    server_moments: Vec<Moments>,
    feedback: Feedback,
    /// Under `compression.downlink`: the clients' copy, the bytes of its moves and the
    /// version each client holds.
    downlink: Option<(G, Vec<u64>, BTreeMap<u32, u32>)>,
    policy: PolicyState,
}

/// Asks the server for [`Server::saved`].
pub(in crate::actors) struct SaveState;

impl actix::Message for SaveState {
    type Result = Option<Vec<u8>>;
}

impl<A: Algorithm> actix::Handler<SaveState> for Server<A> {
    type Result = Option<Vec<u8>>;

    fn handle(&mut self, _: SaveState, _: &mut actix::Context<Self>) -> Self::Result {
        self.saved()
    }
}

impl<A: Algorithm> Server<A> {
    /// The server's state, encoded, where it is at rest (no job in flight, no update held,
    /// no evaluation gathering); `None` where it is not.
    fn saved(&self) -> Option<Vec<u8>> {
        let core = &self.core;
        let at_rest = core.in_flight.is_empty() && core.novelty_shares.is_empty();
        let policy = self.rounds.at_rest().filter(|_| at_rest)?;
        let state = CoreState {
            global: (*core.global).clone(),
            round: core.round,
            round_start: core.round_start,
            counts: core.counts.clone(),
            online: core.online.clone(),
            finished: core.finished,
            watch: core.watch,
            private_releases: core.private_releases,
            uploads: core.uploads.clone(),
            most_uploads: core.most_uploads,
            noise_std: core.noise_std,
            clip: core.clip,
            adaptive_round: core.adaptive_round,
            records: core.records.clone(),
            tree: core.tree.clone(),
            shares: core.shares.clone(),
            robust_last: core.robust_last.clone(),
            server_moments: core.server_moments.clone(),
            feedback: core.feedback.clone(),
            downlink: (core.downlink.as_ref()).map(Downlink::saved),
            policy,
        };
        Some(encode(&state))
    }

    /// Gives a server built from the scenario the state [`Server::saved`] encoded.
    pub(in crate::actors) fn restore(&mut self, bytes: &[u8]) -> Result<(), SimError> {
        let state: CoreState<A::Global> = decode(bytes, "the server's state")?;
        let core: &mut Core<A> = &mut self.core;
        core.global = Arc::new(state.global);
        core.round = state.round;
        core.round_start = state.round_start;
        core.counts = state.counts;
        core.online = state.online;
        core.finished = state.finished;
        core.watch = state.watch;
        core.private_releases = state.private_releases;
        core.uploads = state.uploads;
        core.most_uploads = state.most_uploads;
        core.noise_std = state.noise_std;
        core.clip = state.clip;
        core.adaptive_round = state.adaptive_round;
        core.records = state.records;
        core.tree = state.tree;
        core.shares = state.shares;
        core.robust_last = state.robust_last;
        core.server_moments = state.server_moments;
        core.feedback = state.feedback;
        match (&mut core.downlink, state.downlink) {
            (Some(downlink), Some(saved)) => downlink.restore(saved),
            (None, None) => {}
            _ => return Err(mismatch("compression.downlink")),
        }
        self.rounds.restore(state.policy)
    }
}

/// A saved state that the scenario's server cannot take: the scenario differs from the run's
/// that saved it, which the checkpoint's own checks rule out (a bug).
pub(super) fn mismatch(what: &str) -> SimError {
    SimError::Internal(format!(
        "a checkpoint's server state does not match the scenario's {what}"
    ))
}
