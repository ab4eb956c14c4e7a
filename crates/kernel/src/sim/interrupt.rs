//! Stopping the runs of this process from outside them (Ctrl-C in a notebook): a flag that
//! every [`super::Scheduler`] reads before it delivers each event, ending its run with
//! [`super::SimError::Interrupted`]. The command line never sets it (SIGINT ends the process,
//! like `kill -9`); the Python package sets it when Python reports a `KeyboardInterrupt`.
//!
//! This room must not decide anything a run computes: the flag only ends runs.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Ends every run of this process at its next event.
pub fn interrupt() {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Lets runs go on again (before new runs start).
pub fn clear_interrupt() {
    INTERRUPTED.store(false, Ordering::SeqCst);
}

/// Whether runs are to end.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
