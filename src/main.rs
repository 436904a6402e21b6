//! The `roce` command line: argument parsing and dispatch only.
fn main() {}
