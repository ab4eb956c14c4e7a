//! Output folders fedsim shares with its users: what it may remove or replace, and one writer
//! at a time.
//!
//! - **Ownership.** A folder fedsim writes results into holds [`MANIFEST`]: the name, size and
//!   modification time of every file fedsim put there, replaced atomically. fedsim removes or
//!   replaces a file only when the manifest lists it with its current size and time. Any other
//!   entry with the name of a result is *foreign*: the folder is refused, naming them; with
//!   `force` they are moved aside to `NAME.before-fedsim` (never deleted).
//! - **One writer.** [`LOCK`] is held with an advisory lock (`flock`) while a process writes;
//!   a second writer is refused with the holder's process id and command line. The lock goes
//!   with its process, so the lock of a killed run is taken over by the next writer.
//! - **Staging.** A staging folder holds [`STAGING_MARKER`]; only such folders, left behind by
//!   killed runs, are removed. It is made under a reserved name ([`STAGING_DRAFT`] before its
//!   own) and renamed once marked, so a kill never leaves an unmarked one under its own name.
//! - **Inputs.** An input file (a scenario, a data file, a trace) is never an output: a run
//!   whose input is one of its result paths is refused.
//!
//! This room must not remove anything it cannot prove fedsim wrote.

use super::disk::DiskFile;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The manifest of the files fedsim wrote into a folder.
pub const MANIFEST: &str = ".fedsim-manifest";
/// The lock file of a folder's one writer.
pub const LOCK: &str = ".fedsim-lock";
/// The folder of the locks of a folder's parts (a sweep's cells).
pub const LOCKS: &str = ".fedsim-locks";
/// The marker file inside fedsim's own staging folders.
pub const STAGING_MARKER: &str = ".fedsim-staging";
/// A staging folder is made as `STAGING_DRAFT` + its name, marked, then renamed: a folder of
/// this name is fedsim's at every moment.
pub const STAGING_DRAFT: &str = ".fedsim-draft";
/// What a foreign file is renamed to under `force` (with `-2`, `-3`, … when taken).
const ASIDE_SUFFIX: &str = ".before-fedsim";
const MANIFEST_HEADER: &str = "# fedsim manifest v1: name, size, modified (ns); do not edit";

#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("writing {}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{} is being written by another fedsim process ({holder}); wait for it to end, or \
         choose another output folder (--out)",
        dir.display()
    )]
    Busy { dir: PathBuf, holder: String },
    #[error(
        "{} holds {} that fedsim did not write but would replace: {}; choose another output \
         folder (--out), or pass --force to move them aside (renamed to NAME{ASIDE_SUFFIX}; \
         fedsim never deletes them)",
        dir.display(),
        if names.len() == 1 { "a file" } else { "files" },
        names.join(", ")
    )]
    Foreign { dir: PathBuf, names: Vec<String> },
    #[error(
        "{} holds what fedsim did not write ({}); it removes only its own files, so move \
         those out (or choose another output folder) and run again",
        dir.display(),
        names.join(", ")
    )]
    NotOnlyOurs { dir: PathBuf, names: Vec<String> },
    #[error(
        "{} is an input of this run and also one of its results ({}); choose another output \
         folder (--out)",
        input.display(),
        output.display()
    )]
    InputIsOutput { input: PathBuf, output: PathBuf },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> FolderError + '_ {
    move |source| FolderError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What fedsim may do in an output folder beyond its own files.
#[derive(Clone, Debug, Default)]
pub struct OutputRules {
    /// Move foreign files with result names aside instead of refusing the folder.
    pub force: bool,
    /// The run's input files: none may be a result path.
    pub inputs: Vec<PathBuf>,
}

/// A file's size and modification time: what the manifest proves ownership by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    size: u64,
    modified_ns: i128,
}

impl Stamp {
    /// The stamp of a regular file (`None`: missing, a link, a folder or anything else).
    fn of(path: &Path) -> Option<Stamp> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.file_type().is_file() {
            return None;
        }
        let modified = meta.modified().ok()?;
        let modified_ns = match modified.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        };
        Some(Stamp {
            size: meta.len(),
            modified_ns,
        })
    }
}

