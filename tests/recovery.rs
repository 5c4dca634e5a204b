//! Backups and disaster recovery against real processes: `raftlock backup`
//! from a loaded 3-node cluster (through a follower, which points it at the
//! leader), `raftlock restore` into a new node, and `--force-new-cluster`
//! on the one survivor of a dead majority.
//!
//! Every lock acknowledged before the backup started must be in the restored
//! node with its owner and token; tokens the restored (or forced) node hands
//! out must be higher than any it holds.

mod cluster_support;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cluster_support::*;
use redis::Value;

/// A lock a client was told it holds: owner, token (0 for `SET NX PX`).
#[derive(Debug, Clone)]
struct Held {
    key: String,
    owner: String,
    token: i64,
    at: Instant,
}

fn raftlock(args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_raftlock"));
    for (k, _) in std::env::vars() {
        if k.starts_with("RAFTLOCK_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(args).output().expect("run raftlock")
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Clients taking locks (half `SET NX PX`, half `LOCK.ACQUIRE`) through
/// every node until `stop`; each grant is recorded when its reply arrives.
fn load(cluster: &Cluster, stop: Arc<AtomicBool>, held: Arc<Mutex<Vec<Held>>>) -> Vec<thread::JoinHandle<()>> {
    let urls: Vec<String> = cluster.ids().iter().map(|id| cluster.node(*id).url()).collect();
    (0..4)
        .map(|t| {
            let url = urls[t % urls.len()].clone();
            let (stop, held) = (stop.clone(), held.clone());
            thread::spawn(move || {
                let mut con = None;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    if con.is_none() {
                        con = redis::Client::open(url.as_str()).and_then(|c| c.get_connection_with_timeout(IO_TIMEOUT)).ok();
                        if let Some(c) = &mut con {
                            let _ = c.set_read_timeout(Some(IO_TIMEOUT));
                        }
                    }
                    let Some(c) = con.as_mut() else {
                        thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    let (key, owner) = (format!("lock:{t}:{i}"), format!("owner-{t}-{i}"));
                    let granted = if i % 2 == 0 {
                        match common::q(c, &["SET", &key, &owner, "NX", "PX", "600000"]) {
                            Ok(Value::Okay) => Some(0),
                            Ok(_) => None,
                            Err(_) => {
                                con = None;
                                None
                            }
                        }
                    } else {
                        match common::q(c, &["LOCK.ACQUIRE", &key, &owner, "600000"]) {
                            Ok(Value::Int(token)) => Some(token),
                            Ok(_) => None,
                            Err(_) => {
                                con = None;
                                None
                            }
                        }
                    };
                    if let Some(token) = granted {
                        held.lock().unwrap().push(Held { key, owner, token, at: Instant::now() });
                    }
                }
            })
        })
        .collect()
}

/// Every lock in `held` is in the node at `con`, with its owner (and token).
#[track_caller]
fn assert_all_held(con: &mut redis::Connection, held: &[Held], what: &str) {
    let mut missing = Vec::new();
    for h in held {
        match common::q(con, &["GET", &h.key]) {
            Ok(v) if common::as_text(&v).as_deref() == Some(h.owner.as_str()) => {}
            other => missing.push(format!("{} ({}): GET gave {other:?}", h.key, h.owner)),
        }
        if h.token > 0 {
            let info = lock_info(con, &h.key).unwrap_or_else(|e| panic!("LOCK.INFO {}: {e}", h.key));
            assert_eq!(info.map(|i| i.token), Some(h.token), "{what}: the token of {}", h.key);
        }
    }
    assert!(missing.is_empty(), "{what}: {} of {} acknowledged locks missing, e.g. {:?}", missing.len(), held.len(), &missing[..missing.len().min(5)]);
}

/// A one-node raftlock started by hand on `dir`, killed on drop.
struct Solo {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Solo {
    fn start(dir: &Path, ports: &[u16], extra: &[&str]) -> Solo {
        let log = dir.with_extension("log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_raftlock"))
            .args(["--node-id", "1", "--bind", "127.0.0.1", "--metrics-addr", "off"])
            .args(["--port", &ports[0].to_string(), "--peer-port", &ports[1].to_string()])
            .arg("--data-dir")
            .arg(dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawn raftlock");
        Solo { child, port: ports[0], log }
    }

    /// A connection once the node serves writes.
    fn ready(&mut self) -> redis::Connection {
        let url = format!("redis://127.0.0.1:{}/", self.port);
        poll_until(READY_TIMEOUT, "the restored node serves writes", || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the node exited ({status}):\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
            }
            let mut con = redis::Client::open(url.as_str()).ok()?.get_connection_with_timeout(IO_TIMEOUT).ok()?;
            con.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
            matches!(common::q(&mut con, &["SET", "ready-probe", "1"]), Ok(Value::Okay)).then_some(con)
        })
    }
}

impl Drop for Solo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("restored node log:\n{}", tail(&std::fs::read_to_string(&self.log).unwrap_or_default(), 4000));
        }
    }
}

