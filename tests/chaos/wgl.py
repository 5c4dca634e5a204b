"""Wing-Gong-Lowe linearizability search for one lock key (fenced-mutex model).

`check_key(ops)` decides whether the operations on one key, with their real-time
windows, can be put in a sequential order that a fenced mutex with leases could
have produced. It is deliberately lenient wherever the history cannot see what
the server saw (the model must never flag a correct server):

* a lease can end silently at any moment, so a held state means "the last grant,
  possibly already expired" and nothing but a release frees it for certain;
* log time `lt` is used only when known (from the history or the audit), and an
  `exp` of None means "unknown";
* an `unknown` operation may take effect anywhere after its invocation, or never;
  an unknown acquire or renew may even be placed more than once. That
  relaxation keeps the search from trying every subset of the timed-out
  acquires (exponential with a few dozen of them); it can only hide a violation
  that needs one timed-out acquire to have granted twice, and no-lost-grants
  checks every token a read reports against the grants in the audit. (A renewal
  sets exp = lt + ttl, which can be earlier than before: an unknown renew makes
  exp unknown, it is not harmless.)

Model state: `(owner, token, exp, last)`: `owner` None when free (then `token`
and `exp` are None), `token` None after an unknown acquire whose token a later
operation pins, `last` the highest token known to have been granted on the key.

The search: a depth-first walk over "which operations are linearized so far",
always choosing among the minimal operations (those no unlinearized operation
precedes in real time), with a memo of configurations already explored. A
configuration is `(p, window, unknowns, state)`: every required operation before
index `p` (invoke order) is linearized, `window` marks the ones linearized after
`p`, `unknowns` the unknown releases linearized. Fewer unknowns used is never
worse (each unknown may also never happen), so a configuration is pruned when
one with the same `(p, window, state)` and a subset of its unknowns was already
explored: the memo is the usual (bitmask, state) cache with that dominance.

Operations that are legal in every state and change nothing (renew and release
failures, a read of "free", a definite error, unknown reads) need no
place in the order and are dropped before the search.

Standard library only.
"""

import time

INF = float("inf")
FREE = (None, None, None, 0)


class Op:
    """One operation on the key.

    f: acquire | renew | release | read; status: ok | denied | unknown.
    token: granted (acquire ok), named (renew, release), or the holder's (read).
    holder: (owner, token) for a read that saw one. lt/exp: log time of the
    command and the lease end it set, None when unknown.
    """

    __slots__ = ("id", "process", "owner", "f", "status", "invoke", "complete",
                 "token", "holder", "lt", "exp")

    def __init__(self, id, process, owner, f, status, invoke, complete=INF,
                 token=None, holder=None, lt=None, exp=None):
        self.id, self.process, self.owner, self.f, self.status = id, process, owner, f, status
        self.invoke, self.complete = invoke, (INF if complete is None else complete)
        self.token, self.holder, self.lt, self.exp = token, holder, lt, exp

    def describe(self):
        what = "%s %s by %s" % (self.status, self.f, self.owner)
        if self.f == "read":
            what += " -> %s" % (("%s/%s" % self.holder) if self.holder else "free")
        elif self.token is not None:
            what += " token %s" % self.token
        if self.lt is not None:
            what += " lt %s" % self.lt
        end = "inf" if self.complete == INF else "%.3f" % self.complete
        return "op %s (process %s) %s, t=[%.3f, %s]" % (self.id, self.process, what, self.invoke, end)

    def __repr__(self):
        return "Op(%s)" % self.describe()


def describe_state(state):
    owner, token, exp, last = state
    if owner is None:
        return "free (last token %s)" % last
    return "held by %s token %s exp %s (last token %s)" % (
        owner, "?" if token is None else token, "?" if exp is None else exp, last)


# ---------------------------------------------------------------- the model

def _held_by(state, owner, token):
    """`state` if it is held by `owner` with `token` (an unknown token is pinned
    to `token`, which must then be newer than every known grant; a `token` of
    None matches any), else None."""
    s_owner, s_token, s_exp, last = state
    if s_owner != owner:
        return None
    if token is None:
        return state
    if s_token is None:
        return (owner, token, s_exp, token) if token > last else None
    return state if s_token == token else None


def _expired_at(state, lt):
    """True only when the state's lease is known to have ended before `lt`."""
    exp = state[2]
    return lt is not None and exp is not None and lt > exp


def step(state, op):
    """The state after a required operation, or None if it is illegal there."""
    owner, token, exp, last = state
    f = op.f
    if f == "acquire":
        if op.status == "denied":
            # Someone else holds it (or may still). Not the caller: the server
            # refreshes a lease for its owner, and grants an ended one.
            if owner is None or owner == op.owner or _expired_at(state, op.lt):
                return None
            return state
        t = op.token
        if owner == op.owner:
            if token is None:  # the pinned token of an unknown grant, or a new grant
                return (owner, t, op.exp, t) if t > last else None
            if token == t:  # refresh: the lease must still have been live
                return None if _expired_at(state, op.lt) else (owner, t, op.exp, last)
        if owner is not None and not (op.lt is None or exp is None or exp <= op.lt):
            return None  # another lease is known to run past this grant
        return (op.owner, t, op.exp, t) if t > last else None
    if f == "renew":
        s = _held_by(state, op.owner, op.token)
        if s is None or _expired_at(s, op.lt):
            return None
        return (s[0], s[1], op.exp, s[3])
    if f == "release":
        s = _held_by(state, op.owner, op.token)
        if s is None or _expired_at(s, op.lt):
            return None
        return (None, None, None, s[3])
    if f == "read":
        return _held_by(state, op.holder[0], op.holder[1])
    raise ValueError("not a required operation: %r" % (op,))


