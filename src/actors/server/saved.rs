//! The server's state at a point at rest, saved into a run's checkpoint and given back to a
//! server that resumes the run ([`super::super::checkpoint`]). At rest no job is in flight and
//! the round policy holds no update, so what is saved is the global model and what the server
//! has counted and learned so far; the rest is the scenario's.
//!
//! This room must not save what the scenario decides (it is built again from it), nor change
//! a value it saves: a resumed server holds the same bits.

use super::downlink::Downlink;
use super::{Core, Ledger, Server};
use crate::actors::checkpoint::{decode, encode};
use crate::algorithms::Algorithm;
use crate::sim::SimError;
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
    ledger: Ledger,
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
            ledger: core.ledger.clone(),
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
        core.ledger = state.ledger;
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
