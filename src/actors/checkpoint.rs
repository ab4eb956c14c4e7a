//! Checkpoints inside a run: the state of a run at a point at rest, and how a run starts from
//! one.
//!
//! A point at rest is the start of a synchronous round when nothing else is left to happen: no
//! job in flight, no update held, no evaluation gathering, every client asleep (the kernel
//! asks at [`crate::sim::World::at_rest`]). There the rest of the run is decided by the
//! scenario and by [`RunState`]: the clock and the count of events, the server's state (its
//! global model, counts, accountants, optimizer moments, feedback, the clients' downlink
//! copy) and what each client keeps (its state, residual, last round trained, divergence
//! watch). No random stream needs its position saved: every stream is drawn from the seed tree
//! by entity, purpose and index ([`crate::sim::SeedTree`]), and a stream that lives longer
//! than one job does not exist. Runs whose rounds never come to rest (FedBuff, decentralized
//! runs, deadlines whose stragglers run into the next round) write no checkpoint.
//!
//! This room must not decide when a checkpoint is due, read a wall clock, or write a file: the
//! run's caller does ([`Checkpoints`]).

use crate::sim::{SimError, SimTime};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::io::{Read, Write};

/// A run's state at a point at rest, less what the clients keep (written and read as a
/// stream, client by client: [`WriteClients`], [`Resumed::clients`]) and the records made
/// before it (the caller's to keep).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// The clock when the round starts.
    pub now: SimTime,
    /// Events delivered before the round's start.
    pub events: u64,
    /// The round about to start.
    pub round: u32,
    /// The events waiting, in the order they are delivered: the round's start first, then any
    /// the server scheduled for itself (a closed round's deadline, a wake-up).
    pub waiting: Vec<Waiting>,
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

/// A message the server sent itself, waiting at a point at rest: when it is due, and what.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    pub at: SimTime,
    pub event: ServerEvent,
}

/// The server's messages to itself (the only ones that wait at a point at rest).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerEvent {
    StartRound { round: u32 },
    Deadline { round: u32 },
    Wake,
}

/// How a run takes checkpoints, and whether it starts from one.
pub struct Checkpoints {
    /// The checkpoint the run starts from (a resumed run); `None`: from the start.
    pub resume: Option<Resumed>,
    /// Whether a checkpoint is due before round `round` starts (asked at points at rest only).
    pub due: Box<dyn FnMut(u32) -> bool>,
    /// Saves one: the run's state, and the clients' through the writer it is handed.
    #[allow(clippy::type_complexity)]
    pub save: Box<dyn FnMut(&RunState, WriteClients<'_>) -> Result<(), SimError>>,
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
