#!/usr/bin/env python3
"""Record real Redis replies for tests/recorded.rs (issue 17).

Usage:  python3 tests/data/redis7/record.py [NAME ...]

For every tests/data/redis7/*.cmds file (or only the NAMEs given, e.g. `sets`),
this starts a private, throw-away `redis-server` (the one on PATH; Debian's is
/usr/bin/redis-server) on a free 127.0.0.1 port with `--save '' --appendonly no`,
connects with the small raw-socket RESP client below (stdlib only, no redis-py),
sends HELLO 2 (RESP2) and FLUSHALL, then sends each command of the file in order
and writes <name>.expected next to it. A fresh server is used per file, so a
CONFIG SET in one file cannot change what another file records.

.cmds syntax, one item per line:
    # comment              ignored
    (blank)                ignored
    SADD s1 a b            a command, split shell-style with shlex
    ~ SMEMBERS s1          the reply's order is unspecified: tests compare it as a
                           multiset (see "unordered" below)
    \\n FUNCTION LOAD "#!lua name=l\\nreturn 1"
                           each two characters backslash-n in the arguments is a
                           line feed (Lua libraries need one after their first line)
    HELLO 3                switches the connection to RESP3 for the rest of the file;
                           its reply is recorded but marked "skip_compare" (it holds
                           server name, version, connection id)

.expected format, JSON lines (ASCII only; json.dumps ensure_ascii):
    line 1: {"redis_version": "7.0.15"}
    then, one per command:
    {"line": N, "cmd": [args...], "reply": "<raw RESP bytes>"[, "unordered": true]
     [, "skip_compare": true]}
    "line" is the command's line number in the .cmds file. "cmd" args and "reply"
    are byte strings written as latin-1 strings (each char is one byte, U+0000 to
    U+00FF); args are the UTF-8 bytes of the shlex token. "reply" is exactly the
    bytes the server sent for that command (RESP2 unless after HELLO 3).

"unordered": true means: parse both replies; in each, every array/set whose
items are all scalars (strings, integers, nils, ...) -- the innermost arrays --
is sorted, and map entries are sorted by key; then they must be equal. So an
SSCAN reply [cursor, [members]] keeps its cursor in place and compares the
members as a multiset; the outer array's order still matters.
"""

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def find_redis_server():
    """The redis-server binary; waits up to 15 min (checking every 30 s) while
    another process may still be installing it with apt."""
    deadline = time.time() + 15 * 60
    while True:
        path = shutil.which("redis-server")
        if path:
            return path
        if time.time() >= deadline:
            sys.exit("redis-server not found on PATH after waiting 15 minutes")
        print("redis-server not found yet; checking again in 30 s", file=sys.stderr)
        time.sleep(30)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# Raw RESP client
# ---------------------------------------------------------------------------

def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n" % len(a))
        out.append(a)
        out.append(b"\r\n")
    return b"".join(out)


def reply_end(buf, pos):
    """End offset of the one complete RESP2/RESP3 value starting at buf[pos],
    or None if buf does not hold all of it yet."""
    if pos >= len(buf):
        return None
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        return None
    t = buf[pos:pos + 1]
    line = buf[pos + 1:eol]
    nxt = eol + 2
    if t in (b"+", b"-", b":", b"_", b"#", b",", b"("):
        return nxt
    if t in (b"$", b"!", b"="):
        n = int(line)
        if n < 0:
            return nxt
        if len(buf) < nxt + n + 2:
            return None
        if buf[nxt + n:nxt + n + 2] != b"\r\n":
            raise ValueError("blob not terminated by CRLF at %d" % (nxt + n))
        return nxt + n + 2
    if t in (b"*", b"~", b">", b"%", b"|"):
        n = int(line)
        if n < 0:
            return nxt
        if t in (b"%", b"|"):
            n *= 2
        for _ in range(n):
            nxt = reply_end(buf, nxt)
            if nxt is None:
                return None
        if t == b"|":
            # An attribute precedes the actual reply: keep both.
            return reply_end(buf, nxt)
        return nxt
    raise ValueError("unexpected RESP type byte %r at %d" % (t, pos))


