//! A run's checkpoint file, `checkpoint.fedsim` in its output folder: the state of the run at
//! its latest checkpoint ([`crate::actors::RunState`]), the records it had made by then, and
//! what it was a run of. A run that finds one from the same resolved scenario and the same
//! fedsim resumes from it and ends with the files an uninterrupted run writes, byte for byte.
//!
//! The file is `MAGIC`, then a header and the run's state (each in the checkpoints' binary
//! form, after its length), the records (their count and length, then each), what the clients
//! keep (as [`crate::actors::WriteClients`] writes it, client by client), and the SHA-256 of
//! everything before it: a truncated or damaged file is refused, never half read. It is
//! written as a stream (never whole in memory: a FEMNIST run's clients keep gigabytes) into
//! the run's staging folder, synced and moved into place (the manifest lists it), so a kill
//! leaves the last complete one; a finished run removes it. The records wait for it in an
//! unnamed temporary file, not in memory.
//!
//! This room must not decide when a checkpoint is due beyond [`CheckpointEvery`], nor read
//! one that does not match the run in every field the resumed run reads.

use crate::actors::{Resumed, RunState, WriteClients};
use crate::records::Record;
use crate::settings::CheckpointEvery;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The checkpoint's file name in a run's output folder.
pub const CHECKPOINT_FILE: &str = "checkpoint.fedsim";

const MAGIC: &[u8] = b"fedsim checkpoint\n";

/// The layout of the file; a reader refuses any other (2: the events waiting and jobs in
/// flight of every kind of run, and momentum buffers kept on the device).
const FORMAT: u32 = 2;

/// What a run does with checkpoints: how often it saves one (`--checkpoint-every`; `None`:
/// as the scenario's `checkpoint:` says, by default every minute), and whether it discards
/// the one it finds (`--restart`) instead of resuming from it.
#[derive(Clone, Debug, Default)]
pub struct CheckpointOptions {
    pub every: Option<CheckpointEvery>,
    pub restart: bool,
}

impl CheckpointOptions {
    /// None read and none written: a re-run into a folder that goes when it ends.
    pub fn none() -> Self {
        CheckpointOptions {
            every: Some(CheckpointEvery::Off),
            restart: true,
        }
    }
}

/// When the next checkpoint is due: the last one's round, when it was written and how long
/// that took.
pub struct Cadence {
    every: CheckpointEvery,
    round: u32,
    at: Instant,
    took: Duration,
}

impl Cadence {
    /// A run's cadence from round `round` (1, or the round it resumes at).
    pub fn new(every: CheckpointEvery, round: u32) -> Self {
        Cadence {
            every,
            round,
            at: Instant::now(),
            took: Duration::ZERO,
        }
    }

    /// Whether one is due before round `round` starts.
    pub fn due(&self, round: u32) -> bool {
        match self.every {
            CheckpointEvery::Off => false,
            CheckpointEvery::Rounds(n) => round >= self.round.saturating_add(n),
            CheckpointEvery::Wall(after) => {
                round > self.round && self.at.elapsed() >= after.max(9 * self.took)
            }
        }
    }

    /// One was saved before round `round`, and writing it took `took`.
    pub fn saved(&mut self, round: u32, took: Duration) {
        (self.round, self.at, self.took) = (round, Instant::now(), took);
    }
}

/// The records a run has made, in the checkpoints' binary form, in order, in an unnamed
/// temporary file (made with the first record).
#[derive(Default)]
pub struct RecordLog {
    file: Option<BufWriter<std::fs::File>>,
    count: u64,
    len: u64,
    /// The first write that failed: every later checkpoint fails with it (a log that lost a
    /// record must never make one).
    failed: Option<std::io::Error>,
}

impl RecordLog {
    pub fn push(&mut self, r: &Record) {
        if self.failed.is_none() {
            if let Err(e) = self.append(r) {
                self.failed = Some(e);
            }
        }
    }

