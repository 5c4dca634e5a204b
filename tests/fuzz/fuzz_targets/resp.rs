//! The RESP request decoder (what every connection runs on untrusted bytes):
//! it must never panic, and framing must not depend on how the bytes arrive:
//! fed in two reads split anywhere, it frames the same commands (and fails at
//! the same point) as fed at once.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use raftlock::protocol::RequestCodec;
use raftlock_fuzz::limits;
use tokio_util::codec::Decoder;

/// Every command framed from `reads` fed one after another, and whether
/// framing failed.
fn frame(reads: &[&[u8]]) -> (Vec<Vec<bytes::Bytes>>, bool) {
    let mut codec = RequestCodec::new(limits());
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for read in reads {
        buf.extend_from_slice(read);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(argv)) => out.push(argv),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    let whole = frame(&[data]);
    let at = data.first().map_or(0, |&b| b as usize * data.len() / 256);
    let (a, b) = data.split_at(at);
    let split = frame(&[a, b]);
    assert_eq!(whole, split, "framing depends on where the reads split (at {at})");
});