/// The files fedsim wrote into one folder (see the module docs). A name has two stamps while
/// a file replaces fedsim's earlier one of that name ([`OutputFolder::publish`]): whichever a
/// kill leaves there is fedsim's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    entries: BTreeMap<String, Vec<Stamp>>,
}

impl Manifest {
    /// The manifest of `dir`; empty (nothing proven) when it is missing or unreadable.
    pub fn read(dir: &Path) -> Manifest {
        let Ok(text) = super::input::read_text(&dir.join(MANIFEST), super::SizeLimit::RESULT)
        else {
            return Manifest::default();
        };
        let mut entries = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let mut parts = line.split('\t');
            let (Some(name), Some(size), Some(time), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Manifest::default();
            };
            let (Ok(size), Ok(modified_ns)) = (size.parse(), time.parse()) else {
                return Manifest::default();
            };
            let stamp = Stamp { size, modified_ns };
            entries
                .entry(name.to_string())
                .or_insert_with(Vec::new)
                .push(stamp);
        }
        Manifest { entries }
    }

    /// Whether `dir` has a manifest at all (folders written before manifests have none).
    pub fn exists_in(dir: &Path) -> bool {
        dir.join(MANIFEST).is_file()
    }

    /// Whether `dir/name` is a regular file that fedsim wrote and nobody changed since.
    pub fn owns(&self, dir: &Path, name: &str) -> bool {
        let Some(stamps) = self.entries.get(name) else {
            return false;
        };
        Stamp::of(&dir.join(name)).is_some_and(|now| stamps.contains(&now))
    }

    /// Every listed file is there, unchanged.
    pub fn is_intact(&self, dir: &Path) -> bool {
        !self.entries.is_empty() && self.entries.keys().all(|n| self.owns(dir, n))
    }

    /// The names it lists.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Lists `dir/name` as it is now (a regular file).
    fn add(&mut self, dir: &Path, name: &str) -> Result<(), FolderError> {
        let path = dir.join(name);
        let stamp = Stamp::of(&path).ok_or_else(|| FolderError::Io {
            path: path.clone(),
            source: std::io::Error::other("fedsim's own file went missing"),
        })?;
        self.entries.insert(name.to_string(), vec![stamp]);
        Ok(())
    }

    /// Keeps only the entries that still prove ownership, each with the stamp that does.
    fn prune(&mut self, dir: &Path) {
        self.entries.retain(|name, stamps| {
            let now = Stamp::of(&dir.join(name));
            stamps.retain(|s| Some(*s) == now);
            !stamps.is_empty()
        });
    }

    /// Replaces `dir`'s manifest atomically (temporary file, sync, rename).
    fn write(&self, dir: &Path) -> Result<(), FolderError> {
        let path = dir.join(MANIFEST);
        let tmp = dir.join(format!("{MANIFEST}.{}.tmp", std::process::id()));
        let mut text = format!("{MANIFEST_HEADER}\n");
        for (name, stamps) in &self.entries {
            for s in stamps {
                text.push_str(&format!("{name}\t{}\t{}\n", s.size, s.modified_ns));
            }
        }
        let result = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(io_at(&path))
    }
}

/// An advisory lock on a file, held until dropped (or until the process ends).
#[derive(Debug)]
pub struct FolderLock {
    _file: File,
}

impl FolderLock {
    /// Takes the lock of `path` (created if missing) without waiting; a live holder is
    /// [`FolderError::Busy`] for `dir`, naming its process.
    pub fn take(path: &Path, dir: &Path) -> Result<FolderLock, FolderError> {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.is_file() {
                return Err(FolderError::Io {
                    path: path.to_path_buf(),
                    source: std::io::Error::other(
                        "fedsim's lock file is not a regular file here; move it out of the way",
                    ),
                });
            }
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_at(path))?;
        if !try_lock(&file).map_err(io_at(path))? {
            let mut holder = String::new();
            let _ = (&mut file).take(4096).read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "a process that has not yet said which".to_string(),
                h => h.to_string(),
            };
            return Err(FolderError::Busy {
                dir: dir.to_path_buf(),
                holder,
            });
        }
        let me = format!(
            "pid {}: {}",
            std::process::id(),
            std::env::args().collect::<Vec<_>>().join(" ")
        );
        let wrote = file
            .set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| file.write_all(me.as_bytes()));
        wrote.map_err(io_at(path))?;
        Ok(FolderLock { _file: file })
    }

    /// [`FolderLock::take`], trying again for up to `patience` while another holds it.
    pub fn wait(
        path: &Path,
        dir: &Path,
        patience: std::time::Duration,
    ) -> Result<FolderLock, FolderError> {
        let start = std::time::Instant::now();
        loop {
            match FolderLock::take(path, dir) {
                Err(FolderError::Busy { .. }) if start.elapsed() < patience => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                other => return other,
            }
        }
    }
}

