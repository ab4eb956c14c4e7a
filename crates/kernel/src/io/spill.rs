//! Spilling: the large float buffers of values nobody needs right now (an idle client's
//! momentum, an update waiting for its round's aggregation) kept in an unnamed temporary file
//! instead of memory, and read back exactly, so that memory follows the round rather than the
//! number of clients.
//!
//! A [`SpillStore`] is one unnamed file (it has no name on disk, so nothing is left behind
//! when the process ends, however it ends) in the system's temporary folder (`TMPDIR`), made
//! when the first value is spilled (a run that spills nothing never needs the folder). A
//! value implements [`Floats`] by naming its float buffers; [`SpillStore::keep`] writes them
//! to a slot of the file and leaves the value's skeleton (its buffers emptied) in a
//! [`Stored`], which reads them back on [`Stored::restore`] or [`Stored::into_inner`]. Slots are
//! shared by the clones of a `Stored` and their space is reused once the last is dropped.
//! A store with a memory budget keeps values in memory while those it kept there (and that are
//! still kept, in a `Stored`) take less than the budget, and spills only past it. A `Stored`
//! may also hold its buffers on a device ([`Stored::on_device`], [`DeviceFloats`]), read back
//! the same way.
//!
//! This room must not change a value: a spilled buffer reads back bit for bit (the bytes of
//! each `f32`, NaN payloads and signed zeros included), so results never depend on whether,
//! or where, a value was spilled.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A new file in the system's temporary folder (`TMPDIR`) that has no name there: it lives as
/// long as the handle, and the operating system frees it when the process ends, however it
/// ends (a large Parquet table's rows, copied to be read a client at a time).
pub fn unnamed_file() -> std::io::Result<File> {
    tempfile::tempfile()
}

/// A value whose large float buffers may be spilled.
pub trait Floats {
    /// The value's float buffers, always in the same order for values of one shape. A value
    /// that names none is never spilled.
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>>;
}

impl Floats for Vec<f32> {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        vec![self]
    }
}

impl Floats for () {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        Vec::new()
    }
}

impl Floats for usize {
    fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
        Vec::new()
    }
}

/// The spill file could not be made, written or read.
#[derive(Debug, thiserror::Error)]
#[error(
    "the spill file in {dir} failed: {source} (give TMPDIR a folder with room, or set \
     `training.spill: off` to keep everything in memory)"
)]
pub struct SpillError {
    dir: PathBuf,
    #[source]
    source: std::io::Error,
}

/// Free space in the file: its end, and the offsets of released slots by their size.
#[derive(Default)]
struct Space {
    end: u64,
    free: BTreeMap<u64, Vec<u64>>,
}

impl Space {
    /// A slot of `bytes`: a released one of exactly that size (most recently released first),
    /// or new space at the end.
    fn take(&mut self, bytes: u64) -> u64 {
        if let Some(offset) = self.free.get_mut(&bytes).and_then(Vec::pop) {
            return offset;
        }
        let offset = self.end;
        self.end += bytes;
        offset
    }

    fn release(&mut self, offset: u64, bytes: u64) {
        self.free.entry(bytes).or_default().push(offset);
    }
}

/// One unnamed spill file; values of at least `min_floats` floats go to it, once those kept
/// in memory take `budget` bytes.
pub struct SpillStore {
    /// Made by the first value spilled.
    file: OnceLock<File>,
    /// Held while the file is made.
    making: Mutex<()>,
    dir: PathBuf,
    min_floats: usize,
    space: Mutex<Space>,
    /// Bytes of values of at least `min_floats` floats kept in memory before spilling.
    budget: u64,
    /// Bytes of such values kept in memory now (see [`Held`]).
    held: AtomicU64,
}

impl SpillStore {
    /// A store in the system's temporary folder (`TMPDIR`) that spills every value of at least
    /// `min_floats` floats, past `budget` bytes of them kept in memory.
    pub fn new(min_floats: usize, budget: u64) -> Arc<Self> {
        Self::in_dir(&std::env::temp_dir(), min_floats, budget)
    }

    /// A store in `dir`.
    pub fn in_dir(dir: &Path, min_floats: usize, budget: u64) -> Arc<Self> {
        Arc::new(SpillStore {
            file: OnceLock::new(),
            making: Mutex::new(()),
            dir: dir.to_path_buf(),
            min_floats,
            space: Mutex::default(),
            budget,
            held: AtomicU64::new(0),
        })
    }

