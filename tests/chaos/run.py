"""One chaos run: start a cluster, run the workload while the nemesis breaks
things, heal, restart every node, then check the history.

    python3 tests/chaos/run.py --binary target/release/raftlock --duration 120 --seed 7

Ends with one summary line, printing the seed and where the history is, and
writes verdict.json into the run directory (FORMATS.md). Exit status: 0 every
checker passed; 1 a checker found a violation; 2 no violation, but the run
proves nothing: a harness error, missing evidence, or a setup that was
required and not there (RAFTLOCK_CHAOS_REQUIRE_NETNS=1: network namespaces;
RAFTLOCK_REQUIRE_CLIENT_TOOLS=1: libfaketime and the fsync shim)."""

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cluster import Cluster  # noqa: E402
from nemesis import KINDS, Nemesis  # noqa: E402
from resp import NotSent, Lost, ReplyError  # noqa: E402
from workload import History, LockClient, Reader, Subscriber  # noqa: E402
import checkers  # noqa: E402

KEY_PREFIX = "chaos:"
EXIT_VIOLATION, EXIT_HARNESS = 1, 2


def die(msg):
    """A harness or setup error: exit status 2, never mistaken for a violation."""
    print(f"chaos: {msg}", file=sys.stderr, flush=True)
    sys.exit(EXIT_HARNESS)