/// `Ok(false)`: another open file holds the lock.
#[cfg(unix)]
fn try_lock(file: &File) -> std::io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: a valid open file descriptor; flock has no other preconditions.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(not(unix))]
fn try_lock(_: &File) -> std::io::Result<bool> {
    Ok(true)
}

/// A folder fedsim writes results into, locked for this process (see the module docs).
#[derive(Debug)]
pub struct OutputFolder {
    dir: PathBuf,
    manifest: Manifest,
    _lock: FolderLock,
    /// The claim made the folder, and nothing has been written into it yet: dropped so, it
    /// goes again (a run that failed leaves no empty folder behind).
    unused_new: bool,
}

impl Drop for OutputFolder {
    fn drop(&mut self) {
        if self.unused_new {
            // Only fedsim's lock is in it, unless someone put something there meanwhile (then
            // the folder stays: `remove_dir` removes only an empty one).
            let _ = std::fs::remove_file(self.dir.join(LOCK));
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

impl OutputFolder {
    /// Creates `dir` if missing and takes its lock; refuses it when an input is one of
    /// `names` there, or when a foreign entry has one of `names` (under `rules.force` those
    /// are moved aside, and each move is returned as a note).
    pub fn claim(
        dir: &Path,
        names: &[&str],
        rules: &OutputRules,
    ) -> Result<(OutputFolder, Vec<String>), FolderError> {
        OutputFolder::claim_within(dir, names, rules, std::time::Duration::ZERO)
    }

    /// [`OutputFolder::claim`], waiting up to `patience` for another writer's lock (for
    /// short writes that several processes make in turn).
    pub fn claim_within(
        dir: &Path,
        names: &[&str],
        rules: &OutputRules,
        patience: std::time::Duration,
    ) -> Result<(OutputFolder, Vec<String>), FolderError> {
        let new = std::fs::symlink_metadata(dir).is_err();
        std::fs::create_dir_all(dir).map_err(io_at(dir))?;
        let lock_path = dir.join(LOCK);
        let lock_was_there = std::fs::symlink_metadata(&lock_path).is_ok();
        let lock = FolderLock::wait(&lock_path, dir, patience)?;
        let folder = OutputFolder {
            dir: dir.to_path_buf(),
            manifest: Manifest::read(dir),
            _lock: lock,
            unused_new: new,
        };
        let claimed = folder
            .refuse_inputs(names, &rules.inputs)
            .and_then(|_| folder.make_way(names, rules.force));
        match claimed {
            Ok(notes) => Ok((folder, notes)),
            Err(e) => {
                // A refused folder keeps nothing of fedsim's that was not there before.
                if !lock_was_there {
                    let _ = std::fs::remove_file(&lock_path);
                }
                Err(e)
            }
        }
    }

    /// Refuses the folder when a foreign entry has one of `names`; with `force`, moves such
    /// entries aside instead and returns a note for each.
    pub fn make_way(&self, names: &[&str], force: bool) -> Result<Vec<String>, FolderError> {
        let foreign = self.foreign(names);
        if foreign.is_empty() {
            return Ok(Vec::new());
        }
        if !force {
            return Err(FolderError::Foreign {
                dir: self.dir.clone(),
                names: foreign,
            });
        }
        foreign.iter().map(|name| self.move_aside(name)).collect()
    }

    /// The files fedsim wrote here and nobody changed since.
    pub fn owned(&self) -> Vec<String> {
        self.manifest
            .names()
            .filter(|n| self.manifest.owns(&self.dir, n))
            .map(str::to_string)
            .collect()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entries of `names` in the folder that fedsim cannot prove it wrote.
    pub fn foreign(&self, names: &[&str]) -> Vec<String> {
        names
            .iter()
            .filter(|n| std::fs::symlink_metadata(self.dir.join(n)).is_ok())
            .filter(|n| !self.manifest.owns(&self.dir, n))
            .map(|n| n.to_string())
            .collect()
    }

    fn refuse_inputs(&self, names: &[&str], inputs: &[PathBuf]) -> Result<(), FolderError> {
        let Ok(dir) = self.dir.canonicalize() else {
            return Ok(());
        };
        for input in inputs {
            let Ok(real) = input.canonicalize() else {
                continue;
            };
            let name = real.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if real.parent() == Some(&dir) && names.contains(&name) {
                return Err(FolderError::InputIsOutput {
                    input: input.clone(),
                    output: self.dir.join(name),
                });
            }
        }
        Ok(())
    }

    /// Renames a foreign entry to `NAME.before-fedsim` (or `-2`, `-3`, …); says so.
    fn move_aside(&self, name: &str) -> Result<String, FolderError> {
        let from = self.dir.join(name);
        let to = aside_name(&self.dir, name);
        std::fs::rename(&from, &to).map_err(io_at(&from))?;
        Ok(format!(
            "{} was not written by fedsim: moved aside to {} (--force)",
            from.display(),
            to.display()
        ))
    }

    /// Makes a staging folder `prefix<pid>` inside, marked as fedsim's, after removing the
    /// marked staging folders `prefix<digits>` that killed runs left (the lock proves no live
    /// writer uses them). Unmarked folders are left alone. The folder goes when the returned
    /// [`Staging`] is dropped, whatever happened.
    pub fn staging(&self, prefix: &str) -> Result<Staging, FolderError> {
        clear_staging(&self.dir, prefix)?;
        clear_manifest_drafts(&self.dir);
        make_staging(&self.dir.join(format!("{prefix}{}", std::process::id())))
    }

    /// Writes `bytes` as the folder's file `name`: staged, then published in place of fedsim's
    /// earlier file of that name ([`OutputFolder::publish`]). `name` must have been among the
    /// names claimed (a foreign file of that name was refused or moved aside then).
    pub fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<PathBuf, FolderError> {
        let staging = self.staging(".partial-")?;
        let staged = staging.write(name, bytes)?;
        let mut published = self.publish(&[staged], &[name])?;
        Ok(published.remove(0))
    }

    /// Publishes `staged` (files of a [`Staging`] folder; moved in, in order) as the folder's
    /// results: first removes the owned files among `retire` (in order), so that a file
    /// last in `staged` (a summary) marks a complete set. The manifest covers every file
    /// fedsim may have placed at every moment, and keeps the owned files not retired.
    /// Returns the published paths.
    pub fn publish(
        &mut self,
        staged: &[PathBuf],
        retire: &[&str],
    ) -> Result<Vec<PathBuf>, FolderError> {
        let names: Vec<&str> = staged
            .iter()
            .map(|p| p.file_name().and_then(|n| n.to_str()).unwrap_or(""))
            .collect();
        let all: Vec<&str> = names.iter().chain(retire).copied().collect();
        let foreign = self.foreign(&all);
        if !foreign.is_empty() {
            return Err(FolderError::Foreign {
                dir: self.dir.clone(),
                names: foreign,
            });
        }
        // Before anything moves: the owned files and the staged ones (a rename keeps a file's
        // size and modification time).
        self.manifest.prune(&self.dir);
        let mut next = self.manifest.clone();
        for (file, name) in staged.iter().zip(&names) {
            let stamp = Stamp::of(file).ok_or_else(|| FolderError::Io {
                path: file.clone(),
                source: std::io::Error::other("a staged result file went missing"),
            })?;
            // The earlier file of that name stays fedsim's until the new one is in place.
            next.entries
                .entry(name.to_string())
                .or_default()
                .push(stamp);
        }
        next.write(&self.dir)?;
        for name in retire {
            if self.manifest.owns(&self.dir, name) {
                let path = self.dir.join(name);
                std::fs::remove_file(&path).map_err(io_at(&path))?;
            }
        }
        let mut published = Vec::with_capacity(staged.len());
        for (file, name) in staged.iter().zip(&names) {
            let to = self.dir.join(name);
            std::fs::rename(file, &to).map_err(io_at(&to))?;
            published.push(to);
        }
        // Owned files that stay (not retired), and the published ones.
        let mut done = self.manifest.clone();
        done.entries.retain(|n, _| !retire.contains(&n.as_str()));
        for name in &names {
            done.add(&self.dir, name)?;
        }
        done.write(&self.dir)?;
        self.manifest = done;
        self.unused_new = false;
        Ok(published)
    }

    /// Adds files written in place (atomically, by the caller) to the manifest.
    pub fn adopt(&mut self, names: &[&str]) -> Result<(), FolderError> {
        self.unused_new = false;
        self.manifest.prune(&self.dir);
        for name in names {
            self.manifest.add(&self.dir, name)?;
        }
        self.manifest.write(&self.dir)
    }
}

/// Where an entry `name` of `dir` goes when moved aside: `dir/NAME.before-fedsim`, or with
/// `-2`, `-3`, … where that is taken.
pub fn aside_name(dir: &Path, name: &str) -> PathBuf {
    let mut path = dir.join(format!("{name}{ASIDE_SUFFIX}"));
    let mut k = 2;
    while std::fs::symlink_metadata(&path).is_ok() {
        path = dir.join(format!("{name}{ASIDE_SUFFIX}-{k}"));
        k += 1;
    }
    path
}

/// Whether `name` is `prefix` followed by a process id.
fn is_staging_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes the staging folders `prefix<pid>` in `dir` that carry fedsim's marker, and their
/// drafts (`STAGING_DRAFT` + `prefix<pid>`, marked or not: a run killed while making one
/// leaves it). The caller holds the lock that their writers held.
pub fn clear_staging(dir: &Path, prefix: &str) -> Result<(), FolderError> {
    let entries = std::fs::read_dir(dir).map_err(io_at(dir))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let marked = is_staging_name(&name, prefix) && path.join(STAGING_MARKER).is_file();
        let draft = (name.strip_prefix(STAGING_DRAFT)).is_some_and(|n| is_staging_name(n, prefix));
        if (marked || draft) && entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path).map_err(io_at(&path))?;
        }
    }
    Ok(())
}

/// Removes the manifests a writer killed mid-write left in `dir` (`MANIFEST.<pid>.tmp`, never
/// renamed into place). The caller holds the folder's lock, so no writer of one is alive.
fn clear_manifest_drafts(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = (name.strip_prefix(MANIFEST))
            .and_then(|rest| rest.strip_prefix('.'))
            .and_then(|rest| rest.strip_suffix(".tmp"));
        let is_draft = pid.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if is_draft && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A staging folder of fedsim's (marked with [`STAGING_MARKER`]): results are written into it
/// and published from it. Dropping it removes it with whatever is left in it, so a run that
/// fails for any reason leaves nothing half-written.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
}

impl Staging {
    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `name` inside.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Creates the folder `name` inside (for what other programs write there: a download).
    pub fn make_dir(&self, name: &str) -> Result<PathBuf, FolderError> {
        let path = self.path(name);
        std::fs::create_dir_all(&path).map_err(io_at(&path))?;
        Ok(path)
    }

