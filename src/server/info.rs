//! The text of `INFO` and `RAFT.INFO`.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::Node;
use crate::raft::RaftStatus;

pub use crate::REDIS_VERSION;

/// In Redis's order, `raft` last.
const SECTIONS: &[&str] = &[
    "server", "clients", "memory", "persistence", "stats", "replication", "cpu", "modules", "commandstats",
    "errorstats", "latencystats", "cluster", "keyspace", "raft",
];

/// `INFO [section ...]`: the requested sections (default: the default ones).
pub async fn info(node: &Node, requested: &[String]) -> String {
    let status = node.consensus.status().await;
    // As in Redis, `commandstats` and `latencystats` are not default
    // sections.
    let wanted = |s: &str| {
        let by_default = !matches!(s, "commandstats" | "latencystats");
        (requested.is_empty() && by_default)
            || requested.iter().any(|r| r == s || r == "all" || r == "everything" || (r == "default" && by_default))
    };
    let mut out = String::new();
    for section in SECTIONS.iter().copied().filter(|s| wanted(s)) {
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        section_text(node, &status, section, &mut out);
    }
    out
}

/// INFO-style text: `# Header` lines and `field:value` lines.
struct Text<'a>(&'a mut String);

impl Text<'_> {
    fn header(&mut self, name: &str) {
        let _ = write!(self.0, "# {name}\r\n");
    }

    fn field(&mut self, key: &str, value: impl std::fmt::Display) {
        let _ = write!(self.0, "{key}:{value}\r\n");
    }
}

fn section_text(node: &Node, status: &RaftStatus, section: &str, out: &mut String) {
    let uptime = node.started.elapsed().as_secs();
    let mut t = Text(out);
    match section {
        "server" => {
            t.header("Server");
            t.field("redis_version", REDIS_VERSION);
            t.field("redis_git_sha1", "00000000");
            t.field("redis_git_dirty", 0);
            t.field("raftlock_version", env!("CARGO_PKG_VERSION"));
            t.field("redis_mode", "standalone");
            t.field("os", std::env::consts::OS);
            t.field("arch_bits", 64);
            t.field("multiplexing_api", "epoll");
            t.field("process_id", std::process::id());
            t.field("run_id", format!("{:040x}", node.config.node_id));
            t.field("tcp_port", node.config.port);
            t.field("uptime_in_seconds", uptime);
            t.field("uptime_in_days", uptime / 86400);
            t.field("server_time_usec", crate::clock::wall_unix_us());
            t.field("hz", 10);
            t.field("configured_hz", 10);
            t.field("executable", "raftlock");
            t.field("config_file", "");
            t.field("io_threads_active", 0);
        }
        "clients" => {
            t.header("Clients");
            t.field("connected_clients", node.clients.count());
            t.field("maxclients", node.maxclients.load(Ordering::Relaxed));
            t.field("blocked_clients", node.clients.blocked_clients());
            t.field("pubsub_clients", node.clients.pubsub_clients());
        }
        "memory" => {
            // The process's resident set (what `maxmemory` is judged by), as
            // MEMORY STATS reports it; raftlock's allocator is jemalloc.
            t.header("Memory");
            let rss = crate::commands::resident_bytes();
            let peak = crate::commands::peak_resident_bytes().max(rss);
            let limit = node.memory.limit();
            let system = system_memory();
            t.field("used_memory", rss);
            t.field("used_memory_human", human(rss));
            t.field("used_memory_rss", rss);
            t.field("used_memory_rss_human", human(rss));
            t.field("used_memory_peak", peak);
            t.field("used_memory_peak_human", human(peak));
            t.field("used_memory_peak_perc", format!("{:.2}%", if peak == 0 { 0.0 } else { rss as f64 * 100.0 / peak as f64 }));
            t.field("total_system_memory", system);
            t.field("total_system_memory_human", human(system));
            let (scripts, functions, libraries) = node.consensus.script_counts();
            t.field("number_of_cached_scripts", scripts);
            t.field("number_of_functions", functions);
            t.field("number_of_libraries", libraries);
            t.field("maxmemory", limit);
            t.field("maxmemory_human", human(limit));
            t.field("maxmemory_policy", "noeviction");
            t.field("mem_fragmentation_ratio", "1.00");
            t.field("mem_allocator", "jemalloc-5.3.0");
        }
        "cpu" => {
            t.header("CPU");
            let (sys, user) = cpu_times(libc::RUSAGE_SELF);
            let (children_sys, children_user) = cpu_times(libc::RUSAGE_CHILDREN);
            // The thread that runs the connections and the state machine.
            let (main_sys, main_user) = cpu_times(libc::RUSAGE_THREAD);
            t.field("used_cpu_sys", sys);
            t.field("used_cpu_user", user);
            t.field("used_cpu_sys_children", children_sys);
            t.field("used_cpu_user_children", children_user);
            t.field("used_cpu_sys_main_thread", main_sys);
            t.field("used_cpu_user_main_thread", main_user);
        }
        // No module is ever loaded (`MODULE LIST`).
        "modules" => t.header("Modules"),
        "commandstats" => {
            t.header("Commandstats");
            for (name, counts) in node.stats.commandstats() {
                t.field(&format!("cmdstat_{name}"), counts);
            }
        }
        "errorstats" => {
            t.header("Errorstats");
            for (code, count) in node.stats.errorstats() {
                t.field(&format!("errorstat_{code}"), format!("count={count}"));
            }
        }
        "persistence" => {
            t.header("Persistence");
            t.field("loading", 0);
            t.field("async_loading", 0);
            t.field("rdb_changes_since_last_save", 0);
            t.field("aof_enabled", 1);
            t.field("raft_log_fsync", "always");
            let disk = node.consensus.disk();
            // Disk free space, and whether commands that add data are refused.
            t.field("disk_free_bytes", disk.free().map_or_else(|| "unknown".to_string(), |f| f.to_string()));
            t.field("min_free_disk", disk.reserve());
            t.field("disk_nearly_full", u8::from(disk.low()));
        }
        "stats" => {
            t.header("Stats");
            t.field("total_connections_received", node.total_connections.load(Ordering::Relaxed));
            t.field("total_commands_processed", node.total_commands.load(Ordering::Relaxed));
            t.field("total_error_replies", node.stats.total_errors());
            t.field("pubsub_channels", node.hub.channels(None).len());
            t.field("pubsub_patterns", node.hub.numpat());
            for (name, n) in node.acllog.denied_counts() {
                t.field(name, n);
            }
        }
        "latencystats" => {
            t.header("Latencystats");
            for (command, percentiles) in node.latency.percentiles() {
                t.field(&format!("latency_percentiles_usec_{command}"), percentiles);
            }
        }
        "replication" => {
            t.header("Replication");
            t.field("role", "master");
            t.field("connected_slaves", 0);
        }
        "cluster" => {
            t.header("Cluster");
            // raftlock replicates by Raft, not Redis Cluster: clients must not
            // switch to cluster mode.
            t.field("cluster_enabled", 0);
        }
        "keyspace" => {
            t.header("Keyspace");
            let (keys, expires) = node.consensus.key_counts();
            if keys > 0 {
                t.field("db0", format!("keys={keys},expires={expires},avg_ttl=0"));
            }
        }
        "raft" => {
            t.header("Raft");
            raft_fields(status, &mut t);
        }
        _ => {}
    }
}

