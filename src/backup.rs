//! `raftlock backup --addr host:port FILE` and `raftlock restore FILE
//! --data-dir DIR`: a consistent backup streamed from the leader, and a new
//! one-node cluster made from it (`raft::recovery` has the file format and
//! what a restored node's data looks like).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::raft::recovery::Backup;
use crate::raft::NodeInfo;
use crate::status::{Conn, StatusArgs};

/// The largest backup the client accepts.
const MAX_BACKUP: usize = 1 << 40;
/// How long the leader may take to answer (it encodes the whole keyspace).
const BACKUP_WAIT: Duration = Duration::from_secs(600);
/// How long to keep trying while the cluster has no leader.
const LEADER_WAIT: Duration = Duration::from_secs(15);

/// What `raftlock backup` is given.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "raftlock backup",
    about = "Writes a consistent backup of the cluster's data, taken on the leader, to FILE."
)]
pub struct BackupArgs {
    #[command(flatten)]
    pub node: StatusArgs,
    /// Where to write the backup (replaced atomically).
    pub file: PathBuf,
}

/// What `raftlock restore` is given: the backup, and the flags the new
/// node will start with (its id, addresses and `--data-dir`).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "raftlock restore",
    about = "Makes --data-dir (new or empty) a one-node cluster holding FILE's data; then start raftlock with the same flags."
)]
pub struct RestoreArgs {
    /// A file written by `raftlock backup`.
    pub file: PathBuf,
    #[command(flatten)]
    pub config: crate::config::Config,
}

/// Asks the node at `args.node.addr` for a backup, following it to the
/// leader; returns the checked file bytes.
pub fn fetch(args: &BackupArgs) -> Result<(Vec<u8>, Backup), String> {
    let deadline = Instant::now() + LEADER_WAIT;
    let mut addr = args.node.addr.clone();
    loop {
        let attempt = Conn::open_waiting(&addr, &args.node, BACKUP_WAIT)
            .and_then(|mut conn| conn.call_bytes(&["RAFT.BACKUP"], MAX_BACKUP));
        match attempt {
            Ok(raw) => {
                let backup = Backup::decode(&raw).map_err(|e| format!("{addr} sent a bad backup: {e}"))?;
                return Ok((raw, backup));
            }
            Err(e) if Instant::now() < deadline && (e.starts_with("TRYAGAIN") || e.starts_with("CLUSTERDOWN")) => {
                if let Some((_, leader)) = e.split_once(" at ").filter(|(_, a)| !a.is_empty()) {
                    addr = leader.trim().to_string();
                } else {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            Err(e) => return Err(format!("{addr}: {e}")),
        }
    }
}

/// Writes `data` to `path` durably and atomically: beside it, fsynced,
/// renamed over it, the directory fsynced.
fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| std::io::Error::other("not a file name"))?;
    let tmp = dir.join(format!(".{}.partial", name.to_string_lossy()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Runs `raftlock backup`.
pub fn backup_main(args: &BackupArgs) -> std::process::ExitCode {
    let result = fetch(args).and_then(|(raw, backup)| {
        write_atomically(&args.file, &raw).map_err(|e| format!("{}: {e}", args.file.display()))?;
        Ok((raw.len(), backup))
    });
    match result {
        Ok((bytes, backup)) => {
            println!("wrote {} ({bytes} bytes): {}", args.file.display(), backup.describe());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("raftlock backup: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs `raftlock restore`.
pub fn restore_main(args: &RestoreArgs) -> std::process::ExitCode {
    let config = &args.config;
    let result = config.validate().and_then(|()| {
        let raw = std::fs::read(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
        let backup = Backup::decode(&raw).map_err(|e| format!("{}: {e}", args.file.display()))?;
        let node = NodeInfo { peer_addr: config.advertised_peer_addr(), client_addr: config.client_addr() };
        crate::raft::recovery::restore(&backup, &config.data_dir, config.node_id, node).map_err(|e| e.to_string())?;
        Ok(backup)
    });
    match result {
        Ok(backup) => {
            println!(
                "restored {} into {} as node {}, a one-node cluster: {}\nstart it with the same flags: raftlock --data-dir {} --node-id {} ...; fencing tokens continue above {}",
                args.file.display(),
                config.data_dir.display(),
                config.node_id,
                backup.describe(),
                config.data_dir.display(),
                config.node_id,
                backup.keyspace().last_version()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("raftlock restore: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
