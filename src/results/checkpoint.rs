//! A run's checkpoint file, `checkpoint.fedsim` in its output folder: the state of the run at
//! its latest checkpoint ([`crate::actors::RunState`]), the records it had made by then, and
//! what it was a run of. A run that finds one from the same resolved scenario and the same
//! fedsim resumes from it and ends with the files an uninterrupted run writes, byte for byte.
//!
//! The file is `MAGIC`, then a header, the run's state and its records (each in the
//! checkpoints' binary form, after its length), then the SHA-256 of everything before it: a
//! truncated or damaged file is refused, never half read. It is written whole into the run's
//! staging folder and moved into place (the manifest lists it), so a kill leaves the last
//! complete one; a finished run removes it.
//!
//! This room must not decide when a checkpoint is due beyond [`CheckpointEvery`], nor read
//! one that does not match the run in every field the resumed run reads.

use crate::actors::RunState;
use crate::records::Record;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The checkpoint's file name in a run's output folder.
pub const CHECKPOINT_FILE: &str = "checkpoint.fedsim";

const MAGIC: &[u8] = b"fedsim checkpoint\n";

/// The layout of the file; a reader refuses any other.
const FORMAT: u32 = 1;

/// How often a run saves a checkpoint (`--checkpoint-every`): at the first point at rest (a
/// synchronous round's start with nothing else left to happen) after this many rounds, or this
/// much wall-clock time, since the last one. By default every minute: a run shorter than a
/// minute writes none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CheckpointEvery {
    Off,
    Rounds(u32),
    Wall(Duration),
}

impl Default for CheckpointEvery {
    fn default() -> Self {
        CheckpointEvery::Wall(Duration::from_secs(60))
    }
}

impl std::str::FromStr for CheckpointEvery {
    type Err = String;

    /// `off`, a number of rounds (`10`), or a wall-clock time (`90s`, `5m`, `1h`).
    fn from_str(text: &str) -> Result<Self, String> {
        let wrong = || {
            format!(
                "`{text}`: give `off`, a number of rounds (e.g. `10`), or a wall-clock time in \
                 seconds, minutes or hours (e.g. `90s`, `5m`, `1h`), more than 0"
            )
        };
        let text = text.trim();
        if text == "off" {
            return Ok(CheckpointEvery::Off);
        }
        if let Ok(rounds) = text.parse::<u32>() {
            return (rounds > 0)
                .then_some(CheckpointEvery::Rounds(rounds))
                .ok_or_else(wrong);
        }
        let split = text.len().saturating_sub(1);
        let (number, unit) = text.split_at(split);
        let seconds = match unit {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(wrong()),
        };
        match number.parse::<f64>() {
            Ok(n) if n > 0.0 && (n * seconds).is_finite() => {
                Ok(CheckpointEvery::Wall(Duration::from_secs_f64(n * seconds)))
            }
            _ => Err(wrong()),
        }
    }
}

/// What a run does with checkpoints: how often it saves one, and whether it discards the one
/// it finds (`--restart`) instead of resuming from it.
#[derive(Clone, Debug, Default)]
pub struct CheckpointOptions {
    pub every: CheckpointEvery,
    pub restart: bool,
}

/// When the next checkpoint is due: the last one's round and wall-clock time.
pub struct Cadence {
    every: CheckpointEvery,
    round: u32,
    at: Instant,
}

impl Cadence {
    /// A run's cadence from round `round` (1, or the round it resumes at).
    pub fn new(every: CheckpointEvery, round: u32) -> Self {
        Cadence {
            every,
            round,
            at: Instant::now(),
        }
    }

    /// Whether one is due before round `round` starts.
    pub fn due(&self, round: u32) -> bool {
        match self.every {
            CheckpointEvery::Off => false,
            CheckpointEvery::Rounds(n) => round >= self.round.saturating_add(n),
            CheckpointEvery::Wall(after) => round > self.round && self.at.elapsed() >= after,
        }
    }

    /// One was saved before round `round`.
    pub fn saved(&mut self, round: u32) {
        (self.round, self.at) = (round, Instant::now());
    }
}

/// The records a run has made, in the checkpoints' binary form, in order.
#[derive(Default)]
pub struct RecordLog {
    bytes: Vec<u8>,
    count: u64,
}

