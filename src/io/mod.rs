//! The file system as fedsim may use it: input files that are regular files, the readers of
//! data tables and per-client files ([`tables`], [`population`]), and output folders it
//! shares with its users ([`folder`]), the spill file that keeps idle values' float buffers
//! out of memory ([`spill`]), and how much memory the process has ([`memory`]).
//!
//! This room knows files and folders, not what is in them; it must not remove or replace
//! anything it cannot prove fedsim wrote.

pub mod folder;
pub mod memory;
pub mod population;
pub mod spill;
pub mod tables;

pub use folder::{
    remove_owned_folder, FolderError, FolderLock, Manifest, OutputFolder, OutputRules, LOCK,
    MANIFEST, STAGING_MARKER,
};
pub use memory::{machine_memory, peak_memory};
pub use population::{
    per_client_column, per_client_text, FedScaleBehavior, FedScaleDevice, FileError,
};
pub use spill::{Floats, SpillError, SpillStore, Stored};
pub use tables::{
    read_client_table, read_population_column, scan_client_table, ClientTable, FeatureColumns,
    PopulationValues, TableColumns, TableError,
};

use std::path::Path;

/// Refuses what is not a regular file (a FIFO, a device, a socket or a folder), which reading
/// could block on or never finish; symbolic links are followed. The error says what it is.
pub fn check_regular(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if meta.is_file() {
        return Ok(());
    }
    let what = if meta.is_dir() {
        "a folder"
    } else {
        special_kind(&meta)
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file; fedsim reads only regular files"),
    ))
}

#[cfg(unix)]
fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::Metadata) -> &'static str {
    "not a regular file"
}

/// Reads a regular file as text (see [`check_regular`]).
pub fn read_text(path: &Path) -> std::io::Result<String> {
    check_regular(path)?;
    std::fs::read_to_string(path)
}

/// Opens a regular file for reading (see [`check_regular`]).
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    check_regular(path)?;
    std::fs::File::open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_text(&fifo).unwrap_err();
        assert!(e.to_string().contains("named pipe (FIFO)"), "{e}");
        let e = read_text(tmp.path()).unwrap_err();
        assert!(e.to_string().contains("a folder"), "{e}");
        std::fs::write(tmp.path().join("f"), "x").unwrap();
        assert_eq!(read_text(&tmp.path().join("f")).unwrap(), "x");
    }
}
