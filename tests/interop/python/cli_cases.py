"""redis-cli, interactive in a tmux pane, and redis-benchmark, against raftlock.

Uses only the standard library (runs on the system python3):
    python3 cli_cases.py --port P --check-port C --tmux-socket NAME
"""

import re
import shutil
import subprocess
import sys
import time
import uuid

from harness import CaseFail, Harness, Plain, common_args, expect, unique


def version(tool):
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else "?"


class Pane:
    """redis-cli in a detached tmux session on a private tmux server socket."""

    def __init__(self, socket_name, port):
        self.sock = socket_name
        self.session = "cli-%s" % uuid.uuid4().hex[:6]
        self.prompt = "127.0.0.1:%d> " % port
        self.prompt_re = re.compile(r"^127\.0\.0\.1:%d(\[\d+\])?>( |$)" % port)
        self.tmux("new-session", "-d", "-s", self.session, "-x", "220", "-y", "50",
                  "redis-cli -h 127.0.0.1 -p %d" % port)
        self.tmux("set-option", "-t", self.session, "remain-on-exit", "on")
        self.wait(lambda lines: any(self.prompt_re.match(l) for l in lines), 10, "the first prompt")

    def tmux(self, *args):
        r = subprocess.run(["tmux", "-L", self.sock] + list(args), capture_output=True, text=True, timeout=10)
        if r.returncode != 0:
            raise CaseFail("tmux %s failed: %s" % (args[0], r.stderr.strip()))
        return r.stdout

    def lines(self):
        out = self.tmux("capture-pane", "-p", "-J", "-S", "-2000", "-t", self.session)
        return [l.rstrip() for l in out.splitlines()]

    def dead(self):
        out = self.tmux("display-message", "-p", "-t", self.session, "#{pane_dead} #{pane_dead_status}")
        return out.strip()

    def wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self.lines()
            if pred(lines):
                return lines
            time.sleep(0.05)
        shown = [l for l in self.lines() if l.strip()]
        raise CaseFail("redis-cli: no %s within %d s; screen ends with: %r (pane dead: %s)"
                       % (what, timeout, shown[-6:], self.dead()))

    def run(self, command, timeout=10):
        """Type `command` + Enter; return the reply lines shown before the next prompt."""
        # The command is typed on the last prompt; its reply is complete when one
        # more prompt has appeared below it.
        before = sum(1 for l in self.lines() if self.prompt_re.match(l))
        self.tmux("send-keys", "-t", self.session, "-l", command)
        self.tmux("send-keys", "-t", self.session, "Enter")
        lines = self.wait(lambda ls: sum(1 for l in ls if self.prompt_re.match(l)) > before,
                          timeout, "reply to %r" % command)
        idx = [i for i, l in enumerate(lines) if self.prompt_re.match(l)]
        start, end = idx[before - 1], idx[before]
        return "\n".join(lines[start + 1:end]).strip()

    def close(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-session", "-t", self.session],
                       capture_output=True, timeout=10)


