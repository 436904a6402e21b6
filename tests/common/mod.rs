//! What the command-line tests share: the binary under test and a way to run it.
// Each test crate uses its own part of this.
#![allow(dead_code, unreachable_pub)]

pub mod rxe;

use std::process::Command;

/// The `roce` binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_roce");

/// Runs `roce ARGS` to the end: exit code (-1 when killed by a signal), stdout, stderr.
pub fn roce(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run roce");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The loopback address pair of test `n`: 127.0.n.1 (client) and 127.0.n.2 (server).
pub fn ips(n: u8) -> (String, String) {
    (format!("127.0.{n}.1"), format!("127.0.{n}.2"))
}

/// A device that refuses every write with ENOSPC (Linux's "full" device, char 1:7), for the
/// tests that a write failure fails the run. `/dev/full` where it is that device; on machines
/// without it (where writing to `/dev/full` quietly makes a regular file, and a "cannot
/// write" check would pass on nothing) one is made with `mknod` in a directory of the test's
/// own. Panics, saying why, when neither can be had: a test that needs it must not pass
/// without it.
pub fn full_device() -> std::path::PathBuf {
    // Once per test process: its tests run on several threads.
    static FULL: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FULL.get_or_init(make_full_device).clone()
}

fn make_full_device() -> std::path::PathBuf {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let is_full = |p: &std::path::Path| {
        std::fs::metadata(p)
            .is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == (1 << 8 | 7))
    };
    let dev = std::path::Path::new("/dev/full");
    if is_full(dev) {
        return dev.to_path_buf();
    }
    let dir = std::env::temp_dir().join(format!("roce-full-{}", std::process::id()));
    let made = dir.join("full");
    if !is_full(&made) {
        std::fs::create_dir_all(&dir).expect("a directory for the full device");
        let _ = std::fs::remove_file(&made);
        let out = Command::new("mknod")
            .arg(&made)
            .args(["c", "1", "7"])
            .output()
            .expect("run mknod");
        assert!(
            out.status.success() && is_full(&made),
            "no /dev/full here and mknod could not make one (needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Anyone may write to it, as to /dev/full.
        let _ = Command::new("chmod").arg("666").arg(&made).status();
    }
    made
}
