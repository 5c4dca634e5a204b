#!/usr/bin/env python3
"""Generate src/commands/redis_specs.rs from a real Redis 7's COMMAND INFO.

Usage:  python3 tests/data/redis7/command_specs.py

Starts a private, throw-away `redis-server` (the one on PATH, Debian's 7.0.15
here) on a free port, reads COMMAND INFO for every command and subcommand, and
writes two tables of facts about Redis's interface that raftlock reports as
Redis does:
  - SUBCOMMANDS: each container's subcommands (`config|get`): arity, flags,
    key positions (COMMAND LIST, COMMAND INFO);
  - KEY_SPECS: each command's key specs, as where each begins and its flags
    (COMMAND GETKEYSANDFLAGS).
Containers raftlock does not have, and subcommands it does not serve, are left
out (LEFT_OUT); subcommands Redis 7.2 added that raftlock serves are added
(ADDED, with 7.2's arity and flags).
"""
import os
import socket
import subprocess
import tempfile
import time

LEFT_OUT = {"cluster", "script|debug"}
ADDED = [
    # (name, arity, flags, first, last, step) as Redis 7.2 reports them.
    ("client|no-touch", 3, ["noscript", "loading", "stale"], 0, 0, 0),
    ("client|setinfo", 4, ["noscript", "loading", "stale"], 0, 0, 0),
]

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "..", "src", "commands", "redis_specs.rs")


def enc(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def cmd(self, *args):
        self.s.sendall(enc(*args))
        return self.read()

    def read(self):
        line = self.f.readline()[:-2]
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected {line!r}")


def pairs(flat):
    return dict(zip(flat[0::2], flat[1::2]))


def begin_of(spec):
    begin = pairs(spec["begin_search"])
    detail = pairs(begin["spec"]) if begin["spec"] else {}
    if begin["type"] == "index":
        return f"Begin::Index({detail['index']})"
    if begin["type"] == "keyword":
        return f"Begin::Keyword({detail['keyword']!r})".replace("'", '"')
    return "Begin::Unknown"


def main():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        server = subprocess.Popen(
            ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", d],
            stdout=subprocess.DEVNULL,
        )
        try:
            for _ in range(100):
                try:
                    conn = Conn(port)
                    conn.cmd("PING")
                    break
                except OSError:
                    time.sleep(0.05)
            version = pairs(conn.cmd("HELLO", "2"))["version"]
            infos = conn.cmd("COMMAND")
        finally:
            server.terminate()
            server.wait()
    rows, specs = [], []
    for info in sorted(infos, key=lambda i: i[0]):
        name = info[0]
        if name in LEFT_OUT:
            continue
        entries = [info] + sorted(info[9] or [], key=lambda i: i[0])
        for entry in entries:
            full = entry[0]
            if full in LEFT_OUT:
                continue
            if "|" in full:
                rows.append((full, entry[1], entry[2], entry[3], entry[4], entry[5]))
            key_specs = [pairs(s) for s in entry[8] or []]
            if key_specs:
                specs.append((full, [(begin_of(s), s["flags"]) for s in key_specs]))
    rows += ADDED
    rows.sort()
    quote = lambda items: "&[" + ", ".join(f'"{i}"' for i in items) + "]"
    out = [
        f"//! Facts about Redis {version}'s commands that raftlock reports as Redis does,",
        "//! generated from its COMMAND INFO by `tests/data/redis7/command_specs.py`",
        "//! (do not edit by hand): each container's subcommands (`COMMAND LIST`,",
        "//! `COMMAND INFO config|get`) and each command's key specs (`COMMAND",
        "//! GETKEYSANDFLAGS`).",
        "",
        "/// Where a key spec's keys begin.",
        "#[derive(Debug, Clone, Copy, PartialEq, Eq)]",
        "pub enum Begin {",
        "    /// At this argument.",
        "    Index(usize),",
        "    /// After this keyword.",
        "    Keyword(&'static str),",
        "    /// Where an option puts them (`SORT ... STORE`).",
        "    Unknown,",
        "}",
        "",
        "/// One subcommand, as `COMMAND INFO` describes it.",
        "pub struct Subcommand {",
        "    /// `container|subcommand`.",
        "    pub name: &'static str,",
        "    pub arity: i64,",
        "    pub flags: &'static [&'static str],",
        "    pub first_key: i64,",
        "    pub last_key: i64,",
        "    pub key_step: i64,",
        "}",
        "",
        "pub const SUBCOMMANDS: &[Subcommand] = &[",
    ]
    for name, arity, flags, first, last, step in rows:
        out.append(
            f'    Subcommand {{ name: "{name}", arity: {arity}, flags: {quote(flags)}, '
            f"first_key: {first}, last_key: {last}, key_step: {step} }},"
        )
    out += [
        "];",
        "",
        "/// Where a key spec's keys begin, and its flags.",
        "pub type KeySpec = (Begin, &'static [&'static str]);",
        "",
        "/// Each command's key specs.",
        "pub const KEY_SPECS: &[(&str, &[KeySpec])] = &[",
    ]
    for name, items in specs:
        inner = ", ".join(f"({b}, {quote(f)})" for b, f in items)
        out.append(f'    ("{name}", &[{inner}]),')
    out += ["];", ""]
    with open(OUT, "w") as f:
        f.write("\n".join(out))
    print(f"{len(rows)} subcommands, {len(specs)} commands with key specs -> {os.path.normpath(OUT)} (Redis {version})")


if __name__ == "__main__":
    main()
