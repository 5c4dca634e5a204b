//! Every command of the table, with any arguments, applied as replicas apply
//! log entries (one entry per command, a pipelined entry, or a MULTI/EXEC):
//! no panic (contained panics abort under the fuzzer), the same replies and
//! keyspace on two replicas (determinism), one of which restarts from its own
//! snapshot halfway (nothing the replies depend on is missing from a
//! snapshot), and a snapshot that decodes to the same keyspace. The input is RESP, as clients send it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use raftlock_fuzz::{check_snapshot, commands_from, run, run_restoring, Grouping};

fuzz_target!(|data: &[u8]| {
    let commands = commands_from(data, 64);
    if commands.is_empty() {
        return;
    }
    let grouping = match data.len() % 3 {
        0 => Grouping::Each,
        1 => Grouping::Pipeline,
        _ => Grouping::Transaction,
    };
    let (replies, a) = run(&commands, &grouping, data);
    // The second replica installs a snapshot of itself halfway through.
    let (again, b) = run_restoring(&commands, &grouping, data, Some(commands.len() / 2));
    assert!(replies == again, "two replicas answered the same entries differently");
    assert_eq!(a.ks.digest(), b.ks.digest(), "two replicas diverged on the same entries");
    check_snapshot(&a.ks);
});
