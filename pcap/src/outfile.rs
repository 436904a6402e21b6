//! Output files that never destroy an input and are never left half-written.
//!
//! * [`FileId`] names a file the way the kernel does (device and inode, after following
//!   links), so an output that is an input under another name, a symlink or a hard link, is
//!   found before anything is opened for writing ([`check_distinct`]).
//! * [`OutFile`] writes a regular file's new contents to a temporary file beside it and
//!   renames it over the old one only on [`OutFile::commit`]: a run that fails to write, panics
//!   or is killed leaves the old file (or none), never half of a new one. Outputs that are not
//!   regular files (a terminal, a pipe, `/dev/null`, `/dev/full`) are written in place, since
//!   nothing can be renamed over a device.
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What a path names, as the kernel tells files apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileId {
    /// An existing file (links followed): its device and inode.
    Inode(u64, u64),
    /// A file that does not exist yet: its directory (links resolved) and name.
    New(PathBuf, std::ffi::OsString),
}

impl FileId {
    /// What `path` names, `None` for paths that name no file and cannot be created as one
    /// (no such directory, `-` is not a path here: callers leave stdin and stdout out).
    pub fn of(path: &Path) -> Option<Self> {
        if let Ok(m) = std::fs::metadata(path) {
            return Some(Self::Inode(m.dev(), m.ino()));
        }
        let name = path.file_name()?.to_os_string();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some(Self::New(std::fs::canonicalize(dir).ok()?, name))
    }
}

/// An output that would write over an input or another output ([`check_distinct`]). Its
/// text is one error line (`-o x.pcap is the capture x.pcap: refusing to write over it`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Clash {
    /// The output is an input.
    #[error("{what} {} is {input} {}: refusing to write over it", .path.display(), .input_path.display())]
    Input {
        /// What the output is to the command (`-o`, `--html`).
        what: String,
        /// The output as named.
        path: PathBuf,
        /// What the input is to the command (`the capture`, `--workload`).
        input: String,
        /// The input as named.
        input_path: PathBuf,
    },
    /// Two outputs are one file.
    #[error("{what} {} and {other} {} are the same file: each output needs its own", .path.display(), .other_path.display())]
    Outputs {
        /// What the later output is to the command.
        what: String,
        /// It, as named.
        path: PathBuf,
        /// What the earlier output is to the command.
        other: String,
        /// It, as named.
        other_path: PathBuf,
    },
}

/// Refuses outputs that are one of the inputs or another output: the first clash. Each item
/// is (what the file is to the command: `the capture`, `-o`, `--workload`; the path); stdin
/// and stdout (`-`) are left out by the caller. Links and hard links are seen through:
/// [`FileId`] compares inodes.
pub fn check_distinct(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<(), Clash> {
    // Inputs that exist (one that does not cannot be written over).
    let ins: Vec<(&str, &Path, FileId)> = inputs
        .iter()
        .filter_map(|&(what, p)| match FileId::of(p) {
            Some(id @ FileId::Inode(..)) => Some((what, p, id)),
            _ => None,
        })
        .collect();
    let mut seen: Vec<(&str, &Path, FileId)> = Vec::new();
    for &(what, p) in outputs {
        let Some(id) = FileId::of(p) else { continue };
        // Writing to a device is not writing over it: `/dev/null` may be named twice.
        if std::fs::metadata(p).is_ok_and(|m| !m.file_type().is_file() && !m.is_dir()) {
            continue;
        }
        if let Some((iw, ip, _)) = ins.iter().find(|(_, _, i)| *i == id) {
            return Err(Clash::Input {
                what: what.into(),
                path: p.into(),
                input: (*iw).into(),
                input_path: (*ip).into(),
            });
        }
        if let Some((ow, op, _)) = seen.iter().find(|(_, _, o)| *o == id) {
            return Err(Clash::Outputs {
                what: what.into(),
                path: p.into(),
                other: (*ow).into(),
                other_path: (*op).into(),
            });
        }
        seen.push((what, p, id));
    }
    Ok(())
}

/// An output file: a regular file is written to a temporary file in its directory and
/// renamed over it by [`OutFile::commit`] (dropped without it, the temporary file is
/// removed and the old file stays as it was); anything else (a device, a pipe) is written
/// in place.
#[derive(Debug)]
pub struct OutFile {
    dest: PathBuf,
    out: Out,
}

#[derive(Debug)]
enum Out {
    Temp(tempfile::NamedTempFile),
    Direct(File),
}

impl OutFile {
    /// Opens `path` for writing (errors do not name it: the caller says what it is).
    pub fn create(path: &Path) -> io::Result<Self> {
        // A link is written through, to the file it names.
        let dest = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let meta = std::fs::metadata(&dest).ok();
        if let Some(m) = &meta {
            if m.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "is a directory",
                ));
            }
            if !m.file_type().is_file() {
                let f = OpenOptions::new().write(true).open(&dest)?;
                return Ok(Self {
                    dest,
                    out: Out::Direct(f),
                });
            }
        }
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let prefix = format!(
            ".{}.",
            dest.file_name()
                .map_or_else(|| "roce".into(), |n| n.to_string_lossy().into_owned())
        );
        // The new file keeps the old one's mode; a new one gets 0666 less the umask, as
        // File::create would give it.
        let mode = meta.map_or(0o666, |m| m.permissions().mode() & 0o7777);
        let tmp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .permissions(std::fs::Permissions::from_mode(mode))
            .tempfile_in(dir)?;
        Ok(Self {
            dest,
            out: Out::Temp(tmp),
        })
    }

    /// The file this writes (links resolved).
    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// Flushes what was written and puts it in place: renamed over the old file (a regular
    /// file), or flushed (a device).
    pub fn commit(self) -> io::Result<()> {
        match self.out {
            Out::Direct(mut f) => f.flush(),
            Out::Temp(mut t) => {
                t.flush()?;
                t.persist(&self.dest).map(drop).map_err(|e| e.error)
            }
        }
    }
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.out {
            Out::Temp(t) => t.write(buf),
            Out::Direct(f) => f.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.out {
            Out::Temp(t) => t.write_all(buf),
            Out::Direct(f) => f.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.out {
            Out::Temp(t) => t.flush(),
            Out::Direct(f) => f.flush(),
        }
    }
}

