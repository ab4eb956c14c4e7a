//! What a run's cohorts keep on the device instead of the host: clients' momentum buffers
//! between rounds ([`ResidentMomenta`]), updates waiting for the server to sum them there
//! ([`sum_on_device`]) and clients' own models between rounds ([`KeptFloats`]), within one
//! budget ([`DeviceBudget`]).
//!
//! This room must not decide what stays by anything that changes results, nor sum in any other
//! order or with any other arithmetic than the host's: a value here or on the host holds the
//! same bits, and a sum here is the host's sum.

use super::checkpoint::{decode_from, encode_into};
use crate::algorithms::WeightedSum;
use crate::io::{DeviceFloats, Floats, Stored};
use crate::models::profile::{crossed, kept_on_device, timed, Crossing, Phase};
use crate::sim::SimError;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use tch::{Device, Kind, Tensor};

/// The device memory a run's kept values may take, `training.device_state_gib` (16 GiB by
/// default: FEMNIST's FedEM, 539 writers × 3 CNNs of 2.28 M parameters, holds 14.7 GB of
/// momentum buffers and as much of updates while a round trains). A value that does not fit
/// crosses to the host as on the CPU.
pub(super) struct DeviceBudget {
    used: Mutex<u64>,
    limit: u64,
}

impl DeviceBudget {
    pub(super) fn new(limit: u64) -> Arc<Self> {
        Arc::new(DeviceBudget {
            used: Mutex::new(0),
            limit,
        })
    }

    /// Takes `bytes` where they fit.
    fn take(&self, bytes: u64) -> bool {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let fits = *used + bytes <= self.limit;
        if fits {
            *used += bytes;
            kept_on_device(*used);
        }
        fits
    }

    fn give_back(&self, bytes: u64) {
        *self.used.lock().unwrap_or_else(|e| e.into_inner()) -= bytes;
    }

    /// `bytes` of the budget, held until the reservation is dropped; `None` where they do not
    /// fit.
    pub(super) fn reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        self.take(bytes).then(|| Reservation {
            budget: self.clone(),
            bytes,
        })
    }
}

/// Bytes of a [`DeviceBudget`], given back when dropped.
pub(super) struct Reservation {
    budget: Arc<DeviceBudget>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
    }
}

/// Clients' momentum buffers kept on the device between rounds where cohorts are the GPU path
/// (`keeps_momentum_on_device` in `cohort`): (client, run of its update) → a flat `[P]` tensor, so that a
/// round sends no buffer down and brings none back. A shard takes its clients' buffers out
/// as it starts and puts the trained ones back. The server never sends a busy client a second
/// job and a client takes up the state of every job it trained, so a buffer here is the one
/// its state would hold on the host (whose `momentum` then stays empty); results are the same
/// bits either way. Not spilled: the run's [`DeviceBudget`] bounds it instead.
pub(super) struct ResidentMomenta {
    buffers: Mutex<HashMap<(u32, usize), Tensor>>,
    budget: Arc<DeviceBudget>,
}

impl ResidentMomenta {
    pub(super) fn new(budget: Arc<DeviceBudget>) -> Self {
        ResidentMomenta {
            buffers: Mutex::default(),
            budget,
        }
    }

    /// The slot of run `run` of `client`'s update, whose buffer holds `bytes`: its kept
    /// buffer, or an empty slot where a new one fits (its bytes promised), or `None` where it
    /// does not (the buffer then crosses as on the host).
    pub(super) fn take(&self, client: u32, run: usize, bytes: u64) -> Option<Option<Tensor>> {
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(buffer) = buffers.remove(&(client, run)) {
            return Some(Some(buffer));
        }
        self.budget.take(bytes).then_some(None)
    }

