//! The float precision of the models' products (`training.precision`): libtorch's TF32 switch
//! for GPUs (process-wide, so runs that differ in it take turns: [`PrecisionLease`]) and its
//! autocast to bf16 (per thread: [`use_on_this_thread`]).
//!
//! This room must not change a precision while a run holds another: a run's results depend on
//! its own setting alone, never on which other run shares the process.

use crate::settings::Precision;
use std::sync::{Condvar, Mutex};

// libtorch's autocast state, which tch 0.26 exposes only for CUDA and f16: the C++ functions by
// their (Itanium ABI) names in `libtorch_cpu`, which every build links (as `device.rs` reaches
// the global context). All of it is thread-local in libtorch: the switch per device type, the
// reduced type per device type, and the cache of cast weights.
extern "C" {
    #[link_name = "_ZN2at8autocast20set_autocast_enabledEN3c1010DeviceTypeEb"]
    fn at_set_autocast_enabled(device_type: i8, on: bool);
    #[link_name = "_ZN2at8autocast18set_autocast_dtypeEN3c1010DeviceTypeENS1_10ScalarTypeE"]
    fn at_set_autocast_dtype(device_type: i8, dtype: i8);
    #[link_name = "_ZN2at8autocast26set_autocast_cache_enabledEb"]
    fn at_set_autocast_cache_enabled(on: bool);
    #[link_name = "_ZN2at8autocast19is_autocast_enabledEN3c1010DeviceTypeE"]
    fn at_is_autocast_enabled(device_type: i8) -> bool;
}

/// `c10::DeviceType::CPU` and `CUDA`.
const CPU: i8 = 0;
const CUDA: i8 = 1;
/// `c10::ScalarType::BFloat16`.
const BFLOAT16: i8 = 15;

/// Sets this thread's autocast for `precision`: under `bf16`, products on the CPU and on GPUs
/// in bf16 (PyTorch's `torch.autocast(device, dtype=torch.bfloat16)`), otherwise off. The cache
/// of cast weights stays off: a thread that trains many clients never holds one client's
/// weights for another. Call it on every thread that runs model code (the trainer pool's
/// workers do, as they start).
pub fn use_on_this_thread(precision: Precision) {
    let on = precision == Precision::Bf16;
    // SAFETY: these only store thread-local flags of libtorch's autocast.
    unsafe {
        at_set_autocast_cache_enabled(false);
        for device in [CPU, CUDA] {
            at_set_autocast_dtype(device, BFLOAT16);
            at_set_autocast_enabled(device, on);
        }
    }
}

/// Whether this thread's products on the CPU run in bf16.
fn autocast_on_this_thread() -> bool {
    // SAFETY: reads a thread-local flag.
    unsafe { at_is_autocast_enabled(CPU) }
}

/// `f` with this thread's products in f32 whatever `training.precision` says: statistics that
/// are not a network's passes (FedGMM's Gaussian densities and fits) keep their precision.
pub fn in_f32<T>(f: impl FnOnce() -> T) -> T {
    if !autocast_on_this_thread() {
        return f();
    }
    /// Switches bf16 back on when dropped, also when `f` panics.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            use_on_this_thread(Precision::Bf16);
        }
    }
    use_on_this_thread(Precision::Fp32);
    let _restore = Restore;
    f()
}

/// Which TF32 setting the process's GPU runs hold now, and how many hold it.
struct Holders {
    tf32: bool,
    count: usize,
}

static HOLDERS: Mutex<Holders> = Mutex::new(Holders {
    tf32: false,
    count: 0,
});
static RELEASED: Condvar = Condvar::new();

/// A GPU run's hold on libtorch's process-wide TF32 setting: while any run holds one setting,
/// a run that needs the other waits for them to finish (a sweep whose cells differ in
/// `training.precision` runs them in turn on the GPU). Released when dropped.
pub struct PrecisionLease {
    held: bool,
}

