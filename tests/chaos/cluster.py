"""The cluster under test: real raftlock processes, each in its own network
namespace (veth pairs on a bridge, iptables for partitions) when this machine
allows it, else on loopback with partitions done by the peer proxies.

Every node runs behind a fault-injecting peer proxy (proxy.py) for delayed and
dropped messages, under libfaketime (its wall clock can jump or drift; its
monotonic clock, and so log time, cannot), and with an fsync shim that makes
fsync fail on demand."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from resp import Conn, NotSent, Lost, ReplyError

HERE = os.path.dirname(os.path.abspath(__file__))

FAILFSYNC_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
/* fsync and fdatasync fail with EIO while the file named by
   RAFTLOCK_FAIL_FSYNC_FILE exists (chaos harness). */
static int failing(void) {
    const char *p = getenv("RAFTLOCK_FAIL_FSYNC_FILE");
    struct stat st;
    return p && stat(p, &st) == 0;
}
int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (failing()) { errno = EIO; return -1; }
    return real(fd);
}
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    if (failing()) { errno = EIO; return -1; }
    return real(fd);
}
"""


def sh(*cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def find_faketime():
    for p in glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1"):
        return p
    return None


def build_failfsync(cache_dir):
    os.makedirs(cache_dir, exist_ok=True)
    so = os.path.join(cache_dir, "failfsync.so")
    src = os.path.join(cache_dir, "failfsync.c")
    if os.path.exists(so) and os.path.exists(src) and open(src).read() == FAILFSYNC_C:
        return so
    with open(src, "w") as f:
        f.write(FAILFSYNC_C)
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        return None
    r = subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl"], capture_output=True, text=True)
    return so if r.returncode == 0 else None


def netns_available():
    name = f"rlprobe{os.getpid() % 100000}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True)
    if r.returncode != 0:
        return False
    ok = subprocess.run(["ip", "netns", "exec", name, "iptables", "-S"], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ok and shutil.which("iptables") is not None


class Node:
    def __init__(self, nid):
        self.id = nid
        self.proc = None
        self.proxy = None
        self.paused = False
        self.ns = None


class Cluster:
    def __init__(self, n, binary, out, seed, log, mode="auto", plant=(), snapshot_logs=300,
                 request_timeout_ms=2000):
        self.n = n
        self.binary = binary
        self.out = out
        self.seed = seed
        self.log = log
        self.plant = list(plant)
        self.snapshot_logs = snapshot_logs
        self.request_timeout_ms = request_timeout_ms
        self.faketime = find_faketime()
        self.failfsync = build_failfsync("/var/tmp/raftlock-chaos/shim")
        if mode == "auto":
            mode = "netns" if os.geteuid() == 0 and netns_available() else "loopback"
        self.mode = mode
        self.tag = os.getpid() % 10000
        self.nodes = {i: Node(i) for i in range(1, n + 1)}
        self.rules_path = os.path.join(out, "net-rules.json")
        self.net_rules = []
        self.partitioned = False
        self._write_rules()
        if mode == "netns":
            self.subnet = f"10.{200 + self.tag % 50}.{self.tag % 250}"
            self.bridge = f"rlc{self.tag}br"
            for node in self.nodes.values():
                node.ns = f"rlc{self.tag}n{node.id}"
                node.host = f"{self.subnet}.{10 + node.id}"
                node.port, node.peer_port, node.proxy_port = 6379, 16379, 17000
        else:
            base = 20000 + (self.tag % 400) * 100
            for node in self.nodes.values():
                node.host = "127.0.0.1"
                node.port = base + node.id
                node.peer_port = base + 30 + node.id
                node.proxy_port = base + 60 + node.id
        self.secret = f"chaos-{seed}"

    # ----- setup and teardown -----

    def setup(self):
        if self.mode == "netns":
            self._teardown_net()
            sh("ip", "link", "add", self.bridge, "type", "bridge")
            sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")
            for node in self.nodes.values():
                veth, inner = f"rlc{self.tag}v{node.id}", f"rlc{self.tag}p{node.id}"
                sh("ip", "netns", "add", node.ns)
                sh("ip", "link", "add", veth, "type", "veth", "peer", "name", inner)
                sh("ip", "link", "set", inner, "netns", node.ns)
                sh("ip", "-n", node.ns, "link", "set", inner, "name", "eth0")
                sh("ip", "-n", node.ns, "addr", "add", f"{node.host}/24", "dev", "eth0")
                sh("ip", "-n", node.ns, "link", "set", "eth0", "up")
                sh("ip", "-n", node.ns, "link", "set", "lo", "up")
                sh("ip", "link", "set", veth, "master", self.bridge)
                sh("ip", "link", "set", veth, "up")
        for node in self.nodes.values():
            self._start_proxy(node)
        for node in self.nodes.values():
            self.start(node.id)

    def _teardown_net(self):
        for node in self.nodes.values():
            if node.ns:
                sh("ip", "netns", "del", node.ns, check=False)
        if self.mode == "netns":
            sh("ip", "link", "del", self.bridge, check=False)

    def teardown(self):
        for node in self.nodes.values():
            if node.proc and node.proc.poll() is None:
                if node.paused:
                    os.kill(node.proc.pid, signal.SIGCONT)
                node.proc.kill()
                node.proc.wait()
            if node.proxy and node.proxy.poll() is None:
                node.proxy.kill()
                node.proxy.wait()
        self._teardown_net()

    def _in_ns(self, node, cmd):
        return (["ip", "netns", "exec", node.ns] + cmd) if node.ns else cmd

    def _start_proxy(self, node):
        cmd = [sys.executable, os.path.join(HERE, "proxy.py"),
               "--listen", f"{node.host}:{node.proxy_port}", "--target", f"{node.host}:{node.peer_port}",
               "--node", str(node.id), "--rules", self.rules_path, "--seed", str(self.seed * 31 + node.id)]
        logf = open(os.path.join(self.out, f"proxy-{node.id}.log"), "a")
        node.proxy = subprocess.Popen(self._in_ns(node, cmd), stdout=subprocess.PIPE, stderr=logf, text=True)
        line = node.proxy.stdout.readline()
        if "ready" not in line:
            raise RuntimeError(f"proxy for node {node.id} did not start")

    # ----- nodes -----

    def client_addr(self, nid):
        node = self.nodes[nid]
        return node.host, node.port

    def initial_cluster(self):
        return ",".join(f"{n.id}={n.host}:{n.proxy_port}/{n.host}:{n.port}" for n in self.nodes.values())

    def start(self, nid):
        node = self.nodes[nid]
        if node.proc and node.proc.poll() is None:
            return
        data = os.path.join(self.out, f"data-{nid}")
        cmd = [self.binary, "--node-id", str(nid), "--bind", node.host, "--port", str(node.port),
               "--peer-port", str(node.peer_port), "--data-dir", data, "--metrics-addr", "off",
               "--initial-cluster", self.initial_cluster(), "--cluster-secret", self.secret,
               # Clients reach the nodes' namespaces from outside their loopback.
               "--protected-mode", "no",
               "--audit-log", os.path.join(self.out, f"audit-{nid}.jsonl"),
               "--snapshot-logs", str(self.snapshot_logs),
               "--request-timeout-ms", str(self.request_timeout_ms)]
        for bug in self.plant:
            cmd += ["--plant-bug", bug]
        env = dict(os.environ)
        env["RUST_LOG"] = env.get("RUST_LOG", "info,openraft=warn")
        preload = []
        if self.faketime:
            ft = os.path.join(self.out, f"faketime-{nid}")
            if not os.path.exists(ft):
                with open(ft, "w") as f:
                    f.write("+0\n")
            preload.append(self.faketime)
            env.update(FAKETIME_TIMESTAMP_FILE=ft, FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_CACHE_DURATION="1")
        if self.failfsync:
            preload.append(self.failfsync)
            env["RAFTLOCK_FAIL_FSYNC_FILE"] = os.path.join(self.out, f"failfsync-{nid}")
        if preload:
            env["LD_PRELOAD"] = ":".join(preload)
        logf = open(os.path.join(self.out, f"node-{nid}.log"), "a")
        node.proc = subprocess.Popen(self._in_ns(node, cmd), stdout=logf, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        node.paused = False
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                raise RuntimeError(f"node {nid} exited at start (code {node.proc.returncode}); see node-{nid}.log")
            try:
                c = Conn(node.host, node.port, timeout=1)
                c.close()
                return
            except NotSent:
                time.sleep(0.05)
        raise RuntimeError(f"node {nid} did not listen within 15 s")

    def alive(self, nid):
        node = self.nodes[nid]
        return node.proc is not None and node.proc.poll() is None

    def kill(self, nid):
        node = self.nodes[nid]
        if self.alive(nid):
            node.proc.kill()
            node.proc.wait()
        node.paused = False

    def pause(self, nid):
        node = self.nodes[nid]
        if self.alive(nid) and not node.paused:
            os.kill(node.proc.pid, signal.SIGSTOP)
            node.paused = True

    def resume(self, nid):
        node = self.nodes[nid]
        if self.alive(nid) and node.paused:
            os.kill(node.proc.pid, signal.SIGCONT)
        node.paused = False

    # ----- network -----

    def _write_rules(self):
        tmp = self.rules_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"rules": self.net_rules}, f)
        os.replace(tmp, self.rules_path)

    def set_link_rules(self, rules):
        """Delay/drop rules for the proxies: [{"from", "to", "drop", "delay_ms"}]."""
        self.net_rules = [r for r in self.net_rules if r.get("block")] + list(rules)
        self._write_rules()

    def cut(self, pairs):
        """Drops every packet from a to b for each (a, b) in pairs."""
        self.partitioned = True
        if self.mode == "netns":
            for a, b in pairs:
                sh("ip", "netns", "exec", self.nodes[b].ns, "iptables", "-A", "INPUT", "-s", self.nodes[a].host,
                   "-j", "DROP")
        else:
            self.net_rules += [{"from": a, "to": b, "block": True} for a, b in pairs]
            self._write_rules()

    def partition(self, groups):
        """Two-way partition between the given groups of node ids."""
        pairs = []
        for g in groups:
            for h in groups:
                if g is not h:
                    pairs += [(a, b) for a in g for b in h]
        self.cut(pairs)

    def heal_network(self):
        if self.mode == "netns":
            for node in self.nodes.values():
                sh("ip", "netns", "exec", node.ns, "iptables", "-F", "INPUT", check=False)
        self.net_rules = []
        self.partitioned = False
        self._write_rules()

    # ----- clocks and disks -----

    def set_clock(self, nid, spec):
        """A libfaketime spec for the node's wall clock: "+30s", "-10s", "+0 x2"."""
        if not self.faketime:
            return False
        path = os.path.join(self.out, f"faketime-{nid}")
        with open(path + ".tmp", "w") as f:
            f.write(spec + "\n")
        os.replace(path + ".tmp", path)
        return True

    def fail_fsync(self, nid, on):
        path = os.path.join(self.out, f"failfsync-{nid}")
        if on:
            open(path, "w").close()
        elif os.path.exists(path):
            os.unlink(path)

    def heal_all(self):
        self.heal_network()
        for nid in self.nodes:
            self.set_clock(nid, "+0")
            self.fail_fsync(nid, False)
            self.resume(nid)
        for nid in self.nodes:
            if not self.alive(nid):
                self.start(nid)

    # ----- queries -----

    def command(self, nid, *args, timeout=2.0):
        host, port = self.client_addr(nid)
        c = Conn(host, port, timeout=timeout)
        try:
            return c.call(*args)
        finally:
            c.close()

    def raft_info(self, nid):
        try:
            text = self.command(nid, "RAFT.INFO", timeout=1.0)
        except (NotSent, Lost):
            return None
        if isinstance(text, ReplyError) or text is None:
            return None
        if text.startswith("txt:"):
            text = text[4:]
        fields = {}
        for line in text.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k] = v
        return fields

    def leader(self):
        """The id of the leader with the highest term among reachable nodes."""
        best = None
        for nid in self.nodes:
            if not self.alive(nid) or self.nodes[nid].paused:
                continue
            info = self.raft_info(nid)
            if info and info.get("role") == "leader":
                term = int(info.get("term", 0))
                if best is None or term > best[0]:
                    best = (term, nid)
        return best[1] if best else None

    def wait_leader(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lid = self.leader()
            if lid is not None:
                return lid
            time.sleep(0.1)
        return None

    def wait_converged(self, timeout=40):
        """Waits until every node answers RAFT.DIGEST with the same index and
        digest twice in a row; returns {id: [index, digest]} (last seen)."""
        deadline = time.monotonic() + timeout
        last, stable = None, 0
        seen = {}
        while time.monotonic() < deadline:
            seen = {}
            for nid in self.nodes:
                try:
                    r = self.command(nid, "RAFT.DIGEST", timeout=1.0)
                    if isinstance(r, list):
                        seen[str(nid)] = [r[0], r[1]]
                except (NotSent, Lost):
                    pass
            values = {tuple(v) for v in seen.values()}
            if len(seen) == self.n and len(values) == 1:
                if values == last:
                    stable += 1
                    if stable >= 2:
                        return seen
                else:
                    stable = 0
                last = values
            else:
                last, stable = None, 0
            time.sleep(0.5)
        return seen
