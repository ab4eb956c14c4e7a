//! Checkpoints inside a run: the state of a run at a point where it can be saved, and how a
//! run starts from one.
//!
//! A run with a server can be saved before the start of a synchronous round, and (FedBuff)
//! before an update arrives, when every event waiting is one a checkpoint can hold: the
//! server's messages to itself, updates and notices on their way to the server, training
//! orders on their way to clients, and the results of training jobs in flight; no evaluation
//! is under way (the kernel offers the points, [`crate::sim::World::may_save`]). There the rest
//! of the run is decided by the scenario and by [`RunState`]: the clock and the count of
//! events, the events waiting, the server's state (its global model, the jobs in flight and
//! their models, the updates its round policy holds, counts, accountants, optimizer moments,
//! feedback, the clients' downlink copy) and what each client keeps (its state, residual, last
//! round trained, divergence watch, and the order of its job in flight). A job in flight is
//! saved as its order and the state it started from, and started again on resume: its result
//! is a function of them and of its seed-tree streams, and comes due at the same time and rank.
//! No random stream needs its position saved: every stream is drawn from the seed tree by
//! entity, purpose and index ([`crate::sim::SeedTree`]), and a stream that lives longer than
//! one job does not exist. Decentralized runs write no checkpoint yet.
//!
//! This room must not decide when a checkpoint is due, read a wall clock, or write a file: the
//! run's caller does ([`Checkpoints`]).

use crate::sim::{Effects, Pending, SimError, SimTime};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Read, Write};
use std::sync::Arc;

/// A run's state at a point where it is saved, less what the clients keep (written and read
/// as a stream, client by client: [`WriteClients`], [`Resumed::clients`]) and the records made
/// before it (the caller's to keep).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// The clock when the next event is due.
    pub now: SimTime,
    /// Events delivered before the next one.
    pub events: u64,
    /// The round under way, or about to start.
    pub round: u32,
    /// The events waiting, in the order they are delivered, encoded.
    pub waiting: Vec<u8>,
    /// The server's state, encoded.
    pub server: Vec<u8>,
}

/// Writes what the clients keep into the writer it is given, one client at a time (so that a
/// checkpoint never holds every client's state in memory at once).
pub type WriteClients<'a> = &'a mut dyn FnMut(&mut dyn Write) -> Result<(), SimError>;

/// A checkpoint to resume from: the run's state, and a reader at what the clients keep (as
/// [`WriteClients`] wrote it).
pub struct Resumed {
    pub state: RunState,
    pub clients: Box<dyn Read>,
}