impl PrecisionLease {
    /// Holds the TF32 setting `precision` needs (on for `tf32`, off otherwise), waiting while
    /// other runs hold the other, and sets it through `apply`.
    fn take(precision: Precision, apply: impl FnOnce(bool)) -> PrecisionLease {
        let tf32 = precision == Precision::Tf32;
        let mut holders = HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
        while holders.count > 0 && holders.tf32 != tf32 {
            holders = RELEASED.wait(holders).unwrap_or_else(|e| e.into_inner());
        }
        if holders.count == 0 {
            apply(tf32);
            holders.tf32 = tf32;
        }
        holders.count += 1;
        PrecisionLease { held: true }
    }

    /// Holds nothing: CPU runs, whose precision is all per thread.
    pub fn none() -> PrecisionLease {
        PrecisionLease { held: false }
    }

    /// A GPU run's hold, setting libtorch's TF32 switches (cuBLAS and cuDNN) through `apply`.
    pub(super) fn gpu(precision: Precision, apply: impl FnOnce(bool)) -> PrecisionLease {
        PrecisionLease::take(precision, apply)
    }
}

impl Drop for PrecisionLease {
    fn drop(&mut self) {
        if self.held {
            let mut holders = HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
            holders.count -= 1;
            RELEASED.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    use tch::{Kind, Tensor};

    #[test]
    fn bf16_autocasts_products_and_keeps_losses_in_f32_on_this_thread_only() {
        std::thread::spawn(|| {
            let x = Tensor::from_slice(&[0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6]).view([1, 2, 3]);
            let w = Tensor::from_slice(&[1.0f32, -1.0, 0.5, 2.0, 0.25, -0.5]).view([1, 3, 2]);
            use_on_this_thread(Precision::Bf16);
            assert!(autocast_on_this_thread());
            let logits = x.bmm(&w);
            assert_eq!(logits.kind(), Kind::BFloat16);
            let y = Tensor::from_slice(&[1i64, 0]);
            let loss = logits.view([2, 2]).cross_entropy_loss::<Tensor>(
                &y,
                None,
                tch::Reduction::None,
                -100,
                0.0,
            );
            assert_eq!(loss.kind(), Kind::Float);
            // Another thread is untouched.
            std::thread::spawn(|| assert!(!autocast_on_this_thread()))
                .join()
                .unwrap();
            assert_eq!(in_f32(|| x.bmm(&w).kind()), Kind::Float);
            assert!(autocast_on_this_thread(), "back on after `in_f32`");
            use_on_this_thread(Precision::Fp32);
            assert!(!autocast_on_this_thread());
            assert_eq!(x.bmm(&w).kind(), Kind::Float);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn runs_that_differ_in_tf32_take_turns_and_alike_ones_share() {
        let applied = Arc::new(Mutex::new(Vec::new()));
        let record = |applied: &Arc<Mutex<Vec<bool>>>| {
            let applied = applied.clone();
            move |tf32| applied.lock().unwrap().push(tf32)
        };
        let a = PrecisionLease::gpu(Precision::Fp32, record(&applied));
        // Alike: shares the setting without waiting or setting it again.
        let b = PrecisionLease::gpu(Precision::Bf16, record(&applied));
        assert_eq!(*applied.lock().unwrap(), [false]);
        let started = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let (applied, started) = (applied.clone(), started.clone());
            std::thread::spawn(move || {
                let lease = PrecisionLease::gpu(Precision::Tf32, record(&applied));
                started.fetch_add(1, Ordering::SeqCst);
                lease
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            started.load(Ordering::SeqCst),
            0,
            "tf32 waits for the fp32 runs"
        );
        drop(a);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            started.load(Ordering::SeqCst),
            0,
            "one fp32 run still holds"
        );
        drop(b);
        let lease = waiter.join().unwrap();
        assert_eq!(*applied.lock().unwrap(), [false, true]);
        drop(lease);
        drop(PrecisionLease::none());
    }
}
