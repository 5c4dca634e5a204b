//! How long a node takes to encode and to decode a snapshot of N held lock
//! keys (the restart path of issue 12: a node that starts reads its snapshot
//! and decodes it before it serves), in memory, without RocksDB or the log.
//!
//! `cargo bench --bench snapshot -- [--keys N] [--no-count]` (default
//! 1,000,000 keys). Prints
//! the snapshot's size and each step's time, and the heap each held key
//! costs (counted by the allocator below, in malloc's usable sizes): its
//! strings alone, the keyspace built by inserts (the map, the strings, the
//! expiry index), the same without expiries, and the keyspace decoded from
//! the snapshot (what a restarted node holds).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use raftlock::keyspace::{Entry, Key, Keyspace};

/// The system allocator, counting the bytes live on the heap as malloc
/// holds them (its usable size, which includes each block's rounding up).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);
/// Off with `--no-count`: every thread's allocations update the two counters
/// above, which costs a decode on two threads more than it costs the node.
static COUNTING: AtomicBool = AtomicBool::new(true);

fn usable(ptr: *mut u8) -> isize {
    // SAFETY: `ptr` came from the system allocator (malloc or
    // posix_memalign on Linux), which malloc_usable_size accepts.
    unsafe { libc::malloc_usable_size(ptr.cast()) as isize }
}

// SAFETY: every call is passed to `System` unchanged; only counts are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        if !ptr.is_null() && COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(usable(ptr), Ordering::Relaxed);
            BLOCKS.fetch_add(1, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(usable(ptr), Ordering::Relaxed);
            BLOCKS.fetch_sub(1, Ordering::Relaxed);
        }
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !COUNTING.load(Ordering::Relaxed) {
            return System.realloc(ptr, layout, new_size);
        }
        let before = usable(ptr);
        let new = System.realloc(ptr, layout, new_size);
        if !new.is_null() {
            LIVE.fetch_add(usable(new) - before, Ordering::Relaxed);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes and blocks live now.
fn heap() -> (isize, isize) {
    (LIVE.load(Ordering::Relaxed), BLOCKS.load(Ordering::Relaxed))
}

/// "B bytes and K blocks per key" between two readings.
fn per_key(before: (isize, isize), after: (isize, isize), keys: usize) -> String {
    let n = keys.max(1) as f64;
    format!("{:.1} bytes, {:.2} blocks per key", (after.0 - before.0) as f64 / n, (after.1 - before.1) as f64 / n)
}

/// Key `i` of the sequence the benchmark inserts: redis-benchmark's
/// `lock:<rand>` (random order), with an owner of 24 bytes.
fn key_and_owner(x: &mut u64, i: usize) -> (Bytes, Bytes) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    (Bytes::from(format!("lock:{:012}", *x % 1_000_000_000_000)), Bytes::from(format!("owner-{i:018}")))
}

/// A keyspace of `keys` held leases (or plain keys without `expiry`).
fn build(keys: usize, expiry: bool) -> Keyspace {
    let mut ks = Keyspace::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..keys {
        let (key, owner) = key_and_owner(&mut x, i);
        let mut entry = Entry::string(owner, i as u64 + 1, 1000 + i as u64 / 50);
        if expiry {
            entry.set_lease(true);
            entry.set_expires_at(Some(3_600_000 + i as u64 / 50));
        }
        ks.insert(key, entry);
    }
    ks
}

fn main() {
    let mut keys: usize = 1_000_000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--keys" => keys = args.next().and_then(|n| n.parse().ok()).expect("--keys N"),
            "--no-count" => COUNTING.store(false, Ordering::Relaxed),
            // `cargo bench` passes --bench.
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    // The strings alone, in a vector whose own block is not counted.
    let mut strings = Vec::with_capacity(keys);
    let start = heap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..keys {
        strings.push(key_and_owner(&mut x, i));
    }
    let strings_heap = per_key(start, heap(), keys);
    drop(strings);
    let start = heap();
    let plain = build(keys, false);
    let plain_heap = per_key(start, heap(), keys);
    drop(plain);
    // Keys as redis-benchmark's `lock:<rand>` (random order), owners of 24
    // bytes, leases of an hour: what scripts/scale.sh inserts, 50 keys per
    // millisecond of log time (50,000 inserts/s; scale.sh reaches 29,000 at
    // 10 M keys).
    let start = heap();
    let started = Instant::now();
    let ks = build(keys, true);
    let built = started.elapsed();
    let built_heap = per_key(start, heap(), keys);
    let t = Instant::now();
    let data = ks.encode();
    let encoded = t.elapsed();
    drop(ks);
    let start = heap();
    let t = Instant::now();
    let back = Keyspace::decode(&data).expect("decodes");
    let decoded = t.elapsed();
    let decoded_heap = per_key(start, heap(), keys);
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
    if COUNTING.load(Ordering::Relaxed) {
        println!("heap: the strings alone {strings_heap}");
        println!("heap: keyspace without expiries {plain_heap}");
        println!("heap: keyspace of leases, built by inserts {built_heap}");
        println!("heap: the same, decoded from its snapshot {decoded_heap}");
    } else {
        println!("heap: not counted (--no-count)");
    }
    println!(
        "sizes: map slot (key, entry) {} bytes, entry {}, value {}, key {}",
        std::mem::size_of::<(Key, Entry)>(),
        std::mem::size_of::<Entry>(),
        std::mem::size_of::<raftlock::keyspace::Value>(),
        std::mem::size_of::<Key>(),
    );
}