    /// Writes the buffers kept into `w` for a checkpoint, one at a time in (client, run) order,
    /// each read back to the host with the device it is on. Only where no training job is in
    /// flight: a shard that has started holds its clients' buffers.
    pub(super) fn write_kept(&self, w: &mut dyn Write) -> Result<(), SimError> {
        let buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<(u32, usize)> = buffers.keys().copied().collect();
        keys.sort_unstable();
        encode_into(&(keys.len() as u64), w)?;
        for (client, run) in keys {
            let buffer = &buffers[&(client, run)];
            let cuda = match buffer.device() {
                Device::Cuda(index) => Some(index),
                _ => None,
            };
            encode_into(&(client, run, cuda, to_host(buffer)), w)?;
        }
        Ok(())
    }

    /// Puts back the buffers [`ResidentMomenta::write_kept`] wrote, each on its device, their
    /// bytes taken from the run's budget as when they were made.
    pub(super) fn read_kept(&self, r: &mut dyn Read) -> Result<(), SimError> {
        let count: u64 = decode_from(r, "the number of momentum buffers on the device")?;
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..count {
            let (client, run, cuda, values): (u32, usize, Option<usize>, Vec<f32>) =
                decode_from(r, "a momentum buffer kept on the device")?;
            if !self.budget.take(4 * values.len() as u64) {
                return Err(SimError::Internal(
                    "a checkpoint's momentum buffers do not fit the device budget".into(),
                ));
            }
            let device = cuda.map_or(Device::Cpu, Device::Cuda);
            crossed(Crossing::VectorsIn, 4 * values.len());
            buffers.insert((client, run), Tensor::from_slice(&values).to_device(device));
        }
        Ok(())
    }

    /// Puts back what a slot holds after training; an empty slot (no buffer was made) gives
    /// its `bytes` back.
    pub(super) fn put(&self, client: u32, run: usize, slot: Option<Tensor>, bytes: u64) {
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        match slot {
            Some(buffer) => drop(buffers.insert((client, run), buffer)),
            None => self.budget.give_back(bytes),
        }
    }
}

/// A value's float vectors kept on the device where its cohort trained them, for a client's
/// update (its trained runs' parameters, [`SgdUpdate::sends`]) until the server sums them there
/// ([`sum_on_device`]), or for a client's state (Ditto's personal model, [`SgdUpdate::keeps`])
/// until its next job trains from it; a vector that was not trained there is held here as it
/// was. Anything else that needs the value reads it back ([`Stored::restore`]). Its bytes on the
/// device are held in the run's [`DeviceBudget`] while it lives.
///
/// [`SgdUpdate::sends`]: crate::algorithms::SgdUpdate::sends
/// [`SgdUpdate::keeps`]: crate::algorithms::SgdUpdate::keeps
pub(super) struct KeptFloats {
    /// One per float vector of the value, in its [`Floats`] order.
    vectors: Mutex<Vec<Held>>,
    _bytes: Reservation,
}

/// A vector of [`KeptFloats`].
pub(super) enum Held {
    /// A flat `[P]` tensor on the device.
    Device(Tensor),
    /// On the host.
    Host(Vec<f32>),
}

impl Held {
    fn is_finite(&self) -> bool {
        match self {
            Held::Device(v) => v.isfinite().all().int64_value(&[]) != 0,
            Held::Host(v) => v.iter().all(|x| x.is_finite()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Held::Device(v) => v.numel(),
            Held::Host(v) => v.len(),
        }
    }
}

impl KeptFloats {
    pub(super) fn new(vectors: Vec<Held>, bytes: Reservation) -> Self {
        KeptFloats {
            vectors: Mutex::new(vectors),
            _bytes: bytes,
        }
    }