    /// Bytes of values kept in memory under the budget now.
    pub fn held_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The file, made on first use.
    fn file(&self) -> Result<&File, SpillError> {
        if let Some(file) = self.file.get() {
            return Ok(file);
        }
        let _making = self.making.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(file) = self.file.get() {
            return Ok(file);
        }
        let file = tempfile::tempfile_in(&self.dir).map_err(|e| self.error(e))?;
        Ok(self.file.get_or_init(|| file))
    }

    fn error(&self, source: std::io::Error) -> SpillError {
        SpillError {
            dir: self.dir.clone(),
            source,
        }
    }

    fn space(&self) -> std::sync::MutexGuard<'_, Space> {
        self.space.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `value`, its buffers written to the file and emptied if they hold at least the store's
    /// `min_floats` floats together and the budget is taken; otherwise kept in memory as it is.
    pub fn keep<T: Floats>(self: &Arc<Self>, mut value: T) -> Result<Stored<T>, SpillError> {
        let mut buffers = value.floats_mut();
        let lens: Vec<usize> = buffers.iter().map(|b| b.len()).collect();
        let floats: usize = lens.iter().sum();
        if floats == 0 || floats < self.min_floats {
            drop(buffers);
            return Ok(Stored::in_memory(value));
        }
        let bytes = 4 * floats as u64;
        if self.held.fetch_add(bytes, Ordering::Relaxed) + bytes <= self.budget {
            drop(buffers);
            let held = Held {
                store: self.clone(),
                bytes,
            };
            return Ok(Stored {
                value,
                slot: None,
                device: None,
                _held: Some(Arc::new(held)),
            });
        }
        self.held.fetch_sub(bytes, Ordering::Relaxed);
        let file = self.file()?;
        let offset = self.space().take(bytes);
        let mut at = offset;
        for buffer in &mut buffers {
            if let Err(e) = file.write_all_at(as_bytes(buffer), at) {
                self.space().release(offset, bytes);
                return Err(self.error(e));
            }
            at += 4 * buffer.len() as u64;
            **buffer = Vec::new();
        }
        drop(buffers);
        let slot = Slot {
            store: self.clone(),
            offset,
            lens,
        };
        Ok(Stored {
            value,
            slot: Some(Arc::new(slot)),
            device: None,
            _held: None,
        })
    }

    /// Bytes the file spans (its live and released slots).
    pub fn file_bytes(&self) -> u64 {
        self.space().end
    }
}

/// The bytes of `floats`, as they lie in memory.
fn as_bytes(floats: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and every byte pattern is a valid u8; the length is exact.
    unsafe { std::slice::from_raw_parts(floats.as_ptr().cast::<u8>(), 4 * floats.len()) }
}

fn as_bytes_mut(floats: &mut [f32]) -> &mut [u8] {
    // SAFETY: as `as_bytes`; every byte pattern is a valid f32 (NaNs included).
    unsafe { std::slice::from_raw_parts_mut(floats.as_mut_ptr().cast::<u8>(), 4 * floats.len()) }
}

/// Where a value's buffers lie in the file, released when the last holder drops it.
struct Slot {
    store: Arc<SpillStore>,
    offset: u64,
    lens: Vec<usize>,
}

impl Slot {
    /// Reads the buffers back into `value`'s emptied ones.
    fn fill<T: Floats>(&self, value: &mut T) -> Result<(), SpillError> {
        let mut buffers = value.floats_mut();
        assert_eq!(
            buffers.len(),
            self.lens.len(),
            "a spilled value reads back into a value of its own shape"
        );
        let file = self.store.file()?;
        let mut at = self.offset;
        for (buffer, &len) in buffers.iter_mut().zip(&self.lens) {
            let mut floats = vec![0f32; len];
            file.read_exact_at(as_bytes_mut(&mut floats), at)
                .map_err(|e| self.store.error(e))?;
            at += 4 * len as u64;
            **buffer = floats;
        }
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let bytes = 4 * self.lens.iter().sum::<usize>() as u64;
        self.store.space().release(self.offset, bytes);
    }
}

/// A value kept in memory under its store's budget: its bytes count against the budget until
/// the last holder drops it (or takes the value out, [`Stored::into_inner`]).
struct Held {
    store: Arc<SpillStore>,
    bytes: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.store.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A value's float buffers kept in a device's memory instead of the host's (the trained
/// parameters of a cohort's run, waiting on the GPU for the server to sum them there), read
/// back bit for bit on demand.
pub trait DeviceFloats: Send + Sync {
    /// The buffers, in the value's [`Floats`] order.
    fn read(&self) -> Vec<Vec<f32>>;
    /// The holder's own type, for the code that works on the buffers where they are.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A value in memory, or its skeleton with its buffers in a spill file or on a device.
#[derive(Clone)]
pub struct Stored<T> {
    value: T,
    slot: Option<Arc<Slot>>,
    /// Set when the buffers live on a device ([`Stored::on_device`]).
    device: Option<Arc<dyn DeviceFloats>>,
    /// Set when a store kept the value in memory under its budget (released when dropped).
    _held: Option<Arc<Held>>,
}

impl<T> Stored<T> {
    /// `value`, kept in memory.
    pub fn in_memory(value: T) -> Self {
        Stored {
            value,
            slot: None,
            device: None,
            _held: None,
        }
    }

