//! fedsim's federated algorithms behind one trait, and their registry: the third layer of
//! `LAYERS` (the `fedsim` crate's docs), a crate of its own above [`fedsim_world`], whose
//! modules it re-exports (with the kernel's) so that every path reads `crate::models::…`
//! wherever a module lives.

pub use fedsim_kernel::{io, records, settings, sim};
pub use fedsim_world::{
    compression, data, models, policy, privacy, robust, sampling, server_optimizer, system,
    topology,
};

pub mod algorithms;
