//! Commands shown as text, as Redis shows them in `MONITOR` and `SLOWLOG`:
//! each argument in double quotes, escaped as Redis's `sdscatrepr`, and
//! bounded, so that a shown command takes a few KiB however big it is.

use bytes::Bytes;

/// Arguments shown per command.
pub const MAX_ARGS: usize = 64;
/// Bytes shown per argument.
pub const MAX_ARG_BYTES: usize = 256;

/// `bytes` cut to `max` bytes, with how many more there were (`"... (12
/// more bytes)"`), as SLOWLOG shows a long argument; as it is if not longer.
pub fn cut(bytes: &[u8], max: usize) -> std::borrow::Cow<'_, [u8]> {
    if bytes.len() <= max {
        return std::borrow::Cow::Borrowed(bytes);
    }
    let mut kept = bytes[..max].to_vec();
    kept.extend_from_slice(format!("... ({} more bytes)", bytes.len() - max).as_bytes());
    std::borrow::Cow::Owned(kept)
}

/// Whether `MONITOR` shows a `name` command flagged `flags`: never one
/// flagged `admin`, nor `skip_monitor` but for the scripts themselves
/// (`EVAL`, `FCALL`, shown as Redis shows them).
pub fn shown_to_monitors(name: &str, flags: &[&str]) -> bool {
    !(flags.contains(&"admin")
        || (flags.contains(&"skip_monitor") && !name.starts_with("eval") && !name.starts_with("fcall")))
}

/// `argv` (a `name` command) as a monitor line shows it after its prefix:
/// each argument after a space, in quotes; past `MAX_ARGS` arguments and
/// `MAX_ARG_BYTES` bytes in one, the rest counted (`"... (3 more
/// arguments)"`); passwords (`AUTH`'s, `HELLO`'s) as `"(redacted)"`.
pub fn monitor_args(name: &str, argv: &[Bytes]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, arg) in argv.iter().enumerate() {
        out.push(b' ');
        if i == MAX_ARGS {
            quote(&mut out, format!("... ({} more arguments)", argv.len() - MAX_ARGS).as_bytes());
            break;
        }
        if redacted(name, argv, i) {
            out.extend_from_slice(b"\"(redacted)\"");
        } else {
            quote(&mut out, &cut(arg, MAX_ARG_BYTES));
        }
    }
    out
}

/// Which arguments of `argv` (a `name` command) are shown as `(redacted)`.
fn redacted(name: &str, argv: &[Bytes], i: usize) -> bool {
    match name {
        "auth" => i > 0,
        // HELLO [protover [AUTH username password] [SETNAME clientname]]
        "hello" => argv[..i].iter().rev().take(2).any(|a| a.eq_ignore_ascii_case(b"auth")) && i >= 3,
        _ => false,
    }
}

/// `bytes` in double quotes, escaped as Redis's `sdscatrepr`.
fn quote(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', b]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}
