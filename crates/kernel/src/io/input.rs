//! Input files: every file fedsim reads is opened here, as a regular file no larger than what
//! it should hold.
//!
//! - **Regular files only.** A FIFO, a device (`/dev/zero`), a socket or a folder is refused
//!   before anything is read: reading could block forever or never end. Symbolic links are
//!   followed.
//! - **A size bound.** Each reader says how large its file may be ([`SizeLimit`]): a scenario
//!   16 MiB, a weights file what its header describes, a file read whole at most the memory
//!   this process may use. A larger file is refused by its size before it is read, and a file
//!   that grows while it is read is cut off at the bound and refused.
//!
//! This room opens and reads; it must not interpret what it reads, and nothing outside `io`
//! opens a file (the layering test checks it).

use std::io::Read;
use std::path::Path;

/// How large an input file may be: the most bytes it can hold, and what it is (for the
/// message that refuses a larger one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SizeLimit {
    pub bytes: u64,
    /// What the file is: `a scenario file`, `a summary.csv`, …
    pub what: &'static str,
}

impl SizeLimit {
    /// A scenario or sweep file: 16 MiB of YAML (the largest shipped is a few KiB).
    pub const SCENARIO: SizeLimit = SizeLimit {
        bytes: 16 << 20,
        what: "a scenario or sweep file",
    };

    /// A file of fedsim's own bookkeeping or results read back (a manifest, a lock, a run's
    /// `summary.csv` or `scenario.yaml`, a sweep's `cells.csv`): 256 MiB.
    pub const RESULT: SizeLimit = SizeLimit {
        bytes: 256 << 20,
        what: "a result or bookkeeping file of fedsim's",
    };

    /// A file read whole into memory (a trace, a graph, a module): at most the memory this
    /// process may use ([`super::machine_memory`]; 16 GiB where that cannot be read).
    pub fn memory(what: &'static str) -> SizeLimit {
        let bytes = super::machine_memory().map_or(16u64 << 30, |b| b as u64);
        SizeLimit { bytes, what }
    }

    /// No bound on the size (files read a part at a time, such as Parquet row groups).
    pub const STREAMED: SizeLimit = SizeLimit {
        bytes: u64::MAX,
        what: "a file read a part at a time",
    };

    fn refuse(&self, len: u64) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "it is {}; {} may take at most {}",
                human(len),
                self.what,
                human(self.bytes)
            ),
        )
    }
}

/// Bytes for messages: `12.3 GiB`.
pub fn human_bytes(b: f64) -> String {
    human(b.min(u64::MAX as f64) as u64)
}

fn human(b: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Refuses what is not a regular file (a FIFO, a device, a socket or a folder), which reading
/// could block on or never finish; symbolic links are followed. The error says what it is.
pub fn check_regular(path: &Path) -> std::io::Result<std::fs::Metadata> {
    let meta = std::fs::metadata(path)?;
    if meta.is_file() {
        return Ok(meta);
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

/// A regular file opened for reading, its size checked against a [`SizeLimit`].
#[derive(Debug)]
pub struct InputFile {
    file: std::fs::File,
    len: u64,
    limit: SizeLimit,
}

impl InputFile {
    /// Opens `path` if it is a regular file of at most `limit` bytes.
    pub fn open(path: &Path, limit: SizeLimit) -> std::io::Result<InputFile> {
        let len = check_regular(path)?.len();
        if len > limit.bytes {
            return Err(limit.refuse(len));
        }
        let file = std::fs::File::open(path)?;
        // What was checked may have been swapped for something else since: check the open file.
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it stopped being a regular file while it was opened",
            ));
        }
        Ok(InputFile {
            len: meta.len(),
            file,
            limit,
        })
    }

    /// The file's size when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads exactly `n` bytes from where the file stands.
    pub fn read_exact(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0; n];
        self.file.read_exact(&mut buf)?;
        Ok(buf)
    }

    /// The rest of the file, refused where it holds more than the limit (a file that grew).
    pub fn read_rest(mut self) -> std::io::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(self.len.min(self.limit.bytes) as usize);
        (&mut self.file)
            .take(self.limit.bytes.saturating_add(1))
            .read_to_end(&mut buf)?;
        if buf.len() as u64 > self.limit.bytes {
            return Err(self.limit.refuse(buf.len() as u64));
        }
        Ok(buf)
    }

    /// The open file, for readers that take it a part at a time (Parquet, pickles, hashing).
    pub fn into_file(self) -> std::fs::File {
        self.file
    }
}

/// Reads a regular file of at most `limit` bytes whole.
pub fn read_bytes(path: &Path, limit: SizeLimit) -> std::io::Result<Vec<u8>> {
    InputFile::open(path, limit)?.read_rest()
}

/// Reads a regular file of at most `limit` bytes as UTF-8 text.
pub fn read_text(path: &Path, limit: SizeLimit) -> std::io::Result<String> {
    String::from_utf8(read_bytes(path, limit)?).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

/// Opens a regular file of at most `limit` bytes for reading.
pub fn open_regular(path: &Path, limit: SizeLimit) -> std::io::Result<std::fs::File> {
    Ok(InputFile::open(path, limit)?.into_file())
}

/// The text of a file of the operating system's (`/proc/cpuinfo`), `None` where it cannot be
/// read.
pub fn system_text(path: &Path) -> Option<String> {
    read_text(path, SizeLimit::RESULT).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_text(&fifo, SizeLimit::SCENARIO).unwrap_err();
        assert!(e.to_string().contains("named pipe (FIFO)"), "{e}");
        let e = read_bytes(Path::new("/dev/zero"), SizeLimit::memory("a module")).unwrap_err();
        assert!(e.to_string().contains("it is a device"), "{e}");
        let e = read_text(tmp.path(), SizeLimit::SCENARIO).unwrap_err();
        assert!(e.to_string().contains("a folder"), "{e}");
        std::fs::write(tmp.path().join("f"), "x").unwrap();
        assert_eq!(
            read_text(&tmp.path().join("f"), SizeLimit::SCENARIO).unwrap(),
            "x"
        );
    }

    #[test]
    fn a_file_larger_than_its_limit_is_refused_by_its_size() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("big");
        let file = std::fs::File::create(&path).unwrap();
        // A sparse file of 5 GiB: refused from its size, never read.
        file.set_len(5 << 30).unwrap();
        let limit = SizeLimit {
            bytes: 1 << 20,
            what: "a test file",
        };
        let e = read_bytes(&path, limit).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is 5.0 GiB; a test file may take at most 1.0 MiB"
        );
        let small = SizeLimit {
            bytes: 3,
            what: "x",
        };
        std::fs::write(&path, "abc").unwrap();
        assert_eq!(read_bytes(&path, small).unwrap(), b"abc");
        std::fs::write(&path, "abcd").unwrap();
        assert_eq!(
            read_bytes(&path, small).unwrap_err().to_string(),
            "it is 4 B; x may take at most 3 B"
        );
    }
}
