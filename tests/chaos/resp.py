"""A small blocking RESP2 client for the chaos harness: one socket, explicit
timeouts, and errors that say whether the request could have reached the
server (which decides between a `fail` and an `unknown` in the history)."""

import socket


class NotSent(Exception):
    """The request never left this process: it cannot have taken effect."""


class Lost(Exception):
    """The request may have reached the server; its outcome is unknown."""


class ReplyError(Exception):
    """An error reply (`-ERR ...`)."""


class Conn:
    def __init__(self, host, port, timeout=4.0, connect_timeout=1.0):
        self.addr = (host, port)
        self.timeout = timeout
        try:
            self.sock = socket.create_connection(self.addr, timeout=connect_timeout)
        except OSError as e:
            raise NotSent(f"connect: {e}") from None
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        try:
            self.sock.sendall(b"".join(out))
        except OSError as e:
            raise Lost(f"send: {e}") from None

    def call(self, *args):
        """Sends a command and returns its reply; an error reply is returned as
        a ReplyError instance (not raised)."""
        self.send(*args)
        return self.read()

    def _fill(self, enough):
        """Reads until `enough()` holds for the buffer."""
        while not enough():
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise Lost("timeout") from None
            except OSError as e:
                raise Lost(f"recv: {e}") from None
            if not chunk:
                raise Lost("connection closed")
            self.buf += chunk

    def _line(self):
        self._fill(lambda: b"\r\n" in self.buf)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        self._fill(lambda: len(self.buf) >= n + 2)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return ReplyError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise Lost(f"bad reply line {line[:40]!r}")
