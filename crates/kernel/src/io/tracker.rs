//! Files fedsim writes for experiment trackers (TensorBoard's event files, MLflow's file store)
//! into folders that belong to the user, who names them (`tracking:`) and may share them with
//! other runs and other programs.
//!
//! A tracker file is always a new one: it is created with `create_new`, so nothing there is
//! replaced, and where a name is taken the next free one is used ([`TrackerFile::first_free`]).
//! Folders are created where missing; none is removed. Every append is flushed, so a tracker
//! that reads the file while the run goes on sees each value as it is made.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A file fedsim created for a tracker and appends to.
pub struct TrackerFile {
    file: File,
    path: PathBuf,
}

/// What went wrong with a tracker file or folder.
#[derive(Debug, thiserror::Error)]
#[error("{}", path.display())]
pub struct TrackerError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl TrackerError {
    fn at(path: &Path, source: std::io::Error) -> TrackerError {
        TrackerError {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Creates `dir` and the folders above it where they are missing.
pub fn tracker_folder(dir: &Path) -> Result<(), TrackerError> {
    std::fs::create_dir_all(dir).map_err(|e| TrackerError::at(dir, e))
}

impl TrackerFile {
    /// Creates `dir/name`, and `dir` where missing; refuses (`AlreadyExists`) where the name
    /// is taken.
    pub fn create_new(dir: &Path, name: &str) -> Result<TrackerFile, TrackerError> {
        tracker_folder(dir)?;
        let path = dir.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| TrackerError::at(&path, e))?;
        Ok(TrackerFile { file, path })
    }

    /// Creates the first of `name(0)`, `name(1)`, … that is free in `dir`.
    pub fn first_free(dir: &Path, name: impl Fn(u32) -> String) -> Result<Self, TrackerError> {
        let mut n = 0;
        loop {
            match TrackerFile::create_new(dir, &name(n)) {
                Err(e) if e.source.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
                done => return done,
            }
        }
    }

    /// Writes `dir/name`, a new file, whole.
    pub fn write_new(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), TrackerError> {
        TrackerFile::create_new(dir, name)?.append(bytes)
    }

    /// Appends `bytes` and flushes them to the file.
    pub fn append(&mut self, bytes: &[u8]) -> Result<(), TrackerError> {
        (self.file.write_all(bytes))
            .and_then(|()| self.file.flush())
            .map_err(|e| TrackerError::at(&self.path, e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Creates the first of `parent/name(0)`, `parent/name(1)`, … that does not exist yet, as a
/// new folder (its parents where missing), and returns its path.
pub fn first_free_folder(
    parent: &Path,
    name: impl Fn(u32) -> String,
) -> Result<PathBuf, TrackerError> {
    tracker_folder(parent)?;
    let mut n = 0;
    loop {
        let dir = parent.join(name(n));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(TrackerError::at(&dir, e)),
        }
    }
}

/// Replaces `dir/name`, a file this process created in `dir`, a folder it created
/// ([`first_free_folder`]), with `bytes`: written beside it, then renamed over it.
pub fn replace_own(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), TrackerError> {
    let temporary = format!(".{name}.fedsim-new");
    TrackerFile::write_new(dir, &temporary, bytes)?;
    let path = dir.join(name);
    std::fs::rename(dir.join(&temporary), &path).map_err(|e| TrackerError::at(&path, e))
}

/// The text of `path`, a tracker's file; `None` where there is none (yet).
pub fn read_if_present(path: &Path) -> Result<Option<String>, TrackerError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TrackerError::at(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracker_file_never_replaces_one_and_takes_the_next_free_name() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("events.0"), "theirs").unwrap();
        let mut f = TrackerFile::first_free(&dir, |n| format!("events.{n}")).unwrap();
        assert_eq!(f.path(), dir.join("events.1"));
        f.append(b"ours").unwrap();
        f.append(b"!").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("events.0")).unwrap(),
            "theirs"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("events.1")).unwrap(),
            "ours!"
        );
        let taken = TrackerFile::write_new(&dir, "events.0", b"x").unwrap_err();
        assert_eq!(taken.source.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(
            std::fs::read_to_string(dir.join("events.0")).unwrap(),
            "theirs"
        );
        TrackerFile::write_new(&tmp.path().join("new/folder"), "meta", b"m").unwrap();
        assert_eq!(
            std::fs::read(tmp.path().join("new/folder/meta")).unwrap(),
            b"m"
        );
    }

    #[test]
    fn folders_are_new_and_only_our_own_files_are_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("store/run-0")).unwrap();
        std::fs::write(tmp.path().join("store/run-0/meta"), "theirs").unwrap();
        let dir = first_free_folder(&tmp.path().join("store"), |n| format!("run-{n}")).unwrap();
        assert_eq!(dir, tmp.path().join("store/run-1"));
        TrackerFile::write_new(&dir, "meta", b"running").unwrap();
        replace_own(&dir, "meta", b"finished").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("meta")).unwrap(),
            "finished"
        );
        let read = |path: &str| read_if_present(&tmp.path().join(path)).unwrap();
        assert_eq!(read("store/run-0/meta").as_deref(), Some("theirs"));
        assert_eq!(read("store/run-2/meta"), None);
    }
}
