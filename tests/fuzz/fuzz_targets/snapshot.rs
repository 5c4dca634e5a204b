//! The snapshot decoder, on bytes from anywhere: arbitrary input, and
//! snapshots of real keyspaces (built from the input's commands) with bytes
//! overwritten. Decoding must not panic; what decodes must be usable (reads,
//! writes, expiry, lock handoff) and must survive its own snapshot.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use raftlock::commands::Request;
use raftlock::keyspace::Keyspace;
use raftlock_fuzz::{check_snapshot, commands_from, run, Grouping, Replica};

fn exercise(ks: Keyspace) {
    let keys: Vec<Bytes> = ks.iter(ks.log_time()).map(|(k, _)| k.to_bytes()).take(8).collect();
    let mut r = Replica::new(ks);
    let cmd = |args: &[&[u8]]| Request::Command(args.iter().map(|a| Bytes::copy_from_slice(a)).collect());
    r.apply(1, cmd(&[b"KEYS", b"*"]), 0);
    r.apply(1, cmd(&[b"SCAN", b"0", b"COUNT", b"100"]), 0);
    for key in &keys {
        r.apply(2, cmd(&[b"TYPE", key]), 1);
        r.apply(2, cmd(&[b"LOCK.INFO", key]), 1);
        r.apply(2, cmd(&[b"LOCK.ACQUIRE", key, b"fuzz", b"1000", b"WAIT", b"500"]), 1);
        r.apply(2, cmd(&[b"LOCK.RELEASE", key, b"fuzz", b"1"]), 1);
        r.apply(3, cmd(&[b"PEXPIRE", key, b"5"]), 1);
    }
    r.expire(10);
    r.expire(1_000_000);
    check_snapshot(&r.ks);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(ks) = Keyspace::decode(data) {
        exercise(ks);
    }
    // A real snapshot, damaged: the input's commands build the keyspace,
    // and its last bytes say where to overwrite (position, value) pairs.
    let commands = commands_from(data, 32);
    if commands.is_empty() {
        return;
    }
    let (_, r) = run(&commands, &Grouping::Each, data);
    let mut bytes = r.ks.encode();
    for pair in data.rchunks(3).take(4) {
        if let [hi, lo, value] = pair {
            let at = (usize::from(*hi) << 8 | usize::from(*lo)) % bytes.len();
            bytes[at] = *value;
        }
    }
    if let Ok(ks) = Keyspace::decode(&bytes) {
        exercise(ks);
    }
});
