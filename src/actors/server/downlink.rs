//! A compressed downlink (`compression.downlink`): clients receive the server's *public copy*
//! of the model, not the model itself. After every aggregation the copy moves by the
//! compressed difference between the server's model and the copy, so what one broadcast drops
//! the next one carries (the copy follows the model as error feedback would). Each move is a
//! new version of the copy.
//!
//! A client pays for the compressed moves made since the version it last received, or for the
//! whole model if that is less. A client that never received the model pays for the whole of
//! it. The server knows what each client holds: it sent it.
//!
//! This room only moves the copy and counts bytes. It must not read the round policy's state.

use crate::compression::{compress_changes, CompressorSpec};
use rand_chacha::ChaCha20Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The model's parameter vectors, in a fixed order ([`crate::algorithms::PrivateUpdates`]'s
/// `global`).
pub(super) type Vectors<G> = fn(&mut G) -> Vec<&mut [f32]>;

pub(super) struct Downlink<G> {
    compressor: CompressorSpec,
    /// What clients receive.
    public: Arc<G>,
    /// `moved[v]`: the bytes of the moves that made versions 1 to v (`moved[0]` = 0, the
    /// initial model).
    moved: Vec<u64>,
    /// The version each client last received.
    held: BTreeMap<u32, u32>,
}

impl<G: Clone> Downlink<G> {
    /// A downlink whose public copy starts as the initial model.
    pub fn new(compressor: CompressorSpec, initial: Arc<G>) -> Self {
        Downlink {
            compressor,
            public: initial,
            moved: vec![0],
            held: BTreeMap::new(),
        }
    }

    /// What a checkpoint keeps of it: the public copy, the bytes of its moves and each
    /// client's version.
    pub fn saved(&self) -> (G, Vec<u64>, BTreeMap<u32, u32>) {
        (
            (*self.public).clone(),
            self.moved.clone(),
            self.held.clone(),
        )
    }

    /// Takes back what [`Downlink::saved`] kept.
    pub fn restore(&mut self, (public, moved, held): (G, Vec<u64>, BTreeMap<u32, u32>)) {
        (self.public, self.moved, self.held) = (Arc::new(public), moved, held);
    }

    /// The current version: the number of moves so far.
    pub fn version(&self) -> u32 {
        (self.moved.len() - 1) as u32
    }

    /// The public copy for `client`, and the bytes it costs: the moves since the version the
    /// client holds, at most `whole` (the model uncompressed). The client then holds this
    /// version.
    pub fn send_to(&mut self, client: u32, whole: u64) -> (Arc<G>, u64) {
        let now = self.version();
        let bytes = match self.held.insert(client, now) {
            Some(had) => (self.moved[now as usize] - self.moved[had as usize]).min(whole),
            None => whole,
        };
        (self.public.clone(), bytes)
    }

    /// Moves the public copy towards `model` by the compressed difference of each of its
    /// `vectors` (their other values, `extra_bytes` of them on the wire, are copied as they
    /// are), drawing from `rng`: the next version.
    pub fn follow(
        &mut self,
        model: &G,
        vectors: Vectors<G>,
        extra_bytes: u64,
        rng: &mut ChaCha20Rng,
    ) {
        let mut copy = (*self.public).clone();
        let mut next = model.clone();
        let mut pairs: Vec<(&[f32], &mut [f32])> = vectors(&mut copy)
            .into_iter()
            .map(|v| &*v)
            .zip(vectors(&mut next))
            .collect();
        let bytes = compress_changes(&self.compressor, &mut pairs, &mut Vec::new(), rng);
        let total = self.moved.last().copied().unwrap_or(0) + bytes + extra_bytes;
        self.moved.push(total);
        self.public = Arc::new(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// A model of one vector.
    const WHOLE: Vectors<Vec<f32>> = |v| vec![&mut v[..]];

    /// Top-1 of 4 values (4 bytes and 2 bits of index: 5 bytes a move). The copy starts at the
    /// initial model; each move sends the largest difference, and what it drops stays in the
    /// next difference. A client pays every move since its version, at most the whole model.
    #[test]
    fn the_copy_follows_the_model_and_clients_pay_what_they_missed() {
        let top1 = CompressorSpec::of(crate::compression::TopKSpec {
            fraction: 0.25,
            error_feedback: false,
        });
        assert_eq!(top1.bytes(4), 5);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let mut down = Downlink::new(top1.clone(), Arc::new(vec![0.0f32; 4]));
        assert_eq!(down.send_to(7, 16), (Arc::new(vec![0.0; 4]), 16));
        assert_eq!(down.send_to(7, 16).1, 0);
        down.follow(&vec![1.0, -3.0, 2.0, 0.0], WHOLE, 0, &mut rng);
        assert_eq!(*down.public, [0.0, -3.0, 0.0, 0.0]);
        down.follow(&vec![1.0, -3.0, 2.5, 0.0], WHOLE, 0, &mut rng);
        assert_eq!(*down.public, [0.0, -3.0, 2.5, 0.0]);
        down.follow(&vec![1.0, -3.0, 2.5, 0.0], WHOLE, 0, &mut rng);
        assert_eq!(*down.public, [1.0, -3.0, 2.5, 0.0]);
        assert_eq!(down.version(), 3);
        // Client 7 holds version 0: three moves of 5 bytes. A new client pays the whole model,
        // and so does one whose missed moves cost more than it (a 12-byte model).
        assert_eq!(down.send_to(7, 16).1, 15);
        assert_eq!(down.send_to(8, 16).1, 16);
        down.follow(&vec![0.0; 4], WHOLE, 1, &mut rng);
        assert_eq!(down.send_to(7, 16).1, 6);
        let mut fresh = Downlink::new(top1, Arc::new(vec![0.0f32; 4]));
        fresh.send_to(1, 12);
        for _ in 0..3 {
            fresh.follow(&vec![1.0; 4], WHOLE, 0, &mut rng);
        }
        assert_eq!(fresh.send_to(1, 12).1, 12);
    }
}