    fn vectors(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.vectors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many floats the vectors hold together.
    pub(super) fn floats(&self) -> usize {
        self.vectors().iter().map(Held::len).sum()
    }

    /// Whether every value is finite (for a vector on the device, a number crosses).
    pub(super) fn is_finite(&self) -> bool {
        self.vectors().iter().all(Held::is_finite)
    }

    /// The vectors, those on the device as tensors sharing their memory.
    pub(super) fn shared(&self) -> Vec<Held> {
        (self.vectors().iter())
            .map(|v| match v {
                Held::Device(t) => Held::Device(t.shallow_clone()),
                Held::Host(v) => Held::Host(v.clone()),
            })
            .collect()
    }
}

impl DeviceFloats for KeptFloats {
    fn read(&self) -> Vec<Vec<f32>> {
        (self.vectors().iter())
            .map(|v| match v {
                Held::Device(t) => to_host(t),
                Held::Host(v) => v.clone(),
            })
            .collect()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The [`KeptFloats`] behind a value's device buffers.
fn kept(floats: &dyn DeviceFloats) -> Option<&KeptFloats> {
    floats.as_any().downcast_ref::<KeptFloats>()
}

/// A flat `[P]` tensor's values on the host.
pub(super) fn to_host(flat: &Tensor) -> Vec<f32> {
    let values = Vec::<f32>::try_from(&flat.to_device(Device::Cpu)).expect("a flat f32 tensor");
    crossed(Crossing::VectorsOut, 4 * values.len());
    values
}

/// Where `state`'s vectors are kept on the device ([`KeptFloats`]): its vector `vector`, as
/// the tensor that holds it (left empty in the state), with every other vector put back in
/// the state, which is then as in memory. `None` where the state is not kept so (it is read
/// back as usual) or that vector is on the host.
pub(super) fn take_kept_vector<S: Floats>(state: &mut Stored<S>, vector: usize) -> Option<Tensor> {
    kept(state.device_floats()?)?;
    let holder = state.take_device()?;
    let vectors = kept(&*holder).map(KeptFloats::shared)?;
    let mut taken = None;
    let buffers = state.get_mut().floats_mut();
    assert_eq!(buffers.len(), vectors.len(), "a device holds every buffer");
    for (k, (buffer, held)) in buffers.into_iter().zip(vectors).enumerate() {
        match held {
            Held::Device(t) if k == vector => taken = Some(t),
            Held::Device(t) => *buffer = to_host(&t),
            Held::Host(values) => *buffer = values,
        }
    }
    taken
}

/// `state`'s vectors kept with its vector `vector` as `trained`, on the device (the state
/// holds it empty: `finish` moved the run's empty parameters there), and every other vector
/// as it is, taken out of the state, which is left as their skeleton; `bytes` reserved for
/// `trained`.
pub(super) fn keep_state_vector<S: Floats>(
    state: &mut S,
    vector: usize,
    trained: Tensor,
    bytes: Reservation,
) -> KeptFloats {
    let mut trained = Some(trained);
    let vectors = (state.floats_mut().into_iter().enumerate())
        .map(|(k, buffer)| match k == vector {
            true => {
                assert!(
                    buffer.is_empty(),
                    "the kept run's parameters stay on the device"
                );
                Held::Device(trained.take().expect("one kept vector"))
            }
            false => Held::Host(std::mem::take(buffer)),
        })
        .collect();
    KeptFloats::new(vectors, bytes)
}

/// For each float vector k of `updates` (in the order given: client order), Σ wᵢ·vᵢ with wᵢ
/// = `weight(update, k)`, on the device of the first update kept there: each vector taken as
/// f64, multiplied by its weight and added to the sum, the arithmetic of [`WeightedSum::add`]
/// in the same order, so the host's bits; with the updates' skeletons, as
/// [`Updates::weighted_sums`] gives them. Only the sums cross back; an update on the host
/// crosses up. A spilled update that cannot be read back panics (the caller's error).
///
/// [`Updates::weighted_sums`]: crate::algorithms::Updates::weighted_sums
pub(super) fn sum_on_device<U: Floats>(
    updates: Vec<(u32, Stored<U>)>,
    weight: impl Fn(&U, usize) -> f64,
) -> (Vec<WeightedSum>, Vec<U>) {
    let device = (updates.iter())
        .find_map(|(_, u)| u.device_floats().and_then(kept))
        .and_then(|k| {
            (k.vectors().iter()).find_map(|v| match v {
                Held::Device(t) => Some(t.device()),
                Held::Host(_) => None,
            })
        })
        .unwrap_or(Device::Cpu);
    timed(Phase::Aggregate, device, || {
        tch::no_grad(|| {
            let (mut sums, mut totals): (Vec<Tensor>, Vec<f64>) = (Vec::new(), Vec::new());
            let mut skeletons = Vec::new();
            for (_, stored) in updates {
                let kept_vectors: Option<Vec<Tensor>> = (stored.device_floats().and_then(kept))
                    .map(|kept| {
                        (kept.shared().into_iter())
                            .map(|v| match v {
                                Held::Device(t) => t,
                                Held::Host(v) => {
                                    crossed(Crossing::VectorsIn, 4 * v.len());
                                    Tensor::from_slice(&v).to_device(device)
                                }
                            })
                            .collect()
                    });
                let (vectors, skeleton): (Vec<Tensor>, U) = match kept_vectors {
                    Some(vectors) => (vectors, stored.into_skeleton()),
                    None => {
                        let mut update = stored
                            .into_inner()
                            .unwrap_or_else(|e| panic!("reading an update back: {e}"));
                        let vectors = (update.floats_mut().into_iter())
                            .map(|v| {
                                crossed(Crossing::VectorsIn, 4 * v.len());
                                Tensor::from_slice(&std::mem::take(v)).to_device(device)
                            })
                            .collect();
                        (vectors, update)
                    }
                };
                if sums.is_empty() {
                    sums = (vectors.iter())
                        .map(|v| Tensor::zeros([v.numel() as i64], (Kind::Double, device)))
                        .collect();
                    totals = vec![0.0; vectors.len()];
                }
                assert_eq!(sums.len(), vectors.len(), "updates of one shape");
                for (k, (sum, v)) in sums.iter_mut().zip(vectors).enumerate() {
                    let w = weight(&skeleton, k);
                    totals[k] += w;
                    // As the host's `acc += w * (x as f64)`: the product rounded, then the sum.
                    let product = v.to_device(device).to_kind(Kind::Double) * w;
                    let _ = sum.g_add_(&product);
                }
                skeletons.push(skeleton);
            }
            let sums = (sums.into_iter().zip(totals))
                .map(|(sum, total)| {
                    let acc = Vec::<f64>::try_from(&sum.to_device(Device::Cpu))
                        .expect("a sum is a flat f64 tensor");
                    crossed(Crossing::VectorsOut, 8 * acc.len());
                    WeightedSum::from_parts(acc, total)
                })
                .collect();
            (sums, skeletons)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::{ModelUpdate, Updates};
    use rand::{Rng, SeedableRng};

    #[test]
    fn momentum_buffers_stay_while_they_fit_and_give_back_what_was_not_used() {
        // Room for two buffers of 8 bytes.
        let kept = ResidentMomenta::new(DeviceBudget::new(16));
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

    #[test]
    fn sums_on_the_device_are_the_hosts_sums_bit_for_bit() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let mut vector = |n: usize| -> Vec<f32> {
            let mut v: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0..3.0)).collect();
            v[0] = -0.0; // a signed zero: the sum starts from +0, as on the host
            v
        };
        let updates: Vec<(u32, ModelUpdate)> = (0..5)
            .map(|c| {
                let params = vector(1000);
                (
                    c,
                    ModelUpdate {
                        params,
                        weight: 1.0 + c as f64 / 3.0,
                    },
                )
            })
            .collect();
        let budget = DeviceBudget::new(4 * 1000 * 3);
        // Clients 0, 2 and 4 kept on the device (the CPU here), 1 and 3 on the host.
        let stored = |(c, u): &(u32, ModelUpdate)| -> (u32, Stored<ModelUpdate>) {
            let update = ModelUpdate {
                params: u.params.clone(),
                weight: u.weight,
            };
            if c % 2 == 1 {
                return (*c, Stored::in_memory(update));
            }
            let bytes = budget.reserve(4000).expect("room for three");
            let vectors = vec![Held::Device(Tensor::from_slice(&update.params))];
            let skeleton = ModelUpdate {
                params: Vec::new(),
                ..update
            };
            (
                *c,
                Stored::on_device(skeleton, Arc::new(KeptFloats::new(vectors, bytes))),
            )
        };
        let kept: Vec<_> = updates.iter().map(stored).collect();
        assert!(budget.reserve(1).is_none(), "the budget is taken");
        // Client 0's kept vector, shared with the sum (the summed copy is dropped with it).
        let first = kept[0].1.device_floats().map(|f| f.read());
        let (on_device, _) = sum_on_device(kept, |u: &ModelUpdate, _| u.weight);
        let updates_again: Vec<(u32, ModelUpdate)> = (updates.iter())
            .map(|(c, u)| {
                (
                    *c,
                    ModelUpdate {
                        params: u.params.clone(),
                        weight: u.weight,
                    },
                )
            })
            .collect();
        let (on_host, skeletons) = Updates::from(updates).weighted_sums(|u, _| u.weight);
        assert!(
            skeletons.iter().all(|u| u.params.is_empty()) && skeletons[4].weight == 1.0 + 4.0 / 3.0
        );
        let bits = |sums: Vec<WeightedSum>| -> Vec<u32> {
            sums.into_iter()
                .flat_map(|s| s.average())
                .map(f32::to_bits)
                .collect()
        };
        assert_eq!(bits(on_device), bits(on_host));
        // Read back, a kept update is the one trained.
        let params: Vec<u32> = updates_again[0]
            .1
            .params
            .iter()
            .map(|x| x.to_bits())
            .collect();
        let read: Vec<u32> = first.unwrap()[0].iter().map(|x| x.to_bits()).collect();
        assert_eq!(read, params);
        assert!(
            budget.reserve(12_000).is_some(),
            "summed updates give their bytes back"
        );
    }

    /// Two float vectors, as Ditto's state: a personal model and a momentum buffer.
    #[derive(Clone, Debug, Default, PartialEq)]
    struct Own {
        personal: Vec<f32>,
        momentum: Vec<f32>,
    }

    impl Floats for Own {
        fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
            vec![&mut self.personal, &mut self.momentum]
        }
    }

    #[test]
    fn a_kept_own_model_is_taken_where_it_is_and_the_rest_read_back() {
        let budget = DeviceBudget::new(8);
        let mut state = Own {
            personal: Vec::new(), // trained on the device: `finish` moved empty parameters
            momentum: vec![0.5, -0.5],
        };
        let trained = Tensor::from_slice(&[1.0f32, 2.0]);
        let bytes = budget.reserve(8).unwrap();
        let kept = keep_state_vector(&mut state, 0, trained, bytes);
        assert_eq!(state, Own::default(), "the state is left as its skeleton");
        assert!(kept.is_finite() && kept.floats() == 4);
        let stored = Stored::on_device(state, Arc::new(kept));
        // Read back where the host needs it (an evaluation).
        let read = stored.clone().into_inner().unwrap();
        assert_eq!(
            (read.personal, read.momentum),
            (vec![1.0, 2.0], vec![0.5, -0.5])
        );
        // The next job takes the model where it is; the rest is in memory, as restored.
        let mut next = stored;
        let start = take_kept_vector(&mut next, 0).expect("kept on the device");
        assert_eq!(Vec::<f32>::try_from(&start).unwrap(), [1.0, 2.0]);
        next.restore().unwrap();
        assert_eq!(
            next.get(),
            &Own {
                personal: Vec::new(),
                momentum: vec![0.5, -0.5]
            }
        );
        drop(next);
        assert!(
            budget.reserve(8).is_some(),
            "its bytes come back with the last holder"
        );
        // A state in memory has nothing kept.
        let mut plain = Stored::in_memory(Own::default());
        assert!(take_kept_vector(&mut plain, 0).is_none());
    }
}