class Conn:
    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def command(self, args):
        """Send one command (list of bytes); return the raw bytes of one reply."""
        self.sock.sendall(encode(args))
        while True:
            end = reply_end(self.buf, 0)
            if end is not None:
                raw, self.buf = self.buf[:end], self.buf[end:]
                return raw
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    def close(self):
        self.sock.close()


# ---------------------------------------------------------------------------
# Private redis-server
# ---------------------------------------------------------------------------

class Server:
    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="raftlock-record-")
        self.port = free_port()
        self.log = open(os.path.join(self.dir, "redis.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir,
             "--daemonize", "no", "--protected-mode", "yes"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                sys.exit("redis-server exited early; log in " + self.log.name)
            try:
                c = Conn(self.port, timeout=2)
                if c.command([b"PING"]) == b"+PONG\r\n":
                    c.close()
                    return
                c.close()
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                sys.exit("redis-server did not answer PING within 20 s")
            time.sleep(0.05)

    def version(self):
        c = Conn(self.port)
        raw = c.command([b"INFO", b"server"]).decode("latin-1")
        c.close()
        for line in raw.split("\r\n"):
            if line.startswith("redis_version:"):
                return line.split(":", 1)[1]
        return "unknown"

    def stop(self):
        if self.proc.poll() is None:
            try:
                c = Conn(self.port, timeout=2)
                c.sock.sendall(encode([b"SHUTDOWN", b"NOSAVE"]))
                c.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------

def parse_cmds(path):
    """[(line number, args as bytes list, unordered)] of a .cmds file."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            unordered = escaped = False
            if text.startswith("~ "):
                unordered = True
                text = text[2:].strip()
            if text.startswith("\\n "):
                escaped = True
                text = text[3:].strip()
            try:
                words = shlex.split(text)
            except ValueError as e:
                sys.exit("%s:%d: cannot split %r: %s" % (path, n, text, e))
            if not words:
                sys.exit("%s:%d: empty command" % (path, n))
            if escaped:
                words = [w.replace("\\n", "\n") for w in words]
            out.append((n, [w.encode("utf-8") for w in words], unordered))
    return out


def record(binary, name):
    cmds_path = os.path.join(HERE, name + ".cmds")
    exp_path = os.path.join(HERE, name + ".expected")
    commands = parse_cmds(cmds_path)
    server = Server(binary)
    try:
        version = server.version()
        c = Conn(server.port)
        hello = c.command([b"HELLO", b"2"])
        assert hello.startswith(b"*"), hello
        assert c.command([b"FLUSHALL"]) == b"+OK\r\n"
        lines = [json.dumps({"redis_version": version})]
        errors = unknown = 0
        for n, args, unordered in commands:
            raw = c.command(args)
            rec = {
                "line": n,
                "cmd": [a.decode("latin-1") for a in args],
                "reply": raw.decode("latin-1"),
            }
            if unordered:
                rec["unordered"] = True
            if args[0].upper() == b"HELLO":
                rec["skip_compare"] = True
            if raw.startswith(b"-"):
                errors += 1
                if raw.startswith(b"-ERR unknown command"):
                    unknown += 1
            lines.append(json.dumps(rec, ensure_ascii=True))
        c.close()
    finally:
        server.stop()
    with open(exp_path, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print("%-14s %4d commands (%d error replies%s) -> %s" % (
        name, len(commands), errors,
        ", %d unknown command!" % unknown if unknown else "",
        os.path.relpath(exp_path)))
    return version


def main():
    binary = find_redis_server()
    names = sys.argv[1:] or sorted(
        f[:-len(".cmds")] for f in os.listdir(HERE) if f.endswith(".cmds"))
    if not names:
        sys.exit("no .cmds files in " + HERE)
    versions = set()
    for name in names:
        versions.add(record(binary, name))
    print("recorded against redis-server %s (%s)" % (", ".join(sorted(versions)), binary))


if __name__ == "__main__":
    main()
