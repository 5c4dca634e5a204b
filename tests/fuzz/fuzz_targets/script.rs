//! Scripts in the sandbox: the input is a Lua chunk, run with EVAL (two
//! keys, two arguments) as replicas run it. No panic or crash, bounded time
//! (the instruction budget), the same replies and keyspace on two replicas,
//! and a keyspace that survives its snapshot.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use raftlock_fuzz::{check_snapshot, run, Grouping};

fuzz_target!(|data: &[u8]| {
    let eval = |body: &[u8]| -> Vec<Bytes> {
        [b"EVAL".as_slice(), body, b"2", b"k1", b"k2", b"a1", b"10"].iter().map(|a| Bytes::copy_from_slice(a)).collect()
    };
    let setup: Vec<Bytes> = [b"SET".as_slice(), b"k1", b"v"].iter().map(|a| Bytes::copy_from_slice(a)).collect();
    let commands = vec![setup, eval(data), eval(data)];
    let (replies, a) = run(&commands, &Grouping::Each, data);
    let (again, b) = run(&commands, &Grouping::Each, data);
    assert!(replies == again, "two replicas answered the same script differently");
    assert_eq!(a.ks.digest(), b.ks.digest(), "two replicas diverged on the same script");
    check_snapshot(&a.ks);
});