    /// Creates the file `name` inside, for a writer that streams into it.
    pub fn create(&self, name: &str) -> Result<DiskFile, FolderError> {
        let path = self.path(name);
        DiskFile::create(&path).map_err(io_at(&path))
    }

    /// Writes the file `name` inside whole, synced; returns its path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, FolderError> {
        let path = self.path(name);
        let written = DiskFile::create(&path).and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
        written.map_err(io_at(&path))?;
        Ok(path)
    }

    /// Leaves the folder where it stands, marked, as a process killed while writing it would:
    /// for an interrupted sweep cell, whose next run resumes from the checkpoint in it, and for
    /// tests of what the next writer does with such folders.
    pub fn left_behind(self) -> PathBuf {
        let dir = self.dir.clone();
        std::mem::forget(self);
        dir
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Only a folder that still holds the marker is fedsim's to remove (a published cell
        // folder has had it taken out, and no longer stands here anyway).
        if self.dir.join(STAGING_MARKER).is_file() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Creates the staging folder `path` with fedsim's marker in it: made as its draft
/// (`STAGING_DRAFT` + its name), marked, then renamed, so that at no moment does an unmarked
/// folder of fedsim's stand under `path`'s name. An existing folder `path` is marked in place.
pub fn make_staging(path: &Path) -> Result<Staging, FolderError> {
    if !path.is_dir() {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let draft = path.with_file_name(format!("{STAGING_DRAFT}{name}"));
        std::fs::create_dir_all(&draft).map_err(io_at(&draft))?;
        let marker = draft.join(STAGING_MARKER);
        File::create(&marker).map_err(io_at(&marker))?;
        std::fs::rename(&draft, path).map_err(io_at(path))?;
    }
    let marker = path.join(STAGING_MARKER);
    File::create(&marker).map_err(io_at(&marker))?;
    Ok(Staging {
        dir: path.to_path_buf(),
    })
}

/// Publishes a staging folder that holds a whole result folder (a sweep cell's run) as
/// `out/name`: an earlier folder of that name is removed where fedsim wrote all of it
/// ([`remove_owned_folder`]), or else moved aside with all it holds to `name.before-fedsim`
/// (the returned note says so), the staging folder is renamed into place, and its marker is
/// taken out.
pub fn publish_folder(
    out: &Path,
    staging: Staging,
    name: &str,
) -> Result<Option<String>, FolderError> {
    let done = out.join(name);
    let mut moved_aside = None;
    if std::fs::symlink_metadata(&done).is_ok() {
        match remove_owned_folder(&done) {
            Ok(()) => {}
            // What fedsim cannot prove it wrote (a result file changed since, say) stays,
            // with the rest of the folder, under another name.
            Err(FolderError::NotOnlyOurs { names, .. }) => {
                let aside = aside_name(out, name);
                std::fs::rename(&done, &aside).map_err(io_at(&done))?;
                moved_aside = Some(format!(
                    "its earlier folder held what fedsim cannot prove it wrote ({}): moved \
                     aside to {}",
                    names.join(", "),
                    aside.display()
                ));
            }
            Err(e) => return Err(e),
        }
    }
    // Renamed while still marked: killed before the rename, it is a marked staging folder
    // that the next run removes; killed after it, a whole folder whose marker is left over,
    // which nothing takes for staging (`remove_owned_folder` removes it with the folder). Taking
    // the marker out first left an unmarked staging folder behind when killed in between.
    // A failed rename leaves it marked, so that the drop removes it.
    std::fs::rename(&staging.dir, &done).map_err(io_at(&done))?;
    let marker = done.join(STAGING_MARKER);
    std::fs::remove_file(&marker).map_err(io_at(&marker))?;
    Ok(moved_aside)
}

/// Takes the lock `name` among the locks of the folder `out` (`out/.fedsim-locks/name`, the
/// folder made if missing) without waiting; a live holder is [`FolderError::Busy`] for
/// `shown` (the folder the lock stands for).
pub fn take_named_lock(out: &Path, name: &str, shown: &Path) -> Result<FolderLock, FolderError> {
    let locks = out.join(LOCKS);
    std::fs::create_dir_all(&locks).map_err(io_at(&locks))?;
    FolderLock::take(&locks.join(name), shown)
}

/// Removes a folder of fedsim's results (a finished run or sweep cell): the files its
/// manifest owns, its marked staging folders, its manifest, lock and marker, then the folder.
/// Anything else in it is left in place and named, and the folder stays.
pub fn remove_owned_folder(dir: &Path) -> Result<(), FolderError> {
    let lock = FolderLock::take(&dir.join(LOCK), dir)?;
    let manifest = Manifest::read(dir);
    for name in manifest.names() {
        if manifest.owns(dir, name) {
            let path = dir.join(name);
            std::fs::remove_file(&path).map_err(io_at(&path))?;
        }
    }
    clear_staging(dir, ".partial-")?;
    let mut left = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_at(dir))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if ![MANIFEST, LOCK, STAGING_MARKER].contains(&name.as_str()) {
            left.push(name);
        }
    }
    if !left.is_empty() {
        left.sort();
        return Err(FolderError::NotOnlyOurs {
            dir: dir.to_path_buf(),
            names: left,
        });
    }
    for name in [MANIFEST, STAGING_MARKER, LOCK] {
        let path = dir.join(name);
        if path.exists() {
            std::fs::remove_file(&path).map_err(io_at(&path))?;
        }
    }
    drop(lock);
    std::fs::remove_dir(dir).map_err(io_at(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kill between the manifest that lists a replacing file and its move into place
    /// leaves the earlier file there, still fedsim's; once it is in place only the new one is.
    #[test]
    fn a_file_being_replaced_stays_fedsims_until_the_new_one_is_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let (folder, _) = OutputFolder::claim(dir.path(), &["a"], &OutputRules::default()).unwrap();
        let mut folder = folder;
        let staging = folder.staging(".partial-").unwrap();
        let first = staging.write("a", b"first").unwrap();
        folder.publish(&[first], &[]).unwrap();
        // What `publish` writes before it moves the second file in.
        let second = staging.write("a", b"second, longer").unwrap();
        let mut during = folder.manifest.clone();
        during.prune(dir.path());
        let stamp = Stamp::of(&second).unwrap();
        during.entries.get_mut("a").unwrap().push(stamp);
        during.write(dir.path()).unwrap();
        let read = Manifest::read(dir.path());
        assert_eq!(read, during, "two stamps of one name read back");
        assert!(
            read.owns(dir.path(), "a"),
            "the earlier file is still fedsim's"
        );
        std::fs::rename(&second, dir.path().join("a")).unwrap();
        assert!(read.owns(dir.path(), "a"), "and so is the new one");
        let mut after = read.clone();
        after.prune(dir.path());
        assert_eq!(after.entries["a"], [stamp]);
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn stage(folder: &OutputFolder, files: &[(&str, &str)]) -> Vec<PathBuf> {
        let staging = folder.staging(".partial-").unwrap();
        let staged = files
            .iter()
            .map(|(n, text)| staging.write(n, text.as_bytes()).unwrap())
            .collect();
        // Published files leave the folder; the test removes it with what is left.
        staging.left_behind();
        staged
    }

    #[test]
    fn fedsim_replaces_only_what_its_manifest_proves_it_wrote() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let rules = OutputRules::default();
        let results = ["a.csv", "b.csv", "summary.csv"];
        let (mut folder, notes) = OutputFolder::claim(&dir, &results, &rules).unwrap();
        assert!(notes.is_empty());
        let staged = stage(&folder, &[("a.csv", "1"), ("summary.csv", "s")]);
        folder.publish(&staged, &results).unwrap();
        std::fs::remove_dir_all(dir.join(format!(".partial-{}", std::process::id()))).unwrap();
        drop(folder);
        // A second run replaces them: they are fedsim's.
        let (mut folder, _) = OutputFolder::claim(&dir, &results, &rules).unwrap();
        let staged = stage(&folder, &[("b.csv", "2"), ("summary.csv", "t")]);
        let published = folder.publish(&staged, &results).unwrap();
        assert_eq!(published, [dir.join("b.csv"), dir.join("summary.csv")]);
        assert!(
            !dir.join("a.csv").exists(),
            "an owned file of the earlier run"
        );
        drop(folder);
        // A file the user changed is no longer fedsim's: refused, then moved aside.
        std::fs::write(dir.join("b.csv"), "the user's own").unwrap();
        let e = OutputFolder::claim(&dir, &results, &rules).unwrap_err();
        assert!(
            e.to_string()
                .contains("would replace: b.csv; choose another"),
            "{e}"
        );
        let force = OutputRules {
            force: true,
            ..Default::default()
        };
        let (_, notes) = OutputFolder::claim(&dir, &results, &force).unwrap();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(
            std::fs::read_to_string(dir.join("b.csv.before-fedsim")).unwrap(),
            "the user's own"
        );
    }

    #[test]
    fn a_second_writer_is_refused_with_the_holder_and_a_dropped_lock_is_taken_over() {
        let tmp = tempfile::tempdir().unwrap();
        let rules = OutputRules::default();
        let (first, _) = OutputFolder::claim(tmp.path(), &["x"], &rules).unwrap();
        let e = OutputFolder::claim(tmp.path(), &["x"], &rules).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, FolderError::Busy { .. }), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(first);
        assert!(OutputFolder::claim(tmp.path(), &["x"], &rules).is_ok());
    }

