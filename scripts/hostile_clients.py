#!/usr/bin/env python3
"""Clients that try to hurt the others (issue 14's limits), measured.

    scripts/hostile_clients.py [--gigabytes 1] [--seconds 180] [--port P]

Starts a one-node raftlock on free ports (or uses --port), then runs at once:
  - a pinger: PING, wait for PONG, again, on one connection; its latency is
    what the other clients must not spoil;
  - a pipeliner: writes --gigabytes of pipelined `SET` commands (1 KiB
    values, a few keys) as fast as the server takes them, reading the
    replies on another thread, as redis-cli --pipe does;
  - a stuck client: pipelines 256 MiB of `GET` and never reads a reply;
  - a slow subscriber: SUBSCRIBE, then never reads, while a publisher sends
    1 KiB messages to its channel as fast as it can.
It samples the server's resident memory every 100 ms and prints one summary:
PING p50/p99/max, bytes the pipeliner got through, whether the slow
subscriber was disconnected, the stuck client's fate, and the RSS before,
at most, and after. The server's own limits are what keep the RSS bounded:
a client whose replies are not read is not read from either (its requests
wait in the kernel's socket buffers), and a subscriber too far behind is
disconnected.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def connect(port, timeout=None):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gigabytes", type=float, default=1.0)
    p.add_argument("--seconds", type=float, default=180.0, help="stop everything after this long")
    p.add_argument("--port", type=int, help="use a running server instead of starting one")
    p.add_argument("--pid", type=int, help="its pid, for the RSS (with --port)")
    p.add_argument("--only", default="pipeliner,stuck,subscriber", help="which hostile clients to run")
    p.add_argument("--binary", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "/var/tmp/raftlock-target"), "release", "raftlock"))
    args = p.parse_args()

    server = None
    workdir = None
    if args.port:
        port, pid = args.port, args.pid
    else:
        port, peer = free_ports(2)
        workdir = tempfile.mkdtemp(prefix="raftlock-hostile-")
        log = open(os.path.join(workdir, "server.log"), "w")
        server = subprocess.Popen([args.binary, "--port", str(port), "--peer-port", str(peer), "--data-dir",
                                   os.path.join(workdir, "data"), "--metrics-addr", "off"], stdout=log, stderr=log)
        pid = server.pid
        deadline = time.time() + 30
        while True:
            try:
                s = connect(port, 2)
                s.sendall(resp("SET", "ready", "1"))
                if s.recv(64).startswith(b"+OK"):
                    s.close()
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("the server did not start; see %s" % workdir)
            time.sleep(0.1)

    stop = threading.Event()
    end = time.time() + args.seconds
    result = {}
    rss = {"before": rss_kib(pid) if pid else None, "max": 0, "samples": 0}

    def sampler():
        while not stop.is_set():
            r = rss_kib(pid) if pid else None
            if r:
                rss["max"] = max(rss["max"], r)
                rss["samples"] += 1
            time.sleep(0.1)

    lat = []

    def pinger():
        s = connect(port, 30)
        while not stop.is_set():
            t = time.perf_counter()
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            got = b""
            while not got.endswith(b"\r\n"):
                chunk = s.recv(64)
                if not chunk:
                    result["pinger"] = "disconnected"
                    return
                got += chunk
            lat.append(time.perf_counter() - t)
            time.sleep(0.001)

    def pipeliner():
        s = connect(port)
        target = int(args.gigabytes * (1 << 30))
        value = b"v" * 1024
        batch = b"".join(resp("SET", "pipe:%d" % (i % 16), value) for i in range(256))
        state = {"sent": 0, "commands": None, "replies": 0}

        def reader():
            while state["commands"] is None or state["replies"] < state["commands"]:
                try:
                    chunk = s.recv(1 << 20)
                except OSError:
                    break
                if not chunk:
                    break
                state["replies"] += chunk.count(b"\n")  # one per "+OK\r\n"

        r = threading.Thread(target=reader, daemon=True)
        r.start()
        start = time.time()
        commands = 0
        try:
            while state["sent"] < target and time.time() < end:
                s.sendall(batch)
                state["sent"] += len(batch)
                commands += 256
        except OSError as e:
            result["pipeliner_error"] = str(e)
        state["commands"] = commands
        r.join(timeout=max(1.0, end - time.time()))
        secs = time.time() - start
        result["pipeliner"] = "sent %.2f GiB (%d SETs) in %.1f s (%.0f MB/s), %d replies read" % (
            state["sent"] / (1 << 30), commands, secs, state["sent"] / secs / 1e6, state["replies"])
        s.close()

    def stuck():
        s = connect(port)
        s.settimeout(5)
        sent = 0
        batch = b"".join(resp("GET", "pipe:%d" % i) for i in range(1000))
        try:
            while sent < 256 << 20 and time.time() < end:
                s.sendall(batch)
                sent += len(batch)
            result["stuck"] = "sent all %d MiB without reading" % (sent >> 20)
        except socket.timeout:
            result["stuck"] = "the server stopped reading after %d MiB (its replies were not read)" % (sent >> 20)
        except OSError as e:
            result["stuck"] = "disconnected after %d MiB: %s" % (sent >> 20, e)
        stop.wait(max(0.0, end - time.time()) if not stop.is_set() else 0)
        s.close()

    def slow_subscriber():
        sub = connect(port)
        sub.sendall(resp("SUBSCRIBE", "hostile"))
        time.sleep(0.5)
        pub = connect(port, 30)
        msg = b"m" * 1024
        batch = b"".join(resp("PUBLISH", "hostile", msg) for _ in range(100))
        published = 0
        t0 = time.time()
        while published < 50000 and time.time() < min(end, t0 + 60) and not stop.is_set():
            pub.sendall(batch)
            got = 0
            while got < 100:
                chunk = pub.recv(65536)
                if not chunk:
                    break
                got += chunk.count(b"\n")
            published += 100
        # Drain what the kernel holds for the subscriber; EOF means it was disconnected.
        sub.settimeout(5)
        total = 0
        closed = False
        try:
            while True:
                chunk = sub.recv(1 << 20)
                if not chunk:
                    closed = True
                    break
                total += len(chunk)
        except socket.timeout:
            pass
        result["subscriber"] = "%s after %d messages published (%.1f MiB reached it)" % (
            "disconnected" if closed else "STILL CONNECTED", published, total / (1 << 20))
        pub.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (sampler, pinger)]
    chosen = {"pipeliner": pipeliner, "stuck": stuck, "subscriber": slow_subscriber}
    workers = [threading.Thread(target=chosen[n], daemon=True) for n in args.only.split(",")]
    for t in threads + workers:
        t.start()
    for t in workers:
        t.join(timeout=max(1.0, end - time.time() + 10))
    stop.set()
    for t in threads:
        t.join(timeout=5)
    time.sleep(1)
    after = rss_kib(pid) if pid else None

    lat.sort()
    pct = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")
    print("PING while hostile clients ran: %d pings, p50 %.2f ms, p99 %.2f ms, max %.2f ms%s" % (
        len(lat), pct(0.5), pct(0.99), pct(1.0), "" if "pinger" not in result else " (" + result["pinger"] + ")"))
    print("pipeliner: %s%s" % (result.get("pipeliner"), (" (" + result["pipeliner_error"] + ")") if "pipeliner_error" in result else ""))
    print("stuck client: %s" % result.get("stuck"))
    print("slow subscriber: %s" % result.get("subscriber"))
    if rss["before"]:
        print("server RSS: before %.0f MiB, max %.0f MiB (%d samples), after %.0f MiB" % (
            rss["before"] / 1024, rss["max"] / 1024, rss["samples"], (after or 0) / 1024))
    if server:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
