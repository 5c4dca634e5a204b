//! A data disk that really fills up: a node on a 240 MB tmpfs, with a
//! ballast file leaving it 50 MB, takes 1 MB values until its free space
//! falls below `--min-free-disk` (10 MB), then refuses what adds data with
//! MISCONF and serves on (reads, deletions, releases), and starts again on
//! the nearly full disk. On the way its second log segment cannot be
//! allocated 64 MB ahead, and grows as it is written; before, the node
//! stopped there.
//!
//! Mounting needs root (CI runs as root). Elsewhere the test says it could
//! not mount and checks nothing; the reserve's rules are also checked, on
//! any machine, by `tests/security.rs` (one node) and `tests/cluster.rs` (a
//! leader judging forwarded commands), with a reserve above any disk's size.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_ports, q};
use redis::Value;

/// Unmounts on drop.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A node process, killed on drop.
struct Node {
    child: Child,
    port: u16,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(data: &Path, log: &Path) -> Node {
    let ports = free_ports(2);
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_raftlock"))
        .args(["--bind", "127.0.0.1", "--metrics-addr", "off", "--min-free-disk", "10mb"])
        .args(["--port", &ports[0].to_string(), "--peer-port", &ports[1].to_string()])
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start raftlock");
    let node = Node { child, port: ports[0] };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = client(&node).ok().and_then(|mut c| q(&mut c, &["PING"]).ok());
        if ready == Some(Value::SimpleString("PONG".into())) {
            return node;
        }
        assert!(Instant::now() < deadline, "the node did not answer within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client(node: &Node) -> redis::RedisResult<redis::Connection> {
    let c = redis::Client::open(format!("redis://127.0.0.1:{}/", node.port))?;
    let con = c.get_connection_with_timeout(Duration::from_secs(5))?;
    con.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(con)
}

#[test]
fn a_node_whose_disk_fills_refuses_what_adds_data_and_serves_on() {
    let dir = tempfile::Builder::new().prefix("raftlock-disk-").tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=240m", "tmpfs"])
        .arg(&disk)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("could not mount a tmpfs (needs root): this test checked nothing here");
        return;
    }
    let _mounted = Mounted(disk.clone());
    let (data, log) = (disk.join("data"), dir.path().join("node.log"));
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut node = start(&data, &log);
    let mut c = client(&node).unwrap();
    let token = match q(&mut c, &["LOCK.ACQUIRE", "held", "me", "600000"]).unwrap() {
        Value::Int(t) => t.to_string(),
        other => panic!("{other:?}"),
    };
    // The first log segment is allocated; leave 50 MB besides.
    let info = match q(&mut c, &["INFO", "persistence"]).unwrap() {
        Value::BulkString(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    let free: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("disk_free_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no disk_free_bytes in {info}"));
    let ballast = (free - (50 << 20)) as usize;
    std::fs::write(disk.join("ballast"), vec![0u8; ballast]).unwrap();
    let value = vec![b'x'; 1 << 20];
    let mut refused = None;
    for i in 0..300 {
        // At most ~20 values between two readings of the disk (every 100
        // ms), as a client that is not writing at memory speed.
        std::thread::sleep(Duration::from_millis(5));
        match redis::cmd("SET").arg(format!("k{i}")).arg(&value).query::<Value>(&mut c) {
            Ok(Value::Okay) => {}
            Ok(other) => panic!("SET {i}: {other:?}"),
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("MISCONF") && text.contains("min-free-disk"), "SET {i}: {text}\n{}", logs());
                refused = Some(i);
                break;
            }
        }
    }
    let refused = refused.expect("300 MB went into a 240 MB disk without a refusal");
    // The first segment holds ~63 values, and the 50 MB left then cannot
    // take the next one's 64 MB.
    assert!(refused > 63, "refused after {refused} values:\n{}", logs());
    assert!(logs().contains("no room to allocate a log segment ahead"), "no segment was short of room ({refused} values in):\n{}", logs());
    assert!(node.child.try_wait().unwrap().is_none(), "the node stopped:\n{}", logs());
    assert_eq!(q(&mut c, &["PING"]).unwrap(), Value::SimpleString("PONG".into()));
    assert_eq!(q(&mut c, &["STRLEN", "k0"]).unwrap(), Value::Int(1 << 20));
    assert_eq!(q(&mut c, &["DEL", "k0", "k1"]).unwrap(), Value::Int(2));
    assert_eq!(q(&mut c, &["LOCK.RELEASE", "held", "me", &token]).unwrap(), Value::Int(1));

    // A restart on the nearly full disk: the log's last segment, cut back to
    // its last record, cannot be allocated ahead again, and grows as written.
    drop(c);
    let _ = node.child.kill();
    let _ = node.child.wait();
    drop(node);
    let node = start(&data, &log);
    let mut c = client(&node).unwrap();
    assert_eq!(q(&mut c, &["DBSIZE"]).unwrap(), Value::Int(refused as i64 - 2), "{}", logs());
    assert_eq!(q(&mut c, &["EXISTS", "held"]).unwrap(), Value::Int(0));
    assert_eq!(q(&mut c, &["DEL", "k2"]).unwrap(), Value::Int(1));
}