    #[test]
    fn only_marked_staging_folders_of_the_prefix_are_cleared() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        make_staging(&dir.join(".partial-123"))
            .unwrap()
            .left_behind();
        std::fs::create_dir(dir.join(".partial-456")).unwrap(); // a user's, unmarked
        make_staging(&dir.join(".partial-mine"))
            .unwrap()
            .left_behind(); // not a process id
        clear_staging(dir, ".partial-").unwrap();
        assert_eq!(names(dir), [".partial-456", ".partial-mine"]);
    }

    /// A run killed while making its staging folder leaves only a draft, marked or not; the
    /// next writer clears the drafts of its prefix, and another prefix's stay.
    #[test]
    fn a_staging_folder_is_never_unmarked_under_its_own_name() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let made = make_staging(&dir.join(".partial-7")).unwrap().left_behind();
        assert!(made.join(STAGING_MARKER).is_file());
        assert_eq!(names(dir), [".partial-7"], "no draft is left behind");
        std::fs::create_dir(dir.join(format!("{STAGING_DRAFT}.partial-8"))).unwrap();
        make_staging(&dir.join(format!("{STAGING_DRAFT}.partial-9")))
            .unwrap()
            .left_behind();
        std::fs::create_dir(dir.join(format!("{STAGING_DRAFT}.partial-cell=1-5"))).unwrap();
        clear_staging(dir, ".partial-").unwrap();
        assert_eq!(names(dir), [format!("{STAGING_DRAFT}.partial-cell=1-5")]);
    }

    /// A manifest a killed writer never renamed into place (another process's) goes when the
    /// next writer stages; a user's `.tmp` file stays.
    #[test]
    fn staging_clears_a_killed_writers_manifest_draft() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(dir.join(format!("{MANIFEST}.321.tmp")), "half").unwrap();
        std::fs::write(dir.join("notes.tmp"), "a user's").unwrap();
        let (folder, _) = OutputFolder::claim(dir, &["x"], &OutputRules::default()).unwrap();
        let staging = folder.staging(".partial-").unwrap();
        assert!(!dir.join(format!("{MANIFEST}.321.tmp")).exists());
        assert!(dir.join("notes.tmp").is_file());
        assert!(staging.path(STAGING_MARKER).is_file());
    }

    #[test]
    fn an_input_that_is_a_result_path_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let scenario = tmp.path().join("scenario.yaml");
        std::fs::write(&scenario, "rounds: 1\n").unwrap();
        let rules = OutputRules {
            force: true,
            inputs: vec![scenario.clone()],
        };
        let e = OutputFolder::claim(tmp.path(), &["scenario.yaml"], &rules).unwrap_err();
        assert!(matches!(e, FolderError::InputIsOutput { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&scenario).unwrap(), "rounds: 1\n");
    }

    #[test]
    fn an_owned_folder_is_removed_but_never_what_else_it_holds() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cell");
        let rules = OutputRules::default();
        let (mut folder, _) = OutputFolder::claim(&dir, &["r.csv"], &rules).unwrap();
        let staged = stage(&folder, &[("r.csv", "1")]);
        folder.publish(&staged, &["r.csv"]).unwrap();
        drop(folder);
        std::fs::write(dir.join("notes.txt"), "mine").unwrap();
        let e = remove_owned_folder(&dir).unwrap_err();
        assert!(e.to_string().contains("(notes.txt)"), "{e}");
        assert_eq!(
            names(&dir),
            [".fedsim-lock", ".fedsim-manifest", "notes.txt"]
        );
        std::fs::remove_file(dir.join("notes.txt")).unwrap();
        remove_owned_folder(&dir).unwrap();
        assert!(!dir.exists());
    }
}