/// Flushes a buffered [`OutFile`] and puts it in place ([`OutFile::commit`]).
pub fn commit_buffered(w: io::BufWriter<OutFile>) -> io::Result<()> {
    w.into_inner()
        .map_err(io::IntoInnerError::into_error)?
        .commit()
}

/// Writes `path` whole with `f`: through an [`OutFile`] and a 1 MiB buffer, put in place
/// only when `f` and every write succeeded.
pub fn write_whole(
    path: &Path,
    f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let mut w = io::BufWriter::with_capacity(1 << 20, OutFile::create(path)?);
    f(&mut w)?;
    commit_buffered(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().expect("a temporary directory")
    }

    #[test]
    fn a_file_is_replaced_only_on_commit() {
        let d = dir();
        let p = d.path().join("out.txt");
        std::fs::write(&p, b"old").unwrap();
        {
            let mut o = OutFile::create(&p).unwrap();
            o.write_all(b"half of the new").unwrap();
            // Dropped without commit: the old file stays, no temporary file is left.
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        let mut o = OutFile::create(&p).unwrap();
        o.write_all(b"new").unwrap();
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"old",
            "not in place before commit"
        );
        o.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_link_is_written_through_and_kept() {
        let d = dir();
        let target = d.path().join("target.txt");
        let link = d.path().join("link.txt");
        std::fs::write(&target, b"old").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let mut o = OutFile::create(&link).unwrap();
        o.write_all(b"new").unwrap();
        o.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
    }

    #[test]
    fn the_mode_of_the_old_file_is_kept() {
        let d = dir();
        let p = d.path().join("mode.txt");
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let mut o = OutFile::create(&p).unwrap();
        o.write_all(b"new").unwrap();
        o.commit().unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[test]
    fn inputs_are_found_under_any_name() {
        let d = dir();
        let input = d.path().join("in.pcap");
        std::fs::write(&input, b"capture").unwrap();
        let link = d.path().join("link.pcap");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let hard = d.path().join("hard.pcap");
        std::fs::hard_link(&input, &hard).unwrap();
        let dotted = d.path().join(".").join("in.pcap");
        for out in [&input, &link, &hard, &dotted] {
            let e = check_distinct(&[("the capture", &input)], &[("-o", out)])
                .unwrap_err()
                .to_string();
            assert!(e.contains("is the capture"), "{e}");
            assert!(e.ends_with("refusing to write over it"), "{e}");
        }
        let other = d.path().join("out.parquet");
        check_distinct(&[("the capture", &input)], &[("-o", &other)]).unwrap();
        // Two outputs that do not exist yet, named two ways.
        let again = d.path().join(".").join("out.parquet");
        let e = check_distinct(&[], &[("--html", &other), ("--trace", &again)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("the same file"), "{e}");
        // A device may be named by several outputs.
        let null = Path::new("/dev/null");
        check_distinct(
            &[("the capture", &input)],
            &[("--html", null), ("--trace", null)],
        )
        .unwrap();
    }
}