/// Bytes as Redis's `bytesToHuman` writes them (`1.11M`).
fn human(n: u64) -> String {
    let units = [(1u64 << 50, 'P'), (1 << 40, 'T'), (1 << 30, 'G'), (1 << 20, 'M'), (1 << 10, 'K')];
    match units.iter().find(|(size, _)| n >= *size) {
        Some((size, unit)) => format!("{:.2}{unit}", n as f64 / *size as f64),
        None => format!("{n}B"),
    }
}

/// The machine's memory, in bytes (0 if unknown).
fn system_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    (pages.max(0) as u64).saturating_mul(page.max(0) as u64)
}

/// (system, user) CPU seconds of `who`, as Redis prints them.
fn cpu_times(who: libc::c_int) -> (String, String) {
    // SAFETY: getrusage writes the struct it is given, which is zeroed
    // plain data.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(who, &mut usage) != 0 {
            return ("0.000000".into(), "0.000000".into());
        }
        usage
    };
    let seconds = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (seconds(usage.ru_stime), seconds(usage.ru_utime))
}

fn raft_fields(status: &RaftStatus, t: &mut Text) {
    t.field("node_id", status.node_id);
    t.field("role", status.role);
    t.field("term", status.term);
    t.field("leader_id", status.leader_id.map(|l| l.to_string()).unwrap_or_default());
    t.field("leader_addr", status.leader_addr.clone().unwrap_or_default());
    t.field("commit_index", status.commit_index);
    t.field("applied_index", status.applied_index);
    t.field("last_log_index", status.last_log_index);
    t.field("snapshot_index", status.snapshot_index);
    t.field("purged_index", status.purged_index);
    t.field("busy_poll", u8::from(status.busy_poll));
    t.field("busy_polls", status.busy_polls);
    t.field("repeated_commands", crate::metrics::repeated_commands());
    let members: Vec<String> =
        status.members.iter().map(|(id, n)| format!("{id}@{}/{}", n.peer_addr, n.client_addr)).collect();
    t.field("members", members.join(","));
    let ids = |want_voter: bool| -> Vec<String> {
        let is_voter = |id: &u64| status.voters.contains(id);
        status.members.iter().filter(|(id, _)| is_voter(id) == want_voter).map(|(id, _)| id.to_string()).collect()
    };
    t.field("voters", ids(true).join(","));
    t.field("learners", ids(false).join(","));
    // Measured on this node's calls to its peers (the leader's cover all).
    let offsets: Vec<String> = crate::raft::peer_clock_offsets().iter().map(|(id, ms)| format!("{id}={ms}")).collect();
    t.field("clock_offsets_ms", offsets.join(","));
}

/// `RAFT.INFO`: `field:value` lines.
pub async fn raft_info(node: &Node) -> String {
    let status = node.consensus.status().await;
    let mut out = String::new();
    raft_fields(&status, &mut Text(&mut out));
    out
}
