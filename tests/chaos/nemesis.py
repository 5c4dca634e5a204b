"""Faults, seeded and logged (faults.jsonl): each is started, held for a while,
then healed. `Nemesis.run_one(kind)` does one full cycle."""

import json
import time

KINDS = [
    "kill-follower", "kill-leader", "kill-majority", "kill-all", "pause-leader", "pause-client",
    "partition-leader-minority", "partition-halves", "partition-isolate", "partition-oneway",
    "net-delay", "net-drop", "clock-jump", "clock-rate", "fsync-fail", "leader-returns",
]


class Nemesis:
    def __init__(self, cluster, clients, rng, path, log):
        self.cluster = cluster
        self.clients = clients
        self.rng = rng
        self.f = open(path, "a", buffering=1)
        self.log = log
        self.counts = {}  # faults that ran, by kind
        self.skipped = {}  # faults that could not run here (no libfaketime, ...), by kind
        self.problems = []  # safety problems the nemesis itself sees (a node that kept running after a failed fsync)
        self.fsync_stops = []
        self.returns = {"returned": 0, "not": 0}  # leader-returns: did the old leader win again?

    def record(self, kind, phase, **detail):
        entry = dict(t=time.monotonic(), kind=kind, phase=phase, **detail)
        self.f.write(json.dumps(entry) + "\n")
        self.log(f"[nemesis] {kind} {phase} {json.dumps(detail) if detail else ''}")
        if phase == "skipped":
            self.skipped[kind] = self.skipped.get(kind, 0) + 1

    def ids(self):
        return sorted(self.cluster.nodes)

    def leader_or_any(self):
        lid = self.cluster.wait_leader(timeout=5)
        return lid if lid is not None else self.rng.choice(self.ids())

    def followers(self, lid):
        return [i for i in self.ids() if i != lid]

    def run_one(self, kind, hold):
        skipped = sum(self.skipped.values())
        heal = getattr(self, "do_" + kind.replace("-", "_"))(hold)
        if sum(self.skipped.values()) == skipped:  # only faults that really ran count
            self.counts[kind] = self.counts.get(kind, 0) + 1
        if heal:
            heal()
            self.record(kind, "heal")

    # ----- crashes and pauses -----

    def _kill(self, kind, victims, hold):
        for nid in victims:
            self.cluster.kill(nid)
        self.record(kind, "start", nodes=victims)
        time.sleep(hold)

        def heal():
            for nid in victims:
                self.cluster.start(nid)
        return heal

    def do_kill_follower(self, hold):
        lid = self.leader_or_any()
        return self._kill("kill-follower", [self.rng.choice(self.followers(lid))], hold)

    def do_kill_leader(self, hold):
        return self._kill("kill-leader", [self.leader_or_any()], hold)

    def do_kill_majority(self, hold):
        n = len(self.ids())
        return self._kill("kill-majority", sorted(self.rng.sample(self.ids(), n // 2 + 1)), hold)

    def do_kill_all(self, hold):
        return self._kill("kill-all", self.ids(), min(hold, 1.5))

    def do_pause_leader(self, hold):
        lid = self.leader_or_any()
        self.cluster.pause(lid)
        self.record("pause-leader", "start", nodes=[lid])
        time.sleep(hold)
        return lambda: self.cluster.resume(lid)

    def do_pause_client(self, hold):
        holding = [c for c in self.clients if c.holding] or list(self.clients)
        c = self.rng.choice(holding)
        pause = c.ttl[1] / 1000 + self.rng.uniform(0.5, 2.0)
        c.pause_for = pause
        self.record("pause-client", "start", client=c.name, key=c.key, pause_s=round(pause, 2))
        time.sleep(hold)
        return None

    # ----- network -----

    def _partition(self, kind, groups, hold):
        self.cluster.partition(groups)
        self.record(kind, "start", groups=groups)
        time.sleep(hold)
        return self.cluster.heal_network

    def do_partition_leader_minority(self, hold):
        lid = self.leader_or_any()
        others = self.followers(lid)
        self.rng.shuffle(others)
        minority = [lid] + others[: (len(self.ids()) - 1) // 2 - 1]
        majority = [i for i in self.ids() if i not in minority]
        return self._partition("partition-leader-minority", [sorted(minority), sorted(majority)], hold)

    def do_partition_halves(self, hold):
        ids = self.ids()
        self.rng.shuffle(ids)
        cut = self.rng.randint(1, len(ids) - 1)
        return self._partition("partition-halves", [sorted(ids[:cut]), sorted(ids[cut:])], hold)

    def do_partition_isolate(self, hold):
        victim = self.rng.choice(self.ids())
        return self._partition("partition-isolate", [[victim], [i for i in self.ids() if i != victim]], hold)

    def do_partition_oneway(self, hold):
        lid = self.leader_or_any()
        # The leader hears everyone but nobody hears it.
        pairs = [(lid, b) for b in self.followers(lid)]
        self.cluster.cut(pairs)
        self.record("partition-oneway", "start", dropped=pairs)
        time.sleep(hold)
        return self.cluster.heal_network

    def _links(self):
        return [(a, b) for a in self.ids() for b in self.ids() if a != b]

    def do_net_delay(self, hold):
        delay = self.rng.choice([20, 50, 120, 300])
        rules = [{"from": a, "to": b, "delay_ms": self.rng.randint(delay // 2, delay)} for a, b in self._links()]
        self.cluster.set_link_rules(rules)
        self.record("net-delay", "start", delay_ms=delay)
        time.sleep(hold)
        return lambda: self.cluster.set_link_rules([])

    def do_net_drop(self, hold):
        p = self.rng.choice([0.1, 0.3, 0.5])
        self.cluster.set_link_rules([{"from": a, "to": b, "drop": p} for a, b in self._links()])
        self.record("net-drop", "start", drop=p)
        time.sleep(hold)
        return lambda: self.cluster.set_link_rules([])

    def do_leader_returns(self, hold):
        """Issue 10, finding 1. The leader A is cut off while clients keep
        writing to it: as long as it has not heard of a newer term it stamps
        those writes, which never commit. The others are paused meanwhile, so
        that nobody commits anything for a while and the log's last time falls
        behind A's stamps by that much. Then they elect a leader, the partition
        heals (A truncates its entries), and the others' leaders are paused one
        after another until A wins an election while the committed log is
        still behind its old stamps. A leader that continued from those stamps
        instead of from its log would expire every lease at once."""
        kind = "leader-returns"
        a = self.cluster.wait_leader(timeout=5)
        if a is None or len(self.ids()) < 3:
            self.record(kind, "skipped", reason="no leader" if a is None else "needs 3 nodes")
            return None
        others = self.followers(a)
        self.cluster.partition([[a], others])
        for nid in others:
            self.cluster.pause(nid)
        # Longer than the next leader's whole tenure (an election, the heal,
        # a catch-up of at most 2 s): the committed log must still be behind
        # A's stamps when A wins again.
        gap = max(hold, 3.0) + self.rng.uniform(5.0, 9.0)
        self.record(kind, "start", node=a, others_paused_s=round(gap, 2))
        time.sleep(gap)
        for nid in others:
            self.cluster.resume(nid)
        self._wait_leader_other_than(a, 10)
        self.cluster.heal_network()
        paused, elections, returned = [], 0, False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lid = self.cluster.wait_leader(timeout=2)
            if lid == a:
                returned = True
                break
            if lid is None:
                continue
            # A can only win once its log has caught up with this leader's.
            self._wait_caught_up(a, lid, 2.0)
            for nid in paused:
                self.cluster.resume(nid)
            self.cluster.pause(lid)
            paused, elections = [lid], elections + 1
        for nid in paused:
            self.cluster.resume(nid)
        self.returns["returned" if returned else "not"] += 1
        self.record(kind, "observed", node=a, returned=returned, leaders_paused=elections)
        return None

    def _wait_leader_other_than(self, a, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lid = self.cluster.leader()
            if lid is not None and lid != a:
                return lid
            time.sleep(0.05)
        return None

    def _wait_caught_up(self, nid, lid, timeout):
        """Until `nid` is in `lid`'s term and has applied what `lid` had committed."""
        info = self.cluster.raft_info(lid) or {}
        term, commit = info.get("term"), int(info.get("commit_index", 0) or 0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            mine = self.cluster.raft_info(nid) or {}
            if mine.get("term") == term and int(mine.get("applied_index", 0) or 0) >= commit:
                return True
            time.sleep(0.05)
        return False

    # ----- clocks and disks -----

    def _clock(self, kind, spec, hold):
        nid = self.leader_or_any() if self.rng.random() < 0.7 else self.rng.choice(self.ids())
        if not self.cluster.set_clock(nid, spec):
            self.record(kind, "skipped", reason="libfaketime is not installed")
            return None
        self.record(kind, "start", node=nid, spec=spec)
        time.sleep(hold)
        return lambda: self.cluster.set_clock(nid, "+0")

    def do_clock_jump(self, hold):
        secs = self.rng.choice([-1, 1]) * self.rng.randint(10, 300)
        return self._clock("clock-jump", f"{secs:+d}s", hold)

    def do_clock_rate(self, hold):
        return self._clock("clock-rate", f"+0 x{self.rng.choice([0.5, 2, 5])}", hold)

    def do_fsync_fail(self, hold):
        if not self.cluster.failfsync:
            self.record("fsync-fail", "skipped", reason="no C compiler for the fsync shim")
            return None
        nid = self.rng.choice(self.ids())
        self.cluster.fail_fsync(nid, True)
        started = time.monotonic()
        self.record("fsync-fail", "start", node=nid)
        stopped = None
        while time.monotonic() - started < max(hold, 8.0):
            if not self.cluster.alive(nid):
                stopped = time.monotonic() - started
                break
            time.sleep(0.05)
        if stopped is None:
            self.problems.append(f"node {nid} kept running {max(hold, 8.0):.0f} s after its fsync started failing")
        else:
            self.fsync_stops.append(round(stopped, 2))
        self.record("fsync-fail", "observed", node=nid, stopped_after_s=stopped)

        def heal():
            self.cluster.fail_fsync(nid, False)
            self.cluster.kill(nid)
            self.cluster.start(nid)
        return heal