def unknown_moves(state, op):
    """States an unknown operation may lead to if it took effect (excluding
    `state` itself: taking no effect is the same as never being linearized)."""
    owner, token, exp, last = state
    out = []
    if op.f == "acquire":
        if owner == op.owner and token is not None:
            out.append((owner, token, None, last))  # refreshed, at an unknown log time
        out.append((op.owner, None, None, last))  # granted, token unknown
    elif op.f == "renew":  # at an unknown log time: the lease may even have been shortened
        s = _held_by(state, op.owner, op.token)
        if s is not None:
            out.append((s[0], s[1], None, s[3]))
    elif op.f == "release":
        s = _held_by(state, op.owner, op.token)
        if s is not None:
            out.append((None, None, None, s[3]))
    return [s for s in out if s != state]


def is_required(op):
    """Whether the operation constrains the order (else it is dropped)."""
    if op.status == "unknown":
        return False
    if op.status == "ok":
        return op.f in ("acquire", "renew", "release") or (op.f == "read" and op.holder is not None)
    return op.f == "acquire" and op.status == "denied"


def is_effectful_unknown(op):
    return op.status == "unknown" and op.f in ("acquire", "renew", "release")


# ---------------------------------------------------------------- the search

class Result:
    """ok: True (linearizable), False (not), None (budget exhausted)."""

    def __init__(self, ok, explored, required, unknowns, dropped, stuck=None, stuck_states=()):
        self.ok, self.explored = ok, explored
        self.required, self.unknowns, self.dropped = required, unknowns, dropped
        self.stuck, self.stuck_states = stuck, list(stuck_states)

    def explain(self):
        if self.ok is not False or self.stuck is None:
            return ""
        states = "; ".join(describe_state(s) for s in self.stuck_states[:3])
        return "cannot place %s after the %d operations before it; model state there: %s" % (
            self.stuck.describe(), self.stuck_index, states)


GHOST = "\x00ghost"


def _ghosts_merged(ops, unk):
    """An unknown acquire whose owner no later operation names (clients take a
    new name after an unknown outcome, so this is the usual case) can only
    matter as "somebody else may hold it". All such owners are one for the
    model, so the states they lead to coincide and the memo merges them."""
    last_named = {}
    for o in ops:
        names = [o.owner] + ([o.holder[0]] if o.holder else [])
        for name in names:
            if o.status == "unknown" and o.f == "acquire" and name == o.owner:
                continue  # the acquire itself
            if name is not None and o.invoke > last_named.get(name, -INF):
                last_named[name] = o.invoke
    out = []
    for o in unk:
        if o.f == "acquire" and last_named.get(o.owner, -INF) < o.invoke:
            o = Op(o.id, o.process, GHOST, o.f, o.status, o.invoke, o.complete,
                   o.token, o.holder, o.lt, o.exp)
        out.append(o)
    return out


def check_key(ops, budget=2_000_000, initial=FREE, seconds=None):
    """Searches a linearization of `ops` (one key). Returns a Result; `ok` is
    None when `budget` states or `seconds` of search ran out first."""
    deadline = None if seconds is None else time.monotonic() + seconds
    req = sorted((o for o in ops if is_required(o)), key=lambda o: (o.invoke, o.complete, o.id))
    unk = sorted((o for o in ops if is_effectful_unknown(o)), key=lambda o: (o.invoke, o.id))
    unk = _ghosts_merged(ops, unk)
    dropped = len(ops) - len(req) - len(unk)
    n = len(req)
    if n == 0:
        return Result(True, 0, 0, len(unk), dropped)

    def moves(p, wmask, umask, state):
        """The next configurations, lazily: required operations first, and
        unknown ones only if the search comes back for them (they are rarely
        needed, and there can be thousands of them)."""
        m = INF  # earliest completion among unlinearized required ops
        cands = []
        j = p
        while j < n:
            op = req[j]
            if op.invoke > m:
                break
            if not (wmask >> (j - p)) & 1:
                cands.append(j)
                if op.complete < m:
                    m = op.complete
            j += 1
        for j in cands:
            ns = step(state, req[j])
            if ns is None:
                continue
            if j == p:
                w, q = wmask >> 1, p + 1
                while w & 1:
                    w >>= 1
                    q += 1
                yield (q, w, umask, ns)
            else:
                yield (p, wmask | (1 << (j - p)), umask, ns)
        for u, op in enumerate(unk):
            if op.invoke > m:
                break
            if (umask >> u) & 1:
                continue
            bit = 1 << u if op.f == "release" else 0  # see the module doc
            for ns in unknown_moves(state, op):
                yield (p, wmask, umask | bit, ns)

    memo = {(0, 0, initial): [0]}
    explored = 1
    deepest, deepest_states = 0, {initial}
    stack = [moves(0, 0, 0, initial)]
    while stack:
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            continue
        p, w, u, s = nxt
        if p >= n:
            return Result(True, explored, n, len(unk), dropped)
        key = (p, w, s)
        seen = memo.get(key)
        if seen is None:
            memo[key] = [u]
        else:
            if any(not (prev & ~u) for prev in seen):
                continue
            seen.append(u)
        explored += 1
        if p > deepest:
            deepest, deepest_states = p, {s}
        elif p == deepest and len(deepest_states) < 8:
            deepest_states.add(s)
        if explored > budget or (deadline is not None and explored % 1024 == 0 and time.monotonic() > deadline):
            return Result(None, explored, n, len(unk), dropped)
        stack.append(moves(p, w, u, s))
    r = Result(False, explored, n, len(unk), dropped, req[deepest], sorted(deepest_states, key=repr))
    r.stuck_index = deepest
    return r