#[test]
fn a_backup_of_a_loaded_cluster_restores_every_acknowledged_lock() {
    let _serial = serial();
    // Snapshots every 300 entries: the backup is of a state built from a
    // snapshot and the log after it.
    let cluster = Cluster::start(3, Opts { snapshot_logs: Some(300), ..Opts::default() });
    let leader = cluster.wait_leader(&cluster.ids(), READY_TIMEOUT);
    cluster.wait_ready(&cluster.ids(), READY_TIMEOUT);
    let follower = *cluster.ids().iter().find(|id| **id != leader).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(Mutex::new(Vec::new()));
    let workers = load(&cluster, stop.clone(), held.clone());
    // A waiter queued behind a held lock: its connection is gone in the
    // restored cluster, so its place in the queue must be too.
    let mut admin = cluster.node(leader).client();
    let queued = common::q(&mut admin, &["LOCK.ACQUIRE", "queued", "holder", "600000"]);
    assert!(matches!(queued, Ok(Value::Int(_))), "{queued:?}");
    let waiter_url = cluster.node(follower).url();
    let _waiter = thread::spawn(move || {
        let mut c = redis::Client::open(waiter_url.as_str()).unwrap().get_connection().unwrap();
        let _ = common::q(&mut c, &["LOCK.ACQUIRE", "queued", "waiter", "600000", "WAIT", "600000"]);
    });
    poll_until(Duration::from_secs(5), "the waiter queued", || {
        lock_info(&mut admin, "queued").ok().flatten().filter(|i| i.waiters == 1)
    });
    // Only a user with every permission may take one.
    let limited = common::q(&mut admin, &["ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@all"]);
    assert!(matches!(limited, Ok(Value::Okay)), "{limited:?}");
    let mut app = redis::Client::open(format!("redis://app:pw@127.0.0.1:{}/", cluster.node(leader).port)).unwrap().get_connection().unwrap();
    let refused = common::q(&mut app, &["RAFT.BACKUP"]).map(|_| ()).map_err(|e| err_text(&e));
    assert!(refused.as_ref().is_err_and(|e| e.starts_with("NOPERM")), "{refused:?}");
    thread::sleep(Duration::from_millis(2500));

    // Through a follower, which sends it to the leader; the load goes on.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.backup");
    let started = Instant::now();
    let out = raftlock(&["backup", "--addr", &cluster.node(follower).addr(), file.to_str().unwrap()]);
    assert!(out.status.success(), "raftlock backup failed: {}", text(&out));
    assert!(text(&out).contains(&format!("taken by node {leader} (leader")), "{}", text(&out));
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    workers.into_iter().for_each(|w| w.join().unwrap());
    let held = held.lock().unwrap().clone();
    let before: Vec<Held> = held.iter().filter(|h| h.at < started).cloned().collect();
    assert!(before.len() >= 50, "the load acknowledged only {} locks before the backup", before.len());
    assert!(before.iter().any(|h| h.token > 0) && before.iter().any(|h| h.token == 0));
    let highest = held.iter().map(|h| h.token).max().unwrap();

    // A damaged file is refused.
    let raw = std::fs::read(&file).unwrap();
    let mut damaged = raw.clone();
    let at = damaged.len() / 2;
    damaged[at] ^= 0x40;
    let bad = dir.path().join("damaged.backup");
    std::fs::write(&bad, &damaged).unwrap();
    let ports = free_ports(2);
    let data = dir.path().join("restored");
    let restore_args = |f: &Path| {
        vec![
            "restore".to_string(),
            f.to_str().unwrap().to_string(),
            "--data-dir".into(),
            data.to_str().unwrap().into(),
            "--port".into(),
            ports[0].to_string(),
            "--peer-port".into(),
            ports[1].to_string(),
        ]
    };
    let run = |args: Vec<String>| raftlock(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let out = run(restore_args(&bad));
    assert!(!out.status.success() && text(&out).contains("damaged"), "{}", text(&out));

    let out = run(restore_args(&file));
    assert!(out.status.success(), "raftlock restore failed: {}", text(&out));
    // Never over existing data.
    let out = run(restore_args(&file));
    assert!(!out.status.success() && text(&out).contains("not empty"), "{}", text(&out));

    drop(cluster);
    let mut node = Solo::start(&data, &ports, &[]);
    let mut con = node.ready();
    assert_all_held(&mut con, &before, "restored from the backup");
    let info = common::RaftInfo::parse(&common::as_text(&common::q(&mut con, &["RAFT.INFO"]).unwrap()).unwrap());
    assert_eq!(info.role(), "leader");
    assert_eq!(info.members().len(), 1, "a one-node cluster: {}", info.raw);
    let queued = lock_info(&mut con, "queued").unwrap().expect("the held lock is restored");
    assert_eq!((queued.owner.as_str(), queued.waiters), ("holder", 0), "the old cluster's waiter is not carried over");
    // New grants continue above every token of the old cluster.
    let fresh = match common::q(&mut con, &["LOCK.ACQUIRE", "after-restore", "x", "10000"]) {
        Ok(Value::Int(t)) => t,
        other => panic!("LOCK.ACQUIRE after the restore: {other:?}"),
    };
    assert!(fresh > highest, "token {fresh} after the restore, the old cluster had handed out {highest}");
    // And it survives its own restart.
    drop(con);
    drop(node);
    let mut node = Solo::start(&data, &ports, &[]);
    let mut con = node.ready();
    assert_all_held(&mut con, &before, "restored, after a restart");
    assert_eq!(lock_info(&mut con, "after-restore").unwrap().map(|i| i.token), Some(fresh));
}

#[test]
fn force_new_cluster_serves_the_locks_of_a_dead_majority() {
    let _serial = serial();
    let mut cluster = Cluster::start(3, Opts { snapshot_logs: Some(200), ..Opts::default() });
    let leader = cluster.wait_leader(&cluster.ids(), READY_TIMEOUT);
    cluster.wait_ready(&cluster.ids(), READY_TIMEOUT);
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(Mutex::new(Vec::new()));
    let workers = load(&cluster, stop.clone(), held.clone());
    thread::sleep(Duration::from_millis(2500));
    stop.store(true, Ordering::Relaxed);
    workers.into_iter().for_each(|w| w.join().unwrap());
    let held = held.lock().unwrap().clone();
    assert!(held.len() >= 50, "only {} locks acknowledged", held.len());
    let highest = held.iter().map(|h| h.token).max().unwrap();

    // The survivor: a follower that has every committed entry in its log
    // (applied or not is up to it).
    let survivor = *cluster.ids().iter().find(|id| **id != leader).unwrap();
    let committed = cluster.node(leader).raft_info().unwrap().num("commit_index");
    poll_until(Duration::from_secs(10), "the survivor holds the whole log", || {
        (cluster.node(survivor).raft_info().ok()?.num("last_log_index") >= committed).then_some(())
    });
    for id in cluster.ids() {
        cluster.kill9(id);
    }
    cluster.opts.node_args.insert(survivor, vec!["--force-new-cluster".into()]);
    // With the old secret the old members could come back: refused, and
    // nothing changed.
    cluster.restart(survivor);
    let refused = poll_until(Duration::from_secs(20), "the forced start with the old secret refuses", || {
        let node = cluster.node_mut(survivor);
        (!node.is_running()).then(|| node.logs())
    });
    assert!(refused.contains("start it with a new --cluster-secret"), "{}", tail(&refused, 3000));
    cluster.secret = format!("{}-after-the-loss", cluster.secret);
    cluster.restart(survivor);
    let forced = cluster.wait_leader(&[survivor], READY_TIMEOUT);
    assert_eq!(forced, survivor);
    let mut con = cluster.node(survivor).client();
    assert_all_held(&mut con, &held, "forced from the survivor");
    let info = cluster.node(survivor).raft_info().unwrap();
    assert_eq!(info.members().len(), 1, "{}", info.raw);
    let fresh = match common::q(&mut con, &["LOCK.ACQUIRE", "after-force", "x", "600000"]) {
        Ok(Value::Int(t)) => t,
        other => panic!("LOCK.ACQUIRE after forcing: {other:?}"),
    };
    assert!(fresh > highest, "token {fresh} after forcing, the old cluster had handed out {highest}");
    drop(con);

    // Started again with the flag left on: still itself, nothing lost.
    cluster.restart(survivor);
    cluster.wait_leader(&[survivor], READY_TIMEOUT);
    let mut con = cluster.node(survivor).client();
    assert_all_held(&mut con, &held, "forced twice");
    assert_eq!(lock_info(&mut con, "after-force").unwrap().map(|i| i.token), Some(fresh));

    // A new member joins; now the flag must refuse to split the node from it.
    cluster.start_extra_node(4);
    let (peer, client) = (cluster.node(4).peer_addr(), cluster.node(4).addr());
    let added = common::q(&mut con, &["RAFT.NODE", "ADD", "4", &peer, &client]);
    assert!(matches!(added, Ok(Value::Okay)), "RAFT.NODE ADD 4: {added:?}");
    drop(con);
    cluster.restart(survivor);
    let refused = poll_until(Duration::from_secs(20), "the forced start refuses", || {
        let node = cluster.node_mut(survivor);
        (!node.is_running()).then(|| node.logs())
    });
    assert!(refused.contains("already made this node a one-node cluster"), "{}", tail(&refused, 3000));
    // Without the flag it rejoins its two-node cluster.
    cluster.opts.node_args.remove(&survivor);
    cluster.restart(survivor);
    cluster.wait_leader(&[survivor, 4], READY_TIMEOUT);
    let mut con = cluster.node(4).client();
    assert_eq!(lock_info(&mut con, "after-force").unwrap().map(|i| i.token), Some(fresh));
    assert_eq!(cluster.node(4).raft_info().unwrap().members().keys().copied().collect::<Vec<_>>(), vec![survivor, 4]);
}

/// A node that cannot bind one of its addresses (taken by another process)
/// stops with a failure exit status and says which address and why. Before,
/// the reason could be lost: main shut the runtime down before logging it,
/// which cancelled Raft's storage writes in flight (a new node writes its
/// vote as it starts), and Raft's stop on that error aborted the process
/// (SIGABRT) first; a test server whose port was taken was then not started
/// again on new ports, as its harness does for "Address already in use".
#[test]
fn a_node_that_cannot_listen_says_why_and_exits_with_a_failure_status() {
    for which in ["--port", "--peer-port", "--metrics-addr"] {
        for round in 0..4 {
            let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let taken_port = taken.local_addr().unwrap().port();
            let ports = free_ports(3);
            let dir = tempfile::Builder::new().prefix("raftlock-listen-").tempdir().unwrap();
            let port = |flag: &str, i: usize| if flag == which { taken_port } else { ports[i] };
            let out = Command::new(env!("CARGO_BIN_EXE_raftlock"))
                .args(["--bind", "127.0.0.1", "--port", &port("--port", 0).to_string()])
                .args(["--peer-port", &port("--peer-port", 1).to_string()])
                .args(["--metrics-addr", &format!("127.0.0.1:{}", port("--metrics-addr", 2))])
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .env_remove("RUST_LOG")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .output()
                .expect("run raftlock");
            let log = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{which}, round {round}: {:?}\n{log}", out.status);
            assert!(
                log.contains(&format!("127.0.0.1:{taken_port}")) && log.contains("Address already in use"),
                "{which}, round {round}: the log does not say why:\n{log}"
            );
            drop(taken);
        }
    }
}
