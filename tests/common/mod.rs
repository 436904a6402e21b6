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
