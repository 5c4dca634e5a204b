//! Runs `scripts/clients.sh` (redis-cli one-shot and interactive, redis-benchmark)
//! against the binary cargo built for this test run. Skipped, with a printed note,
//! when redis-cli, redis-benchmark or tmux is not installed: the script itself
//! installs them when run by hand, but a test run must not install packages.
//! `scripts/test.sh` installs them and sets `RAFTLOCK_REQUIRE_CLIENT_TOOLS`, so
//! under it (and in CI) a missing tool fails the test instead.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn stock_redis_clients_work() {
    let missing: Vec<&str> = ["redis-cli", "redis-benchmark", "tmux", "timeout"]
        .into_iter()
        .filter(|t| !common::have(t))
        .collect();
    if !missing.is_empty() {
        // scripts/test.sh (and so CI) installs them first: there, missing
        // tools are a failure, never a silent skip.
        assert!(
            std::env::var_os("RAFTLOCK_REQUIRE_CLIENT_TOOLS").is_none(),
            "{} not installed, and RAFTLOCK_REQUIRE_CLIENT_TOOLS is set",
            missing.join(", ")
        );
        eprintln!(
            "NOTE: skipping stock_redis_clients_work: {} not installed \
             (run scripts/clients.sh by hand; it installs them)",
            missing.join(", ")
        );
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/clients.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_raftlock"))
        .env("CLIENTS_NO_INSTALL", "1")
        .output()
        .expect("run scripts/clients.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/clients.sh failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    assert!(stdout.contains("all client checks passed"), "{stdout}");
}