def main():
    p = common_args(__doc__)
    p.add_argument("--tmux-socket", required=True)
    args = p.parse_args()
    cli = Harness("redis-cli %s" % version("redis-cli"))
    bench = Harness("redis-benchmark %s" % version("redis-benchmark"))
    plain = Plain(args.check_port)
    port = args.port

    # --- redis-cli, interactive ------------------------------------------------
    pane = None
    state = {}

    def start():
        nonlocal pane
        expect(shutil.which("tmux"), "tmux is not installed")
        pane = Pane(args.tmux_socket, port)
        # redis-cli fetches COMMAND DOCS at start for its hints; a malformed reply
        # would have killed it by now.
        time.sleep(0.3)
        expect(pane.dead().startswith("0"), "redis-cli exited: %s" % pane.dead())
        got = pane.run("PING")
        expect(got == "PONG", "PING shows %r" % got)

    def lock_cycle():
        key = unique(args.prefix, "cli")
        tok = uuid.uuid4().hex
        state["key"] = key
        got = pane.run("SET %s %s NX PX 30000" % (key, tok))
        expect(got == "OK", "SET NX PX shows %r" % got)
        plain.expect_owner(key, tok, 30000)
        got = pane.run("SET %s someone-else NX PX 30000" % key)
        expect(got == "(nil)", "a second SET NX PX shows %r" % got)
        got = pane.run("GET %s" % key)
        expect(got == '"%s"' % tok, "GET shows %r" % got)
        got = pane.run("PTTL %s" % key)
        m = re.fullmatch(r"\(integer\) (\d+)", got)
        expect(m and 28000 < int(m.group(1)) <= 30000, "PTTL shows %r" % got)
        got = pane.run("LOCK.INFO %s" % key)
        expect(re.search(r'1\) "owner"\s+2\) "%s"\s+3\) "token"\s+4\) \(integer\) \d+' % tok, got),
               "LOCK.INFO shows %r" % got)
        script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
        got = pane.run('EVAL "%s" 1 %s %s' % (script, key, tok))
        expect(got == "(integer) 1", "EVAL release shows %r" % got)
        plain.expect_gone(key)
        got = pane.run("EXISTS %s" % key)
        expect(got == "(integer) 0", "EXISTS shows %r" % got)

    def resp3():
        got = pane.run("HELLO 3")
        expect(re.search(r'1# "server" => "redis"', got) and re.search(r'"proto" => \(integer\) 3', got),
               "HELLO 3 shows %r" % got)
        key = unique(args.prefix, "cli3")
        got = pane.run("SET %s v PX 5000" % key)
        expect(got == "OK", "SET shows %r" % got)
        got = pane.run("LOCK.INFO %s" % key)
        expect(re.search(r'1# "owner" => "v"', got), "LOCK.INFO in RESP3 shows %r" % got)
        got = pane.run("GET %s-missing" % key)
        expect(got == "(nil)", "GET of a missing key shows %r" % got)
        got = pane.run("DEL %s" % key)
        expect(got == "(integer) 1", "DEL shows %r" % got)

    def errors():
        got = pane.run("DPING")
        expect(got.startswith("(error) ERR unknown command 'DPING'"), "DPING shows %r" % got)
        got = pane.run("EVALSHA ffffffffffffffffffffffffffffffffffffffff 0")
        expect(got == "(error) NOSCRIPT No matching script. Please use EVAL.", "EVALSHA shows %r" % got)
        expect(pane.dead().startswith("0"), "redis-cli exited: %s" % pane.dead())

    try:
        cli.case("interactive start (COMMAND DOCS) + PING", start)
        for name, fn in [("SET NX PX / GET / PTTL / LOCK.INFO / EVAL release", lock_cycle),
                         ("HELLO 3 and RESP3 replies", resp3), ("error replies", errors)]:
            if pane is None:
                cli.report(name, False, "redis-cli did not start", time.monotonic())
            else:
                cli.case(name, fn)
    finally:
        if pane is not None:
            pane.close()

    # --- redis-benchmark -------------------------------------------------------
    tests = ["PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "LPUSH", "LPOP"]
    out = {"text": "", "rc": None}

    def run_bench():
        r = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
                            "-t", "ping,set,get,incr,lpush,lpop", "-n", "2000", "-q"],
                           capture_output=True, text=True, timeout=180)
        out["text"] = r.stdout + r.stderr
        out["rc"] = r.returncode
        final = [l.strip() for l in re.split(r"[\r\n]", out["text"]) if l.strip()]
        # Keep the summary lines; progress lines ("SET: rps=...") are overwritten in place.
        bad = [l for l in final if not re.match(r"^[A-Z_]+: (rps=|[\d.]+ requests per second)", l)]
        out["bad"] = bad
        out["done"] = {l.split(":")[0]: l for l in final if "requests per second" in l}
        expect(not bad, "error lines: %r" % bad[:5])
        expect(r.returncode == 0, "exit status %d" % r.returncode)

    bench.case("-t ping,set,get,incr,lpush,lpop -n 2000 -q: no error lines", run_bench)
    for t in tests:
        def one(t=t):
            line = out.get("done", {}).get(t)
            expect(line, "no result line for %s (output: %r)" % (t, out["text"][-300:]))
        bench.case(t, one)

    # --- redis-benchmark's effect on the keyspace ------------------------------
    # Its keys are fixed names (key:<12 digits> with -r, counter:__rand_int__,
    # mylist), so each case first clears them, then checks exactly what the
    # requests must have left.
    def run(*argv):
        r = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-q"] + list(argv),
                           capture_output=True, text=True, timeout=180)
        text = r.stdout + r.stderr
        final = [l.strip() for l in re.split(r"[\r\n]", text) if l.strip()]
        bad = [l for l in final if not re.match(r"^[A-Z_]+: (rps=|[\d.]+ requests per second)", l)]
        expect(not bad, "redis-benchmark %s: error lines: %r" % (" ".join(argv), bad[:5]))
        expect(r.returncode == 0, "redis-benchmark %s: exit status %d" % (" ".join(argv), r.returncode))

    def clear(pattern):
        keys = plain.cmd("KEYS", pattern)
        if keys:
            plain.cmd("DEL", *keys)
        expect(plain.cmd("KEYS", pattern) == [], "could not clear %s" % pattern)

    def set_r():
        # 5000 SETs over 100 random key names: every one of the 100 is written (the
        # chance that one is missed is about 1e-20), no other key:* appears, and all
        # hold the run's one 3-byte payload.
        clear("key:*")
        run("-t", "set", "-n", "5000", "-r", "100")
        keys = sorted(k.decode() for k in plain.cmd("KEYS", "key:*"))
        want = ["key:%012d" % i for i in range(100)]
        expect(keys == want, "KEYS key:* after -r 100: %d keys, extra %r, missing %r"
               % (len(keys), sorted(set(keys) - set(want))[:5], sorted(set(want) - set(keys))[:5]))
        values = set(plain.cmd("MGET", *want))
        expect(len(values) == 1 and all(v is not None and len(v) == 3 for v in values),
               "values of key:*: %r" % sorted(values, key=repr)[:5])

    def incr():
        # 3000 INCRs from 50 concurrent clients on one counter: exactly 3000, none
        # lost and none applied twice.
        plain.cmd("DEL", "counter:__rand_int__")
        run("-t", "incr", "-n", "3000")
        got = plain.cmd("GET", "counter:__rand_int__")
        expect(got == b"3000", "counter after 3000 INCRs = %r" % got)

    def lpush_lpop():
        plain.cmd("DEL", "mylist")
        run("-t", "lpush", "-n", "2000")
        n = plain.cmd("LLEN", "mylist")
        expect(n == 2000, "LLEN mylist after 2000 LPUSHes = %r" % n)
        run("-t", "lpop", "-n", "500")
        n = plain.cmd("LLEN", "mylist")
        expect(n == 1500, "LLEN mylist after 2000 LPUSHes and 500 LPOPs = %r" % n)

    def dbsize():
        # DBSIZE and KEYS * in one transaction (one log entry, one point in log
        # time): the count is the number of keys listed, and the benchmark's keys
        # are among them.
        plain.cmd("MULTI")
        plain.cmd("DBSIZE")
        plain.cmd("KEYS", "*")
        n, keys = plain.cmd("EXEC")
        expect(n == len(keys) == len(set(keys)), "DBSIZE %r but KEYS * lists %d (%d distinct)"
               % (n, len(keys), len(set(keys))))
        names = set(keys)
        missing = [k for k in [b"counter:__rand_int__", b"mylist"] + [b"key:%012d" % i for i in range(100)]
                   if k not in names]
        expect(not missing, "KEYS * lacks %r" % missing[:5])

    for name, fn in [("-t set -n 5000 -r 100: exactly key:000000000000..99", set_r),
                     ("-t incr -n 3000: counter = 3000", incr),
                     ("-t lpush -n 2000, -t lpop -n 500: LLEN 1500", lpush_lpop),
                     ("DBSIZE = number of KEYS * (MULTI/EXEC)", dbsize)]:
        bench.case(name, fn)

    return 1 if (cli.failed or bench.failed) else 0


if __name__ == "__main__":
    sys.exit(main())