    /// `skeleton` (its float buffers empty), with the buffers on a device.
    pub fn on_device(skeleton: T, buffers: Arc<dyn DeviceFloats>) -> Self {
        Stored {
            value: skeleton,
            slot: None,
            device: Some(buffers),
            _held: None,
        }
    }

    /// Whether the buffers are in a spill file.
    pub fn is_spilled(&self) -> bool {
        self.slot.is_some()
    }

    /// The buffers, where they live on a device.
    pub fn device_floats(&self) -> Option<&dyn DeviceFloats> {
        self.device.as_deref()
    }

    /// Takes the buffers' device holder out, leaving the skeleton here as if in memory (its
    /// buffers empty): for the caller that puts the buffers where it needs them itself.
    pub fn take_device(&mut self) -> Option<Arc<dyn DeviceFloats>> {
        self.device.take()
    }

    /// The value as it is here: its buffers empty where they are spilled or on a device. For
    /// the fields that are never elsewhere (an update's weight).
    pub fn skeleton(&self) -> &T {
        &self.value
    }
}

impl<T: Floats> Stored<T> {
    /// The value, read back if it was spilled (other holders of the slot keep it).
    pub fn into_inner(mut self) -> Result<T, SpillError> {
        self.restore()?;
        Ok(self.value)
    }

    /// Reads the buffers back in place, if they were spilled or are on a device: the value is
    /// then in memory.
    pub fn restore(&mut self) -> Result<(), SpillError> {
        if let Some(slot) = self.slot.take() {
            slot.fill(&mut self.value)?;
        }
        if let Some(device) = self.device.take() {
            let buffers = self.value.floats_mut();
            let read = device.read();
            assert_eq!(buffers.len(), read.len(), "a device holds every buffer");
            for (buffer, values) in buffers.into_iter().zip(read) {
                *buffer = values;
            }
        }
        Ok(())
    }

    /// The value without its float buffers (emptied wherever they are): what else it carries.
    pub fn into_skeleton(mut self) -> T {
        for buffer in self.value.floats_mut() {
            *buffer = Vec::new();
        }
        self.value
    }

    /// The value in memory (after [`Stored::restore`]); a skeleton is never handed out.
    pub fn get(&self) -> &T {
        assert!(
            self.slot.is_none() && self.device.is_none(),
            "a spilled value is restored before use"
        );
        &self.value
    }

