//! The `raftlock` binary: configuration, logging and metrics, then the node.
//! `raftlock status --addr host:port` prints the cluster's members instead;
//! `raftlock backup` and `raftlock restore` take and restore backups.

use clap::Parser;

/// jemalloc, not glibc's malloc: a node frees and allocates millions of
/// small buffers per second (arguments, replies, map nodes), and glibc's
/// fastbin consolidation and chunk unlinking took about a third of the
/// worker thread under pipelined writes. With jemalloc, 3 M pipelined `SET
/// NX PX` went from 119-133k to 187-211k per second; see "The allocator" in
/// `benches/HISTORY.md`.
#[cfg(feature = "server")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("status") => return raftlock::status::main(&raftlock::status::StatusArgs::parse_from(std::env::args().skip(1))),
        Some("backup") => {
            return raftlock::backup::backup_main(&raftlock::backup::BackupArgs::parse_from(std::env::args().skip(1)))
        }
        Some("restore") => {
            return raftlock::backup::restore_main(&raftlock::backup::RestoreArgs::parse_from(std::env::args().skip(1)))
        }
        _ => {}
    }
    let config = raftlock::config::Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = config.validate() {
        eprintln!("raftlock: {e}");
        return std::process::ExitCode::from(2);
    }
    #[cfg(feature = "planted-bugs")]
    raftlock::planted::plant(&config.plant_bug);
    raftlock::clock::set_wall_offset_ms(config.wall_clock_offset_ms);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if config.worker_threads > 0 {
        builder.worker_threads(config.worker_threads);
    }
    let runtime = match builder.thread_stack_size(raftlock::server::WORKER_STACK_BYTES).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("raftlock: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(raftlock::server::run(config));
    // The reason first: shutting the runtime down cancels Raft's storage
    // tasks, and what follows must not hide it.
    if let Err(e) = &result {
        tracing::error!("raftlock stopped: {e:#}");
    }
    raftlock::raft::process_stopping();
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::FAILURE,
    }
}
