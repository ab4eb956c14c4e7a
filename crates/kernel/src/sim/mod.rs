//! The deterministic discrete-event kernel: virtual time, the event queue, the seed tree and the
//! scheduler actor. It knows nothing about federated learning; anything that can be addressed by an
//! [`EntityId`] (a server, clients, peers) can live in it.
//!
//! # Ordering guarantees
//! 1. Time is an integer count of microseconds ([`SimTime`]); it advances only inside the
//!    [`Scheduler`], and only to the time of the next event.
//! 2. Events are delivered one at a time in the order of the key
//!    `(time, origin rank, FIFO sequence)`: earlier time first; at equal time, the event scheduled
//!    by the entity with the lower rank first (ranks come from the scenario: the server is 0,
//!    clients follow in id order); at equal time and rank, the event scheduled first.
//! 3. An entity handles a message and *returns* the effects it wants (messages to send after a
//!    delay, records, stop). It never messages another entity directly, so actix mailboxes never
//!    decide order. The next event is delivered only after the previous handler returned.
//! 4. Work that runs in parallel (training jobs on the trainer pool) enters the simulation as a
//!    *pending* message: its delivery time is fixed when it is scheduled (from the system model,
//!    never from wall time), and the scheduler waits for the job's result only when that event
//!    is due. Results therefore enter in event order, never in completion order.
//! 5. Every random draw comes from a ChaCha stream derived by the [`SeedTree`] from
//!    `(seed, entity, purpose, index)`.
//!
//! What this module must not do: look at wall-clock time, iterate hash maps, or know what a
//! message means.

mod interrupt;
mod queue;
mod scheduler;
mod seed;
mod time;

pub use interrupt::{clear_interrupt, interrupt, interrupted};
pub use queue::{EventKey, EventQueue};
pub use scheduler::{
    Delivery, Effects, EntityId, Outcome, Payload, Pending, Queued, RecordObserver, Resume,
    SavePoint, Saving, Scheduler, SimError, World,
};
pub use seed::{Entity, SeedTree};
pub use time::{SimDuration, SimTime};