    fn append(&mut self, r: &Record) -> std::io::Result<()> {
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(BufWriter::new(crate::io::unnamed_file()?)),
        };
        let config = bincode::config::standard();
        let written = bincode::serde::encode_into_std_write(r, file, config)
            .map_err(std::io::Error::other)?;
        self.count += 1;
        self.len += written as u64;
        Ok(())
    }

    /// Writes the count, the length and every record into `w`.
    fn copy_into(&mut self, w: &mut dyn Write) -> std::io::Result<()> {
        if let Some(e) = &self.failed {
            let why = format!("keeping the run's records in a temporary file (TMPDIR): {e}");
            return Err(std::io::Error::new(e.kind(), why));
        }
        w.write_all(&self.count.to_le_bytes())?;
        w.write_all(&self.len.to_le_bytes())?;
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        file.flush()?;
        let file = file.get_mut();
        file.seek(SeekFrom::Start(0))?;
        let copied = std::io::copy(&mut (&mut *file).take(self.len), w)?;
        file.seek(SeekFrom::End(0))?;
        if copied != self.len {
            return Err(std::io::Error::other(
                "the records' file is shorter than written",
            ));
        }
        Ok(())
    }
}

/// What a checkpoint says it is of.
#[derive(Serialize, Deserialize)]
struct Header {
    format: u32,
    fedsim: String,
    content_hash: String,
    resolved_yaml: String,
}

/// A checkpoint as read back: the records made before it, and the state to resume from (with
/// a reader at what the clients keep).
pub struct Saved {
    pub records: Vec<Record>,
    pub resumed: Resumed,
}

/// A checkpoint that cannot be resumed from.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(
        "{}: not a checkpoint fedsim can read ({why}): it is truncated, damaged or not \
         fedsim's; pass --restart to run from the start (the file is replaced by the run's \
         own)",
        path.display()
    )]
    Unreadable { path: PathBuf, why: String },
    #[error(
        "{}: a checkpoint of fedsim {found} (format {format}); this is fedsim {this} (format \
         {FORMAT}), whose run may differ; pass --restart to run from the start",
        path.display(),
        this = env!("CARGO_PKG_VERSION")
    )]
    Version {
        path: PathBuf,
        found: String,
        format: u32,
    },
    #[error(
        "{}: a checkpoint of another scenario ({}); run the scenario it was made from, or \
         pass --restart to discard it and run this one from the start",
        path.display(),
        differences.join("; ")
    )]
    Scenario {
        path: PathBuf,
        differences: Vec<String>,
    },
    #[error("reading {}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A writer that sums what goes through it.
struct Summed<'a> {
    inner: &'a mut dyn Write,
    sum: Sha256,
}

