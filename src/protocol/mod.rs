//! The wire: RESP requests in, [`Reply`] values out.
//!
//! Owns framing (with the limits that keep a hostile client from making the
//! server allocate without bound), the protocol-neutral [`Reply`] and its RESP2 /
//! RESP3 encodings, and [`Args`], the cursor commands use to read their
//! arguments. Knows nothing about keys, Raft or sockets.

mod args;
mod codec;
mod reply;
pub mod repr;

pub use args::{parse_i64, ArgError, Args};
pub use codec::{Limits, ProtocolError, RequestCodec};
pub(crate) use codec::{double_quoted, single_quoted};
pub use reply::{decimal_digits, encode_reply, format_double, Reply};