/// How a run takes checkpoints, and whether it starts from one.
pub struct Checkpoints {
    /// The checkpoint the run starts from (a resumed run); `None`: from the start.
    pub resume: Option<Resumed>,
    /// Whether a checkpoint is due at round `round` (asked where one can be saved only).
    pub due: Box<dyn FnMut(u32) -> bool>,
    /// Saves one: the run's state, and the clients' through the writer it is handed.
    #[allow(clippy::type_complexity)]
    pub save: Box<dyn FnMut(&RunState, WriteClients<'_>) -> Result<(), SimError>>,
}

/// The distinct models a checkpoint refers to, each saved once: the same model (not an equal
/// one) has one index, so models that runs share stay shared when they are read back.
pub(crate) struct ModelTable<G> {
    models: Vec<Arc<G>>,
    /// Index by the model's address (each kept alive in `models`).
    index: HashMap<usize, u32>,
}

impl<G> ModelTable<G> {
    pub fn new() -> Self {
        ModelTable {
            models: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// The index of `model`, added if it is new.
    pub fn index(&mut self, model: &Arc<G>) -> u32 {
        let at = Arc::as_ptr(model) as usize;
        *self.index.entry(at).or_insert_with(|| {
            self.models.push(model.clone());
            (self.models.len() - 1) as u32
        })
    }

    /// The models, by index.
    pub fn models(&self) -> &[Arc<G>] {
        &self.models
    }
}

/// The models a checkpoint saved ([`ModelTable`]), shared again by index.
pub(crate) struct SavedModels<G>(pub Vec<Arc<G>>);

impl<G> SavedModels<G> {
    pub fn get(&self, index: u32) -> Result<Arc<G>, SimError> {
        (self.0.get(index as usize).cloned()).ok_or_else(|| {
            SimError::Internal(format!("a checkpoint refers to a model it lacks ({index})"))
        })
    }
}

/// The results of the jobs a resumed run started again, by member (client or peer), in the
/// order the scheduler delivers them: by due time, then in the order they started (a member's
/// results all have its rank).
pub(super) struct Restarted<M> {
    results: BTreeMap<u32, VecDeque<(SimTime, Pending<M>)>>,
    /// What a member's jobs that do not start again as saved are (the error to give).
    what: &'static str,
}

impl<M> Restarted<M> {
    /// `what`: the members' kind, for errors ("client", "peer").
    pub fn new(what: &'static str) -> Self {
        Restarted {
            results: BTreeMap::new(),
            what,
        }
    }

    /// `member`'s jobs started again: each its start time and the effects of starting it,
    /// which must be one result to come, for the member itself.
    pub fn add<R>(
        &mut self,
        member: u32,
        started: Vec<(SimTime, Effects<M, R>)>,
    ) -> Result<(), SimError> {
        let mut results = Vec::with_capacity(started.len());
        for (at, effects) in started {
            let due: Vec<_> = (effects.sends())
                .map(|(to, delay, msg)| {
                    (to == super::world::member_entity(member) && msg.is_none()).then_some(delay)
                })
                .collect();
            match (due.as_slice(), effects.into_pending().pop()) {
                ([Some(delay)], Some(result)) => results.push((at + *delay, result)),
                _ => return Err(self.mismatch(member)),
            }
        }
        results.sort_by_key(|(due, _)| *due);
        self.results.insert(member, results.into());
        Ok(())
    }

    /// `member`'s next result, which must be due `at`.
    pub fn take(&mut self, member: u32, at: SimTime) -> Result<Pending<M>, SimError> {
        let next = self.results.get_mut(&member).and_then(VecDeque::pop_front);
        match next {
            Some((due, result)) if due == at => Ok(result),
            _ => Err(self.mismatch(member)),
        }
    }

    /// Checks that every result has been taken.
    pub fn finish(self) -> Result<(), SimError> {
        match self.results.iter().find(|(_, left)| !left.is_empty()) {
            Some((&member, _)) => Err(self.mismatch(member)),
            None => Ok(()),
        }
    }

    pub fn mismatch(&self, member: u32) -> SimError {
        SimError::Internal(format!(
            "{} {member}'s jobs in flight do not start again as they were saved",
            self.what
        ))
    }
}

/// Writes `value` in the checkpoints' binary form into `w`.
pub(crate) fn encode_into<T: Serialize>(value: &T, w: &mut dyn Write) -> Result<(), SimError> {
    let config = bincode::config::standard();
    bincode::serde::encode_into_std_write(value, &mut &mut *w, config)
        .map(|_| ())
        .map_err(|e| SimError::Checkpoint(Box::new(e)))
}

/// Reads a value [`encode_into`] wrote of `what` from `r`.
pub(crate) fn decode_from<T: DeserializeOwned>(
    r: &mut dyn Read,
    what: &str,
) -> Result<T, SimError> {
    let config = bincode::config::standard();
    bincode::serde::decode_from_std_read(&mut &mut *r, config)
        .map_err(|e| undecodable(what, &e.to_string()))
}

/// `value` in the checkpoints' binary form (floats as their bytes).
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .expect("a run's state always encodes")
}

/// The value [`encode`] made of `what`.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, SimError> {
    let config = bincode::config::standard();
    match bincode::serde::decode_from_slice(bytes, config) {
        Ok((value, read)) if read == bytes.len() => Ok(value),
        Ok(_) => Err(undecodable(what, "bytes left over")),
        Err(e) => Err(undecodable(what, &e.to_string())),
    }
}

fn undecodable(what: &str, why: &str) -> SimError {
    SimError::Internal(format!(
        "{what} in a checkpoint that passed its checks does not decode: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Floats come back as the same bits, NaN payloads and signed zeros included.
    #[test]
    fn floats_come_back_bit_for_bit() {
        let odd = [
            f32::from_bits(0x7fc0_0001),
            -0.0,
            f32::MIN_POSITIVE / 2.0,
            1.5,
        ];
        let back: Vec<f32> = decode(&encode(&odd.to_vec()), "floats").unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back), bits(&odd));
        let short = &encode(&odd.to_vec())[..5];
        assert!(decode::<Vec<f32>>(short, "floats").is_err());
        let mut streamed = Vec::new();
        encode_into(&odd.to_vec(), &mut streamed).unwrap();
        encode_into(&7u32, &mut streamed).unwrap();
        let mut r = &streamed[..];
        let back: Vec<f32> = decode_from(&mut r, "floats").unwrap();
        assert_eq!(bits(&back), bits(&odd));
        assert_eq!(decode_from::<u32>(&mut r, "a count").unwrap(), 7);
    }
}
