//! A file fedsim writes, remembering the first error the disk gave.
//!
//! Writers that wrap a file (polars' Parquet writer) report some disk errors as errors of their
//! own ("Invalid thrift: transport error" for a full disk); the disk's own error is what a user
//! must read, so [`DiskFile`] keeps it. Files are only ever created inside fedsim's staging
//! folders or as temporary files renamed into place ([`super::folder`]).

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A file being written that remembers the first error the disk gave (see the module docs).
pub struct DiskFile {
    file: File,
    error: Arc<Mutex<Option<(std::io::ErrorKind, String)>>>,
}

impl DiskFile {
    /// Creates `path` (replacing what is there: callers own the folder it is in).
    pub(super) fn create(path: &Path) -> std::io::Result<DiskFile> {
        Ok(DiskFile {
            file: File::create(path)?,
            error: Default::default(),
        })
    }

    /// A second handle on the same file that records into the same place (for writers that
    /// take their file by value).
    pub fn try_clone(&self) -> std::io::Result<DiskFile> {
        Ok(DiskFile {
            file: self.file.try_clone()?,
            error: self.error.clone(),
        })
    }

    pub fn sync_all(&self) -> std::io::Result<()> {
        self.file.sync_all()
    }

    /// The first error the disk gave while this file (or a handle of it) was written.
    pub fn disk_error(&self) -> Option<std::io::Error> {
        let kept = self.error.lock().ok().and_then(|e| e.clone());
        kept.map(|(kind, text)| std::io::Error::new(kind, text))
    }

    fn keep<T>(&self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r {
            if let Ok(mut slot) = self.error.lock() {
                slot.get_or_insert_with(|| (e.kind(), e.to_string()));
            }
        }
        r
    }
}

impl std::io::Write for DiskFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = self.file.write(buf);
        self.keep(r)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.file.flush();
        self.keep(r)
    }
}

impl std::io::Seek for DiskFile {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        let r = self.file.seek(pos);
        self.keep(r)
    }
}
