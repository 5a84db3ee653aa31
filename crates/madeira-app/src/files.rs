//! Every file the CLI reads goes through here: regular files only (a FIFO,
//! `/dev/zero` or a directory is refused at once, never waited on or read
//! forever), at most `MAX_FILE_BYTES`, and, where the content could leak (flows,
//! crontabs, directory entries), no symlink out of the directory it was given in:
//! such a link is reported, not followed.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest file the CLI reads: flows, crontabs, configs, tokens, certificates.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Why a file was not read: the path, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct FileError {
    pub path: String,
    pub problem: Problem,
}

/// What is wrong with a file; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("cannot read: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a regular file ({0}); give a regular file")]
    NotRegular(&'static str),
    #[error("{size} bytes is over the limit of {MAX_FILE_BYTES} bytes for files the CLI reads")]
    TooLarge { size: u64 },
    #[error("a symlink to {target}, outside {dir}; not followed (give the target's own path if you mean it)")]
    LeavesDirectory { target: String, dir: String },
}

fn err(path: &Path, problem: impl Into<Problem>) -> FileError {
    FileError { path: shown(path), problem: problem.into() }
}

/// Where a file may lead.
#[derive(Debug, Clone, Copy)]
pub enum Confine<'a> {
    /// Symlinks are followed anywhere (config, token and certificate files, which
    /// deployment tools often link in).
    Anywhere,
    /// A symlink must stay inside its own parent directory.
    Parent,
    /// A symlink must stay inside this directory (an entry of a directory walk).
    Within(&'a Path),
}

/// Reads `path` as UTF-8 text under the rules above.
pub fn read_text(path: &Path, confine: Confine<'_>) -> Result<String, FileError> {
    let bytes = read_bytes(path, confine)?;
    String::from_utf8(bytes).map_err(|e| {
        err(path, std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not UTF-8 text ({e})")))
    })
}

/// Reads `path` under the rules above.
pub fn read_bytes(path: &Path, confine: Confine<'_>) -> Result<Vec<u8>, FileError> {
    check_link(path, confine)?;
    let io = |e| err(path, e);
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting.
    let file = File::options().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(err(path, Problem::NotRegular(kind_of(&meta.file_type()))));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(err(path, Problem::TooLarge { size: meta.len() }));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(err(path, Problem::TooLarge { size: bytes.len() as u64 }));
    }
    Ok(bytes)
}

/// What a directory entry is, without following a symlink out of `dir`.
pub enum Entry {
    /// A regular file (possibly through a symlink that stays inside).
    File(PathBuf),
    /// Anything else, with the reason to report.
    Skipped(PathBuf, String),
}

/// The entries of `dir`, sorted, each classified.
pub fn dir_entries(dir: &Path) -> Result<Vec<Entry>, FileError> {
    let io = |e| err(dir, e);
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(dir).map_err(io)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|path| match check_link(&path, Confine::Within(dir)) {
            Err(e) => Entry::Skipped(path, e.problem.to_string()),
            Ok(()) => match std::fs::metadata(&path) {
                Ok(meta) if meta.is_file() => Entry::File(path),
                Ok(meta) => {
                    let why = format!("not a regular file ({})", kind_of(&meta.file_type()));
                    Entry::Skipped(path, why)
                }
                Err(e) => Entry::Skipped(path, format!("cannot read: {e}")),
            },
        })
        .collect())
}

/// The `*.yaml`/`*.yml` regular files of `dir`, sorted; such an entry that is
/// not a readable regular file inside `dir` (a symlink out, a FIFO) is an error.
pub fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, FileError> {
    let is_yaml = |p: &Path| p.extension().is_some_and(|x| x == "yaml" || x == "yml");
    let mut files = Vec::new();
    for entry in dir_entries(dir)? {
        match entry {
            Entry::File(file) if is_yaml(&file) => files.push(file),
            Entry::Skipped(file, why) if is_yaml(&file) => {
                return Err(FileError {
                    path: shown(&file),
                    problem: Problem::Io(std::io::Error::other(why)),
                });
            }
            _ => {}
        }
    }
    Ok(files)
}

/// Refuses a symlink at `path` whose target leaves the allowed directory.
fn check_link(path: &Path, confine: Confine<'_>) -> Result<(), FileError> {
    let dir = match confine {
        Confine::Anywhere => return Ok(()),
        Confine::Within(dir) => dir.to_path_buf(),
        Confine::Parent => match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    let io = |e| err(path, e);
    if !std::fs::symlink_metadata(path).map_err(io)?.file_type().is_symlink() {
        return Ok(());
    }
    let target = std::fs::canonicalize(path).map_err(io)?;
    let base = std::fs::canonicalize(&dir).map_err(|e| err(&dir, e))?;
    if target.starts_with(&base) {
        return Ok(());
    }
    Err(err(path, Problem::LeavesDirectory { target: shown(&target), dir: shown(&base) }))
}

fn kind_of(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn fifos_and_devices_are_refused_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.display().to_string()).expect("path");
        // SAFETY: mkfifo(3) on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = Instant::now();
        let e = read_text(&fifo, Confine::Parent).expect_err("fifo").to_string();
        assert!(e.contains("not a regular file (a FIFO)"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let e = read_text(Path::new("/dev/zero"), Confine::Anywhere).expect_err("device").to_string();
        assert!(e.contains("/dev/zero: not a regular file (a character device)"), "{e}");
        let e = read_text(dir.path(), Confine::Anywhere).expect_err("dir").to_string();
        assert!(e.contains("a directory"), "{e}");
    }

    #[test]
    fn large_files_are_refused_naming_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("big.yaml");
        let f = File::create(&big).expect("create");
        f.set_len(MAX_FILE_BYTES + 1).expect("grow");
        let e = read_text(&big, Confine::Parent).expect_err("big").to_string();
        assert!(e.contains("big.yaml") && e.contains("over the limit of 4194304 bytes"), "{e}");
    }

    #[test]
    fn symlinks_out_of_the_directory_are_reported_not_followed() {
        let outside = tempfile::tempdir().expect("tempdir");
        let secret = outside.path().join("shadow");
        std::fs::write(&secret, "root:$6$hash").expect("write");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("real"), "ok").expect("write");
        std::os::unix::fs::symlink(&secret, dir.path().join("evil")).expect("symlink");
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("inside")).expect("symlink");
        let e = read_text(&dir.path().join("evil"), Confine::Parent).expect_err("leaves").to_string();
        assert!(e.contains("a symlink to") && e.contains("not followed"), "{e}");
        assert!(!e.contains("root:"), "{e}");
        assert_eq!(read_text(&dir.path().join("inside"), Confine::Parent).expect("inside"), "ok");
        assert_eq!(read_text(&dir.path().join("evil"), Confine::Anywhere).expect("config"), "root:$6$hash");
        let entries = dir_entries(dir.path()).expect("entries");
        let summary: Vec<String> = entries
            .iter()
            .map(|e| match e {
                Entry::File(p) => format!("file {}", p.file_name().unwrap_or_default().to_string_lossy()),
                Entry::Skipped(p, why) => {
                    format!("skip {} {why}", p.file_name().unwrap_or_default().to_string_lossy())
                }
            })
            .collect();
        assert_eq!(summary.len(), 3, "{summary:?}");
        assert!(summary[0].starts_with("skip evil") && summary[0].contains("not followed"), "{summary:?}");
        assert_eq!(&summary[1..], ["file inside", "file real"]);
    }
}
