//! fedsim's kernel and what every layer shares: the first layer of `LAYERS` (the `fedsim`
//! crate's docs), a crate of its own so that the simulated world, the algorithms and the actors
//! build on it without rebuilding it, and so that it can import nothing above it.
//!
//! - [`sim`]: virtual time, the event queue, the seed tree and the scheduler actor.
//! - [`settings`]: the run settings that belong to no catalogue (evaluation, divergence, how
//!   clients train on the machine), the catalogue glue and [`settings::FieldError`]; pure
//!   validation, no host.
//! - [`io`]: input files that are regular files, the readers of data tables and per-client
//!   files, and output folders fedsim shares with its users.
//! - [`records`]: what the entities emit, in event order.
//!
//! It holds no libtorch: nothing here waits for tch to build.

pub mod io;
pub mod records;
pub mod settings;
pub mod sim;