    /// The value in memory, to change (after [`Stored::restore`]).
    pub fn get_mut(&mut self) -> &mut T {
        assert!(
            self.slot.is_none() && self.device.is_none(),
            "a spilled value is restored before use"
        );
        &mut self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Pair {
        weight: f64,
        a: Vec<f32>,
        b: Vec<f32>,
    }

    impl Floats for Pair {
        fn floats_mut(&mut self) -> Vec<&mut Vec<f32>> {
            vec![&mut self.a, &mut self.b]
        }
    }

    fn pair(seed: f32) -> Pair {
        Pair {
            weight: 2.5,
            a: vec![seed, -0.0, f32::from_bits(0x7fc0_1234), f32::INFINITY],
            b: vec![1.0 / 3.0, f32::MIN_POSITIVE / 2.0],
        }
    }

    fn bits(p: &Pair) -> Vec<u32> {
        p.a.iter().chain(&p.b).map(|x| x.to_bits()).collect()
    }

    #[test]
    fn a_spilled_value_reads_back_bit_for_bit() {
        let store = SpillStore::new(1, 0);
        let stored = store.keep(pair(7.0)).unwrap();
        assert!(stored.is_spilled());
        assert_eq!(stored.value.a.len() + stored.value.b.len(), 0, "emptied");
        assert_eq!(stored.value.weight, 2.5, "the skeleton keeps the rest");
        let copy = stored.clone();
        assert_eq!(bits(&stored.into_inner().unwrap()), bits(&pair(7.0)));
        let mut restored = copy;
        restored.restore().unwrap();
        assert!(!restored.is_spilled());
        assert_eq!(bits(restored.get()), bits(&pair(7.0)));
    }

    struct OnDevice(Vec<Vec<f32>>);

    impl DeviceFloats for OnDevice {
        fn read(&self) -> Vec<Vec<f32>> {
            self.0.clone()
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn buffers_on_a_device_read_back_in_place() {
        let Pair { a, b, .. } = pair(3.0);
        let skeleton = Pair {
            weight: 2.5,
            a: Vec::new(),
            b: Vec::new(),
        };
        let stored = Stored::on_device(skeleton, Arc::new(OnDevice(vec![a, b])));
        assert!(stored.device_floats().is_some() && !stored.is_spilled());
        assert_eq!(stored.skeleton().weight, 2.5);
        assert!(stored.skeleton().a.is_empty(), "the buffers are elsewhere");
        let back = stored.clone().into_inner().unwrap();
        assert_eq!(bits(&back), bits(&pair(3.0)));
        let mut restored = stored;
        restored.restore().unwrap();
        assert!(restored.device_floats().is_none());
        assert_eq!(bits(restored.get()), bits(&pair(3.0)));
    }

    #[test]
    #[should_panic(expected = "restored before use")]
    fn a_skeleton_is_never_handed_out() {
        let skeleton = Pair {
            weight: 1.0,
            a: Vec::new(),
            b: Vec::new(),
        };
        let stored = Stored::on_device(skeleton, Arc::new(OnDevice(vec![vec![], vec![]])));
        stored.get();
    }

    #[test]
    fn small_values_stay_in_memory() {
        let store = SpillStore::new(7, 0);
        let stored = store.keep(pair(1.0)).unwrap();
        assert!(!stored.is_spilled(), "6 floats < 7");
        assert_eq!(store.file_bytes(), 0);
        assert_eq!(bits(stored.get()), bits(&pair(1.0)));
        assert!(!store.keep(()).unwrap().is_spilled());
    }

    #[test]
    fn a_slot_is_reused_once_its_last_holder_drops_it() {
        let store = SpillStore::new(1, 0);
        let first = store.keep(pair(1.0)).unwrap();
        let copy = first.clone();
        assert_eq!(store.file_bytes(), 24);
        drop(first);
        // The copy still holds the slot: a new value takes new space.
        let second = store.keep(pair(2.0)).unwrap();
        assert_eq!(store.file_bytes(), 48);
        assert_eq!(bits(&copy.into_inner().unwrap()), bits(&pair(1.0)));
        // Released: the next value of that size takes it.
        let third = store.keep(pair(3.0)).unwrap();
        assert_eq!(store.file_bytes(), 48);
        assert_eq!(bits(&third.into_inner().unwrap()), bits(&pair(3.0)));
        assert_eq!(bits(&second.into_inner().unwrap()), bits(&pair(2.0)));
    }

    #[test]
    fn a_store_that_cannot_be_made_names_its_folder() {
        let store = SpillStore::in_dir(Path::new("/nonexistent/spill"), 3, 0);
        // Nothing to spill: the folder is never needed.
        assert!(!store.keep(vec![1.0f32]).unwrap().is_spilled());
        let err = store.keep(pair(1.0)).err().expect("no such folder");
        let message = err.to_string();
        assert!(message.contains("/nonexistent/spill"), "{message}");
        assert!(message.contains("training.spill: off"), "{message}");
    }

    /// Under a budget of two values, two stay in memory and the third is spilled; once one of
    /// those in memory is dropped (or taken out), the next fits again.
    #[test]
    fn values_stay_in_memory_until_the_budget_is_taken() {
        let store = SpillStore::new(1, 48);
        let first = store.keep(pair(1.0)).unwrap();
        let second = store.keep(pair(2.0)).unwrap();
        assert!(!first.is_spilled() && !second.is_spilled());
        assert_eq!(store.held_bytes(), 48);
        let third = store.keep(pair(3.0)).unwrap();
        assert!(third.is_spilled());
        let copy = first.clone();
        drop(first);
        assert_eq!(store.held_bytes(), 48, "a copy still holds it");
        assert_eq!(bits(&copy.into_inner().unwrap()), bits(&pair(1.0)));
        assert_eq!(store.held_bytes(), 24);
        let fourth = store.keep(pair(4.0)).unwrap();
        assert!(!fourth.is_spilled());
        for (stored, seed) in [(second, 2.0), (third, 3.0), (fourth, 4.0)] {
            assert_eq!(bits(&stored.into_inner().unwrap()), bits(&pair(seed)));
        }
        assert_eq!(store.held_bytes(), 0);
    }
}