impl RecordLog {
    pub fn push(&mut self, r: &Record) {
        let config = bincode::config::standard();
        bincode::serde::encode_into_std_write(r, &mut self.bytes, config)
            .expect("a record always encodes into memory");
        self.count += 1;
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

/// A checkpoint as read back: the state to resume from and the records made before it.
pub struct Saved {
    pub state: RunState,
    pub records: Vec<Record>,
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

/// The file's bytes for `state`, with the records of `log`, of the run of `resolved_yaml`
/// (whose SHA-256 is `content_hash`).
pub fn checkpoint_bytes(
    content_hash: &str,
    resolved_yaml: &str,
    state: &RunState,
    log: &RecordLog,
) -> Vec<u8> {
    let header = Header {
        format: FORMAT,
        fedsim: env!("CARGO_PKG_VERSION").to_string(),
        content_hash: content_hash.to_string(),
        resolved_yaml: resolved_yaml.to_string(),
    };
    let config = bincode::config::standard();
    let encode = |v: &dyn erased::Encode| v.encode(config);
    let mut out = MAGIC.to_vec();
    for part in [encode(&header), encode(state)] {
        out.extend((part.len() as u64).to_le_bytes());
        out.extend(part);
    }
    out.extend(log.count.to_le_bytes());
    out.extend((log.bytes.len() as u64).to_le_bytes());
    out.extend(&log.bytes);
    let sum = Sha256::digest(&out);
    out.extend(sum);
    out
}

/// Encoding through a trait object (the header and the state are of two types).
mod erased {
    pub trait Encode {
        fn encode(&self, config: bincode::config::Configuration) -> Vec<u8>;
    }

    impl<T: serde::Serialize> Encode for T {
        fn encode(&self, config: bincode::config::Configuration) -> Vec<u8> {
            bincode::serde::encode_to_vec(self, config).expect("a checkpoint's part encodes")
        }
    }
}

/// Reads the checkpoint at `path` for a run of `resolved_yaml` (SHA-256 `content_hash`),
/// refusing one that is damaged, of another fedsim or of another scenario.
pub fn read_checkpoint(
    path: &Path,
    content_hash: &str,
    resolved_yaml: &str,
) -> Result<Saved, CheckpointError> {
    let bytes = crate::io::read_bytes(path, crate::io::SizeLimit::memory("a checkpoint")).map_err(
        |source| CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        },
    )?;
    let unreadable = |why: &str| CheckpointError::Unreadable {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    let body = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| unreadable("it does not begin as one"))?;
    if body.len() < 32 {
        return Err(unreadable("it ends before its checksum"));
    }
    let (body, sum) = body.split_at(body.len() - 32);
    let mut summed = Sha256::new();
    summed.update(MAGIC);
    summed.update(body);
    if summed.finalize().as_slice() != sum {
        return Err(unreadable("its checksum does not match its contents"));
    }
    let mut reader = Reader { bytes: body };
    let header: Header = reader.part().map_err(|why| unreadable(&why))?;
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
    let state: RunState = reader.part().map_err(|why| unreadable(&why))?;
    let count = reader.u64().map_err(|why| unreadable(&why))?;
    let len = reader.u64().map_err(|why| unreadable(&why))? as usize;
    if reader.bytes.len() != len {
        return Err(unreadable("its records do not end where it ends"));
    }
    let mut records = Vec::new();
    let config = bincode::config::standard();
    let mut rest = reader.bytes;
    for _ in 0..count {
        let (r, read): (Record, usize) = bincode::serde::decode_from_slice(rest, config)
            .map_err(|e| unreadable(&format!("record {}: {e}", records.len() + 1)))?;
        rest = &rest[read..];
        records.push(r);
    }
    if !rest.is_empty() {
        return Err(unreadable("bytes follow its last record"));
    }
    Ok(Saved { state, records })
}

/// The parts of a checkpoint's body, in order.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn u64(&mut self) -> Result<u64, String> {
        if self.bytes.len() < 8 {
            return Err("it ends early".into());
        }
        let (n, rest) = self.bytes.split_at(8);
        self.bytes = rest;
        Ok(u64::from_le_bytes(n.try_into().expect("eight bytes")))
    }

    fn part<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, String> {
        let len = self.u64()? as usize;
        if self.bytes.len() < len {
            return Err("it ends early".into());
        }
        let (part, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        let config = bincode::config::standard();
        match bincode::serde::decode_from_slice(part, config) {
            Ok((value, read)) if read == len => Ok(value),
            Ok(_) => Err("a part holds more than it says".into()),
            Err(e) => Err(e.to_string()),
        }
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
            clients: vec![4, 5],
        }
    }

    fn log() -> RecordLog {
        let mut log = RecordLog::default();
        for round in 1..=6 {
            log.push(&Record::Round(RoundRecord {
                round,
                ..Default::default()
            }));
        }
        log.push(&Record::FinalModels(vec![vec![
            f32::from_bits(0x7fc0_0001),
            -0.0,
        ]]));
        log
    }

    const YAML: &str = "name: a\nrounds: 10\nseed: 1\n";

    fn written(dir: &Path) -> PathBuf {
        let path = dir.join(CHECKPOINT_FILE);
        std::fs::write(&path, checkpoint_bytes("hash", YAML, &state(), &log())).unwrap();
        path
    }

    #[test]
    fn a_checkpoint_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = written(dir.path());
        let saved = read_checkpoint(&path, "hash", YAML).unwrap();
        assert_eq!(saved.state, state());
        assert_eq!(saved.records.len(), 7);
        let Record::FinalModels(m) = &saved.records[6] else {
            panic!("the last record is the models")
        };
        assert_eq!(m[0][0].to_bits(), 0x7fc0_0001);
        assert_eq!(m[0][1].to_bits(), (-0.0f32).to_bits());
        let mut again = RecordLog::default();
        saved.records.iter().for_each(|r| again.push(r));
        assert_eq!((again.bytes, again.count), (log().bytes, log().count));
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
        let foreign = read(b"PAR1 not a checkpoint");
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
    fn the_cadence_reads_rounds_and_wall_time() {
        assert_eq!("off".parse(), Ok(CheckpointEvery::Off));
        assert_eq!("10".parse(), Ok(CheckpointEvery::Rounds(10)));
        assert_eq!(
            "90s".parse(),
            Ok(CheckpointEvery::Wall(Duration::from_secs(90)))
        );
        assert_eq!(
            "1.5m".parse(),
            Ok(CheckpointEvery::Wall(Duration::from_secs(90)))
        );
        for wrong in ["0", "-3", "5x", "m", "0s", ""] {
            let e = wrong.parse::<CheckpointEvery>().unwrap_err();
            assert!(e.contains("give `off`"), "{wrong}: {e}");
        }
        let mut every3 = Cadence::new(CheckpointEvery::Rounds(3), 1);
        assert!(!every3.due(3) && every3.due(4));
        every3.saved(4);
        assert!(!every3.due(6) && every3.due(7));
        assert!(!Cadence::new(CheckpointEvery::Off, 1).due(100));
        let wall = Cadence::new(CheckpointEvery::Wall(Duration::ZERO), 5);
        assert!(!wall.due(5) && wall.due(6));
    }
}
