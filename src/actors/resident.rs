//! Clients' momentum buffers kept on the device between rounds, for the cohorts of a run
//! ([`ResidentMomenta`]).
//!
//! This room must not decide which buffers stay by anything that changes results: a buffer
//! here or on the host holds the same bits.

use std::collections::HashMap;
use std::sync::Mutex;
use tch::Tensor;

/// Clients' momentum buffers kept on the device between rounds where cohorts are the GPU path
/// (`keeps_momentum_on_device` in `cohort`): (client, run of its update) → a flat `[P]` tensor, so that a
/// round sends no buffer down and brings none back. A shard takes its clients' buffers out
/// as it starts and puts the trained ones back. The server never sends a busy client a second
/// job and a client takes up the state of every job it trained, so a buffer here is the one
/// its state would hold on the host (whose `momentum` then stays empty); results are the same
/// bits either way. Not spilled: `training.device_state_gib` bounds it instead (16 GiB by
/// default: FEMNIST's FedEM, 539 writers × 3 CNNs, holds 10.7 GB); a run whose buffer would
/// not fit keeps it on the host, as on the CPU.
pub(super) struct ResidentMomenta {
    kept: Mutex<KeptMomenta>,
    /// At most this many bytes.
    limit: u64,
}

impl ResidentMomenta {
    pub(super) fn new(limit: u64) -> Self {
        ResidentMomenta {
            kept: Mutex::default(),
            limit,
        }
    }
}

#[derive(Default)]
struct KeptMomenta {
    buffers: HashMap<(u32, usize), Tensor>,
    /// Bytes held or promised to runs in training.
    bytes: u64,
}

impl ResidentMomenta {
    /// The slot of run `run` of `client`'s update, whose buffer holds `bytes`: its kept
    /// buffer, or an empty slot where a new one fits (its bytes promised), or `None` where it
    /// does not (the buffer then crosses as on the host).
    pub(super) fn take(&self, client: u32, run: usize, bytes: u64) -> Option<Option<Tensor>> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(buffer) = kept.buffers.remove(&(client, run)) {
            return Some(Some(buffer));
        }
        (kept.bytes + bytes <= self.limit).then(|| {
            kept.bytes += bytes;
            None
        })
    }

    /// Puts back what a slot holds after training; an empty slot (no buffer was made) gives
    /// its `bytes` back.
    pub(super) fn put(&self, client: u32, run: usize, slot: Option<Tensor>, bytes: u64) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        match slot {
            Some(buffer) => {
                kept.buffers.insert((client, run), buffer);
                crate::models::profile::kept_on_device(kept.bytes);
            }
            None => kept.bytes -= bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ResidentMomenta;
    use tch::Tensor;

    #[test]
    fn momentum_buffers_stay_while_they_fit_and_give_back_what_was_not_used() {
        // Room for two buffers of 8 bytes.
        let kept = ResidentMomenta::new(16);
        let buffer = || Some(Tensor::from_slice(&[1.0f32, 2.0]));
        let (a, b) = (kept.take(1, 0, 8), kept.take(2, 0, 8));
        assert!(matches!((&a, &b), (Some(None), Some(None))), "empty slots");
        assert!(kept.take(3, 0, 8).is_none(), "no room: the host's way");
        kept.put(1, 0, buffer(), 8);
        kept.put(2, 0, None, 8); // no buffer made: its bytes come back
        let c = kept.take(3, 0, 8);
        assert!(matches!(c, Some(None)), "room again");
        kept.put(3, 0, buffer(), 8);
        let again = kept.take(1, 0, 8).expect("kept").expect("a buffer");
        assert_eq!(Vec::<f32>::try_from(&again).unwrap(), [1.0, 2.0]);
        assert!(
            kept.take(4, 0, 8).is_none(),
            "client 1's bytes stay promised"
        );
        kept.put(1, 0, Some(again), 8);
        assert!(
            kept.take(1, 1, 8).is_none(),
            "another run of client 1: no room"
        );
    }
}
