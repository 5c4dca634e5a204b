//! How long a node takes to encode and to decode a snapshot of N held lock
//! keys (the restart path of issue 12: a node that starts reads its snapshot
//! and decodes it before it serves), in memory, without RocksDB or the log.
//!
//! `cargo bench --bench snapshot -- [--keys N]` (default 1,000,000). Prints
//! the snapshot's size and each step's time.

use std::time::Instant;

use bytes::Bytes;
use raftlock::keyspace::{Entry, Keyspace};

fn main() {
    let mut keys: usize = 1_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--keys" => keys = args.next().and_then(|n| n.parse().ok()).expect("--keys N"),
            // `cargo bench` passes --bench.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    let started = Instant::now();
    let mut ks = Keyspace::new();
    // Keys as redis-benchmark's `lock:<rand>` (random order), owners of 24
    // bytes, leases of an hour: what scripts/scale.sh inserts, 50 keys per
    // millisecond of log time (50,000 inserts/s; scale.sh reaches 29,000 at
    // 10 M keys).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..keys {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = Bytes::from(format!("lock:{:012}", x % 1_000_000_000_000));
        let mut entry = Entry::string(Bytes::from(format!("owner-{i:018}")), i as u64 + 1, 1000 + i as u64 / 50);
        entry.lease = true;
        entry.expires_at = Some(3_600_000 + i as u64 / 50);
        ks.insert(key, entry);
    }
    let built = started.elapsed();
    let t = Instant::now();
    let data = ks.encode();
    let encoded = t.elapsed();
    drop(ks);
    let t = Instant::now();
    let back = Keyspace::decode(&data).expect("decodes");
    let decoded = t.elapsed();
    let n = back.len(0);
    let t = Instant::now();
    drop(back);
    let dropped = t.elapsed();
    println!(
        "keys {n}: built by inserts {:.2} s; snapshot {:.1} MB, encoded {:.2} s, decoded {:.2} s ({:.0} ns/key), freed {:.2} s",
        built.as_secs_f64(),
        data.len() as f64 / 1e6,
        encoded.as_secs_f64(),
        decoded.as_secs_f64(),
        decoded.as_nanos() as f64 / n.max(1) as f64,
        dropped.as_secs_f64(),
    );
}
