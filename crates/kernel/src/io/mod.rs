//! The file system as fedsim may use it: input files that are regular files no larger than
//! what they should hold ([`input`]), the readers of data tables and per-client files
//! ([`tables`], [`population`]), output folders it shares with its users ([`folder`]: the
//! manifest, the lock, staging folders, files written in place), the spill file that keeps
//! idle values' float buffers out of memory ([`spill`]), files for experiment trackers in the
//! user's own folders ([`tracker`]: always new files, never a replaced one), and how much
//! memory the process has ([`memory`]).
//!
//! Every file fedsim opens, reads, writes, renames or removes is handled here: the layering
//! test fails on file-system calls anywhere else. This room knows files and folders, not what
//! is in them; it must not remove or replace anything it cannot prove fedsim wrote.

mod disk;
pub mod folder;
pub mod input;
pub mod memory;
pub mod population;
pub mod spill;
pub mod tables;
pub mod tracker;

pub use disk::DiskFile;
pub use folder::{
    publish_folder, remove_owned_folder, take_named_lock, FolderError, FolderLock, Manifest,
    OutputFolder, OutputRules, Staging, LOCK, LOCKS, MANIFEST, STAGING_MARKER,
};
pub use input::{check_regular, open_regular, read_bytes, read_text, InputFile, SizeLimit};
pub use memory::{machine_memory, peak_memory};
pub use population::{
    per_client_column, per_client_text, FedScaleBehavior, FedScaleDevice, FileError,
};
pub use spill::{unnamed_file, DeviceFloats, Floats, SpillError, SpillStore, Stored};
pub use tables::{
    read_client_table, read_population_column, scan_client_table, ClientTable, FeatureColumns,
    PopulationValues, TableColumns, TableError,
};
pub use tracker::{
    first_free_folder, read_if_present, replace_own, tracker_folder, TrackerError, TrackerFile,
};