impl Write for Summed<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(bytes)?;
        self.sum.update(&bytes[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a checkpoint into `w`: of the run of `resolved_yaml` (whose SHA-256 is
/// `content_hash`), at `state`, with the records of `log` and what `clients` writes.
pub fn write_checkpoint(
    w: &mut dyn Write,
    (content_hash, resolved_yaml): (&str, &str),
    state: &RunState,
    log: &mut RecordLog,
    clients: WriteClients<'_>,
) -> std::io::Result<()> {
    let header = Header {
        format: FORMAT,
        fedsim: env!("CARGO_PKG_VERSION").to_string(),
        content_hash: content_hash.to_string(),
        resolved_yaml: resolved_yaml.to_string(),
    };
    let mut w = Summed {
        inner: w,
        sum: Sha256::new(),
    };
    w.write_all(MAGIC)?;
    let config = bincode::config::standard();
    let header = bincode::serde::encode_to_vec(&header, config).map_err(std::io::Error::other)?;
    let state = bincode::serde::encode_to_vec(state, config).map_err(std::io::Error::other)?;
    for part in [header, state] {
        w.write_all(&(part.len() as u64).to_le_bytes())?;
        w.write_all(&part)?;
    }
    log.copy_into(&mut w)?;
    clients(&mut w).map_err(std::io::Error::other)?;
    let sum = w.sum.finalize();
    w.inner.write_all(&sum)
}

/// Reads the checkpoint at `path` for a run of `resolved_yaml` (SHA-256 `content_hash`),
/// refusing one that is damaged, of another fedsim or of another scenario: the whole file is
/// checked against its checksum first, then read up to the clients' part.
pub fn read_checkpoint(
    path: &Path,
    content_hash: &str,
    resolved_yaml: &str,
) -> Result<Saved, CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    let unreadable = |why: &str| CheckpointError::Unreadable {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    let limit = crate::io::SizeLimit {
        bytes: u64::MAX,
        what: "a checkpoint",
    };
    let mut file = crate::io::open_regular(path, limit).map_err(io)?;
    let total = file.seek(SeekFrom::End(0)).map_err(io)?;
    let body = total
        .checked_sub(32)
        .ok_or_else(|| unreadable("it ends before its checksum"))?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut summed = Sha256::new();
    std::io::copy(&mut (&mut file).take(body), &mut summed).map_err(io)?;
    let mut sum = [0u8; 32];
    file.read_exact(&mut sum).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut reader = BufReader::new(file);
    let mut magic = vec![0u8; MAGIC.len()];
    let starts = (body >= MAGIC.len() as u64) && reader.read_exact(&mut magic).is_ok();
    if !starts || magic != MAGIC {
        return Err(unreadable("it does not begin as one"));
    }
    if summed.finalize().as_slice() != sum {
        return Err(unreadable("its checksum does not match its contents"));
    }
    let header: Header = part(&mut reader).map_err(|why| unreadable(&why))?;
    if header.format != FORMAT || header.fedsim != env!("CARGO_PKG_VERSION") {
        return Err(CheckpointError::Version {
            path: path.to_path_buf(),
            found: header.fedsim,
            format: header.format,
        });
    }
    if header.content_hash != content_hash {
        return Err(CheckpointError::Scenario {
            path: path.to_path_buf(),
            differences: differences(&header.resolved_yaml, resolved_yaml),
        });
    }
    let state: RunState = part(&mut reader).map_err(|why| unreadable(&why))?;
    let count = u64_of(&mut reader).map_err(|why| unreadable(&why))?;
    let len = u64_of(&mut reader).map_err(|why| unreadable(&why))?;
    let config = bincode::config::standard();
    let mut records_part = (&mut reader).take(len);
    let mut records = Vec::new();
    for _ in 0..count {
        let r: Record = bincode::serde::decode_from_std_read(&mut records_part, config)
            .map_err(|e| unreadable(&format!("record {}: {e}", records.len() + 1)))?;
        records.push(r);
    }
    if records_part.limit() != 0 {
        return Err(unreadable("its records do not end where they say"));
    }
    let at = reader.stream_position().map_err(io)?;
    let clients = Box::new(reader.take(body.saturating_sub(at)));
    Ok(Saved {
        records,
        resumed: Resumed { state, clients },
    })
}

fn u64_of(r: &mut impl Read) -> Result<u64, String> {
    let mut n = [0u8; 8];
    r.read_exact(&mut n)
        .map_err(|_| "it ends early".to_string())?;
    Ok(u64::from_le_bytes(n))
}

/// A part of the file: its length, then its value.
fn part<T: serde::de::DeserializeOwned>(r: &mut impl Read) -> Result<T, String> {
    let len = u64_of(r)?;
    let mut bytes = Vec::new();
    r.take(len)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 != len {
        return Err("it ends early".into());
    }
    let config = bincode::config::standard();
    match bincode::serde::decode_from_slice(&bytes, config) {
        Ok((value, read)) if read == bytes.len() => Ok(value),
        Ok(_) => Err("a part holds more than it says".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The lines of the checkpoint's resolved scenario (`was`) and this run's (`now`) that differ,
/// the first few.
fn differences(was: &str, now: &str) -> Vec<String> {
    const SHOWN: usize = 6;
    let was_lines: Vec<&str> = was.lines().collect();
    let now_lines: Vec<&str> = now.lines().collect();
    let only = |a: &[&str], b: &[&str], sign: &str| -> Vec<String> {
        (a.iter())
            .filter(|l| !b.contains(l))
            .map(|l| format!("{sign} `{}`", l.trim()))
            .collect()
    };
    let mut out = only(&was_lines, &now_lines, "the checkpoint's run has");
    out.extend(only(&now_lines, &was_lines, "this one has"));
    if out.len() > SHOWN {
        let more = out.len() - SHOWN;
        out.truncate(SHOWN);
        out.push(format!("{more} more lines differ"));
    }
    if out.is_empty() {
        out.push("the same lines in another order".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RoundRecord;
    use crate::sim::SimTime;

    fn state() -> RunState {
        RunState {
            now: SimTime(1234),
            events: 56,
            round: 7,
            waiting: Vec::new(),
            server: vec![1, 2, 3],
        }
    }

    fn records() -> Vec<Record> {
        let mut out: Vec<Record> = (1..=6)
            .map(|round| {
                Record::Round(RoundRecord {
                    round,
                    ..Default::default()
                })
            })
            .collect();
        out.push(Record::FinalModels(vec![vec![
            f32::from_bits(0x7fc0_0001),
            -0.0,
        ]]));
        out
    }

    const YAML: &str = "name: a\nrounds: 10\nseed: 1\n";
    /// What the clients' part holds in these tests.
    const CLIENTS: &[u8] = b"the clients' part";

    fn written(dir: &Path) -> PathBuf {
        let path = dir.join(CHECKPOINT_FILE);
        let mut log = RecordLog::default();
        for r in records() {
            log.push(&r);
        }
        let mut bytes = Vec::new();
        let mut clients = |w: &mut dyn Write| {
            w.write_all(CLIENTS)
                .map_err(|e| crate::sim::SimError::Checkpoint(Box::new(e)))
        };
        write_checkpoint(&mut bytes, ("hash", YAML), &state(), &mut log, &mut clients).unwrap();
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_checkpoint_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = written(dir.path());
        let saved = read_checkpoint(&path, "hash", YAML).unwrap();
        let mut resumed = saved.resumed;
        assert_eq!(resumed.state, state());
        assert_eq!(saved.records[..6], records()[..6]);
        let Record::FinalModels(m) = &saved.records[6] else {
            panic!("the last record is the models")
        };
        assert_eq!(m[0][0].to_bits(), 0x7fc0_0001);
        assert_eq!(m[0][1].to_bits(), (-0.0f32).to_bits());
        let mut clients = Vec::new();
        resumed.clients.read_to_end(&mut clients).unwrap();
        assert_eq!(clients, CLIENTS, "the reader stops before the checksum");
    }

    #[test]
    fn truncated_damaged_and_foreign_checkpoints_are_refused_with_the_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = written(dir.path());
        let whole = std::fs::read(&path).unwrap();
        let read = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            let e = read_checkpoint(&path, "hash", YAML);
            e.err().expect("refused").to_string()
        };
        let truncated = read(&whole[..whole.len() - 10]);
        assert!(truncated.contains("checksum does not match"), "{truncated}");
        assert!(truncated.contains("--restart"), "{truncated}");
        let mut flipped = whole.clone();
        flipped[40] ^= 1;
        assert!(read(&flipped).contains("checksum does not match"));
        let mut in_the_clients = whole.clone();
        let at = whole.len() - 33;
        in_the_clients[at] ^= 1;
        assert!(read(&in_the_clients).contains("checksum does not match"));
        let foreign = read(b"PAR1 not a checkpoint, and long enough to hold a checksum");
        assert!(foreign.contains("does not begin as one"), "{foreign}");
        assert!(read(&whole[..20]).contains("ends before its checksum"));
        std::fs::write(&path, &whole).unwrap();
        let other = "name: a\nrounds: 12\nseed: 1\n";
        let e = read_checkpoint(&path, "other", other);
        let e = e.err().unwrap().to_string();
        assert!(
            e.contains("another scenario")
                && e.contains("the checkpoint's run has `rounds: 10`")
                && e.contains("this one has `rounds: 12`")
                && e.contains("--restart"),
            "{e}"
        );
    }

    #[test]
    fn a_checkpoint_of_another_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CHECKPOINT_FILE);
        let header = Header {
            format: FORMAT,
            fedsim: "0.0.1".into(),
            content_hash: "hash".into(),
            resolved_yaml: YAML.into(),
        };
        let mut bytes = MAGIC.to_vec();
        let part = bincode::serde::encode_to_vec(&header, bincode::config::standard()).unwrap();
        bytes.extend((part.len() as u64).to_le_bytes());
        bytes.extend(part);
        let sum = Sha256::digest(&bytes);
        bytes.extend(sum);
        std::fs::write(&path, bytes).unwrap();
        let e = read_checkpoint(&path, "hash", YAML);
        let e = e.err().unwrap().to_string();
        assert!(e.contains("fedsim 0.0.1") && e.contains("--restart"), "{e}");
    }

    #[test]
    fn the_cadence_counts_rounds_and_wall_time() {
        let mut every3 = Cadence::new(CheckpointEvery::Rounds(3), 1);
        assert!(!every3.due(3) && every3.due(4));
        every3.saved(4, Duration::from_secs(3600));
        assert!(
            !every3.due(6) && every3.due(7),
            "rounds are rounds, however long"
        );
        assert!(!Cadence::new(CheckpointEvery::Off, 1).due(100));
        let mut wall = Cadence::new(CheckpointEvery::Wall(Duration::ZERO), 5);
        assert!(!wall.due(5) && wall.due(6));
        // A checkpoint that took an hour to write: the next waits nine hours.
        wall.saved(6, Duration::from_secs(3600));
        assert!(!wall.due(7));
        wall.saved(7, Duration::ZERO);
        assert!(wall.due(8));
    }
}