def parse_duration(text):
    text = str(text).strip()
    units = {"s": 1, "m": 60, "h": 3600}
    if text[-1:] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--duration", default="120")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--keys", type=int, default=4)
    ap.add_argument("--clients-per-key", type=int, default=3)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--subscribers", type=int, default=2)
    ap.add_argument("--faults", default=",".join(KINDS), help="comma-separated fault kinds to draw from")
    ap.add_argument("--hold", default="2,5", help="min,max seconds a fault is held")
    ap.add_argument("--quiet", default="1,3", help="min,max seconds between faults")
    ap.add_argument("--mode", default="auto", choices=["auto", "netns", "loopback"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--plant-bug", action="append", default=[], help="a raftlock planted bug (needs a planted-bugs build)")
    ap.add_argument("--resource-no-check", action="store_true", help="planted bug: the resource accepts any token")
    ap.add_argument("--snapshot-logs", type=int, default=300)
    args = ap.parse_args()

    # SIGTERM (a CI timeout, a kill) still tears the cluster and namespaces down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    duration = parse_duration(args.duration)
    out = args.out or os.path.join("/var/tmp/raftlock-chaos", f"{seed}-{time.strftime('%Y%m%d-%H%M%S')}")
    if os.path.isdir(out) and os.listdir(out):
        # Its files are appended to: a directory of an earlier run is replaced,
        # anything else is left alone.
        if not os.path.exists(os.path.join(out, "run.log")):
            die(f"{out} is not empty and not a chaos run directory")
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    logf = open(os.path.join(out, "run.log"), "a", buffering=1)
    t0 = time.monotonic()

    def log(msg):
        line = f"[{time.monotonic() - t0:7.2f}] {msg}"
        logf.write(line + "\n")
        print(line, flush=True)

    rng = random.Random(seed)
    kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        die(f"unknown fault kinds: {unknown}; known: {KINDS}")
    log(f"chaos run seed={seed} duration={duration:.0f}s nodes={args.nodes} out={out}")

    resource_port = free_port()
    rcmd = [sys.executable, os.path.join(HERE, "resource.py"), "--port", str(resource_port),
            "--log", os.path.join(out, "resource.jsonl")]
    if args.resource_no_check:
        rcmd.append("--no-check")
    resource = subprocess.Popen(rcmd, stdout=subprocess.PIPE, text=True)
    if "ready" not in resource.stdout.readline():
        die("the resource process did not start")

    cluster = Cluster(args.nodes, os.path.abspath(args.binary), out, seed, log, mode=args.mode,
                      plant=args.plant_bug, snapshot_logs=args.snapshot_logs)
    notes = []
    if cluster.mode == "loopback":
        notes.append("network namespaces unavailable: nodes on loopback, partitions done by the peer proxies")
    if not cluster.faketime:
        notes.append("libfaketime not found: clock faults skipped")
    if not cluster.failfsync:
        notes.append("no C compiler: fsync faults skipped")
    log(f"mode={cluster.mode} faketime={'yes' if cluster.faketime else 'no'} "
        f"fsync-shim={'yes' if cluster.failfsync else 'no'} plant={args.plant_bug or '-'}"
        f"{' resource-no-check' if args.resource_no_check else ''}")
    for n in notes:
        log("NOTE: " + n)
    if os.environ.get("RAFTLOCK_REQUIRE_CLIENT_TOOLS") and not (cluster.faketime and cluster.failfsync):
        # scripts/test.sh installed libfaketime and gcc: no fault kind may be
        # skipped silently there.
        resource.kill()
        die("libfaketime or the fsync shim is missing, and RAFTLOCK_REQUIRE_CLIENT_TOOLS is set")
    if os.environ.get("RAFTLOCK_CHAOS_REQUIRE_NETNS") == "1" and cluster.mode != "netns":
        # scripts/test.sh runs as root: real partitions (iptables in network
        # namespaces) are expected there, not the proxies' imitation.
        resource.kill()
        die(f"mode is {cluster.mode}, and RAFTLOCK_CHAOS_REQUIRE_NETNS=1 requires netns")

    history = History(os.path.join(out, "history.jsonl"))
    stop = threading.Event()
    sub_stop = threading.Event()
    keys = [f"{KEY_PREFIX}k{i}" for i in range(args.keys)]
    clients, others, subs = [], [], []
    harness_errors = []
    final = {}
    nemesis = None
    try:
        cluster.setup()
        lid = cluster.wait_leader(30)
        if lid is None:
            raise RuntimeError("no leader after start")
        log(f"cluster up, leader {lid}")
        for key in keys:
            for c in range(args.clients_per_key):
                clients.append(LockClient(f"client-{key}-{c}", key, cluster, history,
                                          random.Random(rng.random()), stop, 4.0, resource_port))
        for r in range(args.readers):
            others.append(Reader(f"reader-{r}", keys, cluster, history, random.Random(rng.random()), stop, 4.0))
        for s in range(args.subscribers):
            subs.append(Subscriber(f"sub-{s}", s + 1, KEY_PREFIX, os.path.join(out, "notify.jsonl"), cluster,
                                   random.Random(rng.random()), sub_stop))
        for w in clients + others + subs:
            w.start()

        nemesis = Nemesis(cluster, clients, random.Random(rng.random()), os.path.join(out, "faults.jsonl"), log)
        hold = [float(x) for x in args.hold.split(",")]
        quiet = [float(x) for x in args.quiet.split(",")]
        deck = []
        end = time.monotonic() + duration
        time.sleep(min(3.0, duration / 10))
        while time.monotonic() < end:
            if not deck:
                deck = list(kinds)
                rng.shuffle(deck)
            kind = deck.pop()
            nemesis.run_one(kind, rng.uniform(*hold))
            time.sleep(rng.uniform(*quiet))

        log("healing")
        cluster.heal_all()
        if cluster.wait_leader(30) is None:
            raise RuntimeError("no leader after healing")
        time.sleep(3)
        stop.set()
        for w in clients + others:
            w.join(15)
        log(f"workload stopped: {history.counts}")

        # Lease events after healing: every live subscriber must see them.
        time.sleep(1.5)
        live = {s.sid: s.conn_no for s in subs if s.connected}
        heal_events = []
        for key in keys:
            owner = f"heal-{key}"
            token = None
            # `t`: no event of this command can have been delivered before it was sent.
            sent = time.monotonic()
            deadline = sent + 15
            while time.monotonic() < deadline:
                token = leader_call(cluster, "LOCK.ACQUIRE", key, owner, 30000, within=5)
                if isinstance(token, int):
                    break
                time.sleep(0.5)  # still held by a client that walked away
            if isinstance(token, int):
                heal_events.append({"key": key, "ev": "acquired", "token": token, "t": sent})
                sent = time.monotonic()
                if leader_call(cluster, "LOCK.RELEASE", key, owner, token) == 1:
                    heal_events.append({"key": key, "ev": "released", "token": token, "t": sent})
            else:
                # Still held by a workload client that walked away: it expires.
                harness_errors.append(f"could not take {key} after healing: {token!r}")
        time.sleep(3)
        live = [sid for sid, conn in live.items() if subs[sid - 1].connected and subs[sid - 1].conn_no == conn]
        sub_stop.set()
        for s in subs:
            s.join(5)

        # Before any restart: every node, running since the heal, must have
        # applied what the others did (a node whose applying stopped would
        # catch up only by being restarted). One that exited since the heal
        # (a failed fsync stops a node) is started first: it is not stuck.
        for nid in cluster.nodes:
            if not cluster.alive(nid):
                cluster.start(nid)
        healed = cluster.wait_converged(30)
        log("final full restart (kill -9 of every node)")
        for nid in cluster.nodes:
            cluster.kill(nid)
        for nid in cluster.nodes:
            cluster.start(nid)
        if cluster.wait_leader(30) is None:
            raise RuntimeError("no leader after the final restart")
        probe = leader_call(cluster, "LOCK.ACQUIRE", f"{KEY_PREFIX}probe", "probe", 600000)
        digests = cluster.wait_converged(60)
        final = {"nodes": sorted(cluster.nodes), "digests": digests,
                 "probe_token": probe if isinstance(probe, int) else None,
                 "heal_events": heal_events, "live_subs": live, "healed_digests": healed}
        with open(os.path.join(out, "final.json"), "w") as f:
            json.dump(final, f, indent=1)
        log(f"final: probe token {probe}, digests {digests}")
    except Exception as e:
        harness_errors.append(f"harness: {type(e).__name__}: {e}")
        log(f"HARNESS ERROR: {e}")
    finally:
        stop.set()
        sub_stop.set()
        cluster.teardown()
        resource.kill()
        resource.wait()
        history.close()
    for w in clients + others + subs:
        if w.error:
            harness_errors.append(w.error)

    enrich_history(out)
    verdicts = checkers.run_all(out)
    for v in verdicts:
        log(checkers.format_verdict(v))
    problems = list(nemesis.problems) if nemesis else []
    for p in problems:
        log(f"fsync-stop: FAIL {p}")
    for e in harness_errors:
        log(f"ERROR {e}")
    faults = nemesis.counts if nemesis else {}
    skipped = nemesis.skipped if nemesis else {}
    not_run = [k for k in kinds if k not in faults and k not in skipped]
    verdict = summarize(verdicts, problems, harness_errors)
    verdict.update(seed=seed, mode=cluster.mode, nodes=args.nodes, duration_s=round(duration),
                   history=out, ops=dict(history.counts), faults=faults, faults_skipped=skipped,
                   faults_not_run=not_run, leader_returns=nemesis.returns if nemesis else None)
    with open(os.path.join(out, "verdict.json"), "w") as f:
        json.dump(verdict, f, indent=1)
    counts = history.counts

    def verdict_word(v):
        if v.ok:
            return "PASS"
        return "FAIL" if v.violations else "FAIL(missing-evidence)"
    verdict_text = " ".join(f"{v.name}={verdict_word(v)}" for v in verdicts)
    fsync_text = "fsync-stop=" + ("FAIL" if problems else "PASS")
    fault_text = " ".join(f"{k}={n}" for k, n in sorted(faults.items()))
    back = nemesis.returns if nemesis else {}
    if back.get("returned") or back.get("not"):
        fault_text += f" (leader-returns: old leader elected again {back['returned']}/{back['returned'] + back['not']})"
    if skipped:
        fault_text += " skipped: " + " ".join(f"{k}={n}" for k, n in sorted(skipped.items()))
    if not_run:
        fault_text += " not run: " + ",".join(not_run)
    summary = (f"CHAOS {verdict['status']} seed={seed} mode={cluster.mode} nodes={args.nodes} "
               f"duration={duration:.0f}s ops={sum(counts.values())} (ok={counts['ok']} fail={counts['fail']} "
               f"unknown={counts['unknown']}) faults={sum(faults.values())} kinds={len(faults)} [{fault_text}] "
               f"{verdict_text} {fsync_text} history={out}")
    log(summary)
    if verdict["status"] != "PASS":
        log(f"FAILED: seed {seed}; history and node logs in {out}")
    sys.exit({"PASS": 0, "FAIL": EXIT_VIOLATION}.get(verdict["status"], EXIT_HARNESS))


def summarize(verdicts, problems=(), harness_errors=()):
    """verdict.json's judgement: status PASS (every checker passed), FAIL (a
    checker found a violation; they are named) or ERROR (no violation, but
    missing evidence or a harness error: the run proves nothing)."""
    violations = {v.name: v.violations for v in verdicts if v.violations}
    if problems:
        violations["fsync-stop"] = len(problems)
    missing = {v.name: v.missing for v in verdicts if v.missing}
    status = "FAIL" if violations else ("ERROR" if missing or harness_errors else "PASS")
    return {"status": status, "violations": violations, "missing": missing,
            "harness_errors": list(harness_errors),
            "checkers": {v.name: ("PASS" if v.ok else "FAIL") for v in verdicts}}


def enrich_history(out):
    """Adds the log index and log time of each acknowledged grant and release
    to its completion line, from the nodes' audit records of that token (a
    token names one grant). Renewals share their token, so they are left as
    they are unless the token has a single renewal."""
    audit = checkers.Run(out).audit
    recs = {}
    for r in audit.records() if audit else ():
        recs.setdefault((r["ev"], r["key"], r["owner"], r["token"]), {})[r["i"]] = r["lt"]
    path = os.path.join(out, "history.jsonl")
    if not os.path.exists(path):
        return
    ev_of = {"acquire": "acquired", "release": "released", "renew": "renewed"}
    lines = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "ok" and r.get("f") in ev_of and "index" not in r:
                token = r.get("token")
                found = recs.get((ev_of[r["f"]], r["key"], r["owner"], token)) if token is not None else None
                if found and len(found) == 1:
                    (index, lt), = found.items()
                    r["index"], r["lt"] = index, lt
            lines.append(json.dumps(r))
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


def leader_call(cluster, *args, within=20.0):
    """Runs a command on the leader, retrying while the cluster settles (for
    at most `within` seconds)."""
    last = None
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        lid = cluster.wait_leader(min(5.0, max(0.1, deadline - time.monotonic())))
        if lid is not None:
            try:
                r = cluster.command(lid, *args, timeout=3.0)
                if not isinstance(r, ReplyError):
                    return r
                last = r
            except (NotSent, Lost) as e:
                last = e
        time.sleep(0.25)
    return last


if __name__ == "__main__":
    main()
