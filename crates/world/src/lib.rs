//! The catalogues of the world a fedsim run simulates: the second layer of `LAYERS` (the
//! `fedsim` crate's docs), a crate of its own above [`fedsim_kernel`], whose modules it
//! re-exports so that every path reads `crate::settings::…` wherever a module lives.
//!
//! - [`data`]: data sets held in contiguous buffers, clients as index ranges.
//! - [`models`]: tch models, local SGD and evaluation, flat parameters.
//! - [`topology`]: communication graphs and mixing matrices of decentralized runs.
//! - [`system`]: devices, links and availability that turn work into simulated durations.
//! - [`privacy`]: differential privacy: clipping and noise of clients' updates, and the
//!   accountant (ε spent at δ, noise calibration).
//! - [`compression`]: compressors of clients' updates and the bytes they put on the wire.
//! - [`robust`]: Byzantine clients' attacks and robust aggregation rules.
//! - [`server_optimizer`]: how the server steps the global model along a round's combined
//!   change (FedAvgM, FedAdam, FedYogi, FedAdagrad).
//! - [`sampling`]: who a round selects: the sampling strategies and their draws.
//! - [`policy`]: the round policies (synchronous, FedBuff): their settings and what they
//!   declare; their behaviour is the server's.

pub use fedsim_kernel::{io, records, settings, sim};

pub mod compression;
pub mod data;
pub mod models;
pub mod policy;
pub mod privacy;
pub mod robust;
pub mod sampling;
pub mod server_optimizer;
pub mod system;
pub mod topology;
