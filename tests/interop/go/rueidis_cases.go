package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// rueidis always asks for RESP3 (HELLO 3) and, unless DisableCache, turns on
// server-assisted client-side caching on every connection it opens (CLIENT
// TRACKING ON OPTIN, or ON with ClientTrackingOptions); a server that refuses
// either makes NewClient fail with rueidis.ErrNoCache. DoCache sends CLIENT
// CACHING YES (ECHO "" in OPTOUT and BCAST mode), MULTI, PTTL key, the read,
// EXEC, keeps the answer, and drops it when an `invalidate` push names the key.

// Every library call is bounded: no case can hang on a server that never answers.
const rueidisCallTimeout = 5 * time.Second

// How long a cached value may outlive a write before the case fails: the
// invalidation push is expected within milliseconds; the cached entry itself
// would live for a minute.
const invalidationWait = 5 * time.Second

func newRueidis(a Args, mutate func(*rueidis.ClientOption)) (rueidis.Client, error) {
	opt := rueidis.ClientOption{
		InitAddress: []string{fmt.Sprintf("127.0.0.1:%d", a.Port)},
	}
	if mutate != nil {
		mutate(&opt)
	}
	return rueidis.NewClient(opt)
}

func rctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), rueidisCallTimeout)
}

// rdo: one command through the client, bounded in time.
func rdo(c rueidis.Client, cmd rueidis.Completed) rueidis.RedisResult {
	ctx, cancel := rctx()
	defer cancel()
	return c.Do(ctx, cmd)
}

func rcache(c rueidis.Client, key string) rueidis.RedisResult {
	ctx, cancel := rctx()
	defer cancel()
	return c.DoCache(ctx, c.B().Get().Key(key).Cache(), time.Minute)
}

// cachedValue: the value DoCache answers ("" and nil=false for a missing key),
// and whether it came from the local cache.
func cachedValue(c rueidis.Client, key string) (value string, exists, hit bool, err error) {
	r := rcache(c, key)
	v, err := r.ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, r.IsCacheHit(), nil
	}
	if err != nil {
		return "", false, false, fmt.Errorf("DoCache GET %s: %w", key, err)
	}
	return v, true, r.IsCacheHit(), nil
}

// clientInfoResp: the resp=N field of CLIENT INFO through the library.
func clientInfoField(c rueidis.Client, field string) (string, error) {
	info, err := rdo(c, c.B().ClientInfo().Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("CLIENT INFO: %w", err)
	}
	for _, f := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(f, field+"="); ok {
			return v, nil
		}
	}
	return "", errorf("CLIENT INFO has no %s= field: %s", field, info)
}

// The compare-and-delete release as applications write it (unique per run, so
// the first EVALSHA meets NOSCRIPT and rueidis falls back to EVAL).
func rueidisUnlockScript(prefix, tag string) *rueidis.Lua {
	return rueidis.NewLuaScript(`-- raftlock interop rueidis ` + prefix + ` ` + tag + `
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
else
  return 0
end`)
}

// lockInfoOwner: LOCK.INFO (raftlock's) names owner; skipped against a real Redis.
func lockInfoOwner(a Args, plain *Plain, key, owner string) error {
	if a.Vanilla {
		return nil
	}
	_, err := plain.ExpectTokenOwner(key, owner)
	return err
}

func rueidisCases(h *Harness, a Args) {
	library := "rueidis " + moduleVersion("github.com/redis/rueidis")
	plain, err := DialPlain(a.CheckPort)
	if err != nil {
		h.Report(library, "connect", time.Now(), err)
		return
	}
	defer plain.Close()

	// --- with client-side caching (the default: CLIENT TRACKING ON OPTIN) ---
	var csc rueidis.Client
	h.Case(library, "csc connect (HELLO 3, CLIENT TRACKING ON OPTIN)", func() error {
		c, err := newRueidis(a, nil)
		if err != nil {
			return errorf("NewClient with client-side caching: %v", err)
		}
		csc = c
		if resp, err := clientInfoField(c, "resp"); err != nil || resp != "3" {
			return errorf("CLIENT INFO resp=%q (%v), expected 3", resp, err)
		}
		return nil
	})
	if csc != nil {
		defer csc.Close()
	}
	need := func(c rueidis.Client) error {
		if c == nil {
			return errorf("no client: NewClient failed")
		}
		return nil
	}

	// What the server says about the connection's tracking.
	h.Case(library, "csc CLIENT TRACKINGINFO", func() error {
		if err := need(csc); err != nil {
			return err
		}
		m, err := rdo(csc, csc.B().ClientTrackinginfo().Build()).ToMap()
		if err != nil {
			return errorf("CLIENT TRACKINGINFO: %v", err)
		}
		flagsMsg, ok := m["flags"]
		if !ok {
			return errorf("CLIENT TRACKINGINFO has no flags: %v", m)
		}
		flags, err := flagsMsg.AsStrSlice()
		if err != nil {
			return errorf("CLIENT TRACKINGINFO flags: %v", err)
		}
		if !slices.Contains(flags, "on") || !slices.Contains(flags, "optin") {
			return errorf("CLIENT TRACKINGINFO flags %v, expected on and optin", flags)
		}
		// No redirection: Redis answers 0 (its documentation says -1).
		if r, ok := m["redirect"]; !ok {
			return errorf("CLIENT TRACKINGINFO has no redirect")
		} else if n, err := r.AsInt64(); err != nil || (n != 0 && n != -1) {
			return errorf("CLIENT TRACKINGINFO redirect %v (%v), expected 0 (or -1)", n, err)
		}
		return nil
	})

	lockRecipe := func(c rueidis.Client, tag string) error {
		if err := need(c); err != nil {
			return err
		}
		key := unique(a.Prefix, "rueidis-lock-"+tag)
		tok := randomHex(16)
		r := rdo(c, c.B().Set().Key(key).Value(tok).Nx().Px(leaseMs*time.Millisecond).Build())
		if s, err := r.ToString(); err != nil || s != "OK" {
			return errorf("SET NX PX on a free key: %q, %v", s, err)
		}
		if _, err := plain.ExpectOwner(key, tok, leaseMs, 1000); err != nil {
			return err
		}
		if err := lockInfoOwner(a, plain, key, tok); err != nil {
			return err
		}
		// Another client's SET NX on the held key: a nil reply, nothing changed.
		other, err := newRueidis(a, func(o *rueidis.ClientOption) { o.DisableCache = true })
		if err != nil {
			return errorf("second client: %v", err)
		}
		defer other.Close()
		r = rdo(other, other.B().Set().Key(key).Value(randomHex(16)).Nx().Px(leaseMs*time.Millisecond).Build())
		if err := r.Error(); !rueidis.IsRedisNil(err) {
			s, _ := r.ToString()
			return errorf("a second SET NX on a held key answered %q, %v; expected nil", s, err)
		}
		if _, err := plain.ExpectOwner(key, tok, leaseMs, 1000); err != nil {
			return err
		}
		script := rueidisUnlockScript(a.Prefix, tag)
		ctx, cancel := rctx()
		defer cancel()
		if n, err := script.Exec(ctx, c, []string{key}, []string{"not-the-owner"}).AsInt64(); err != nil || n != 0 {
			return errorf("release by a non-owner returned %d, %v; expected 0", n, err)
		}
		if _, err := plain.ExpectOwner(key, tok, leaseMs, 1000); err != nil {
			return err
		}
		if n, err := script.Exec(ctx, c, []string{key}, []string{tok}).AsInt64(); err != nil || n != 1 {
			return errorf("release by the owner returned %d, %v; expected 1", n, err)
		}
		if err := plain.ExpectGone(key); err != nil {
			return err
		}
		if n, err := script.Exec(ctx, other, []string{key}, []string{tok}).AsInt64(); err != nil || n != 0 {
			return errorf("a second release returned %d, %v; expected 0", n, err)
		}
		return nil
	}
	h.Case(library, "csc lock recipe (SET NX PX, NewLuaScript release)", func() error { return lockRecipe(csc, "csc") })

	// cacheThenWrite: DoCache reads v1 (a miss, then a hit), write() changes the
	// key elsewhere, and DoCache must answer the new state (want, or a missing
	// key if want is "") within invalidationWait, the first answer after the
	// write being a miss.
	cacheThenWrite := func(c rueidis.Client, key, v1 string, write func() error, want string) error {
		if s, err := rdo(c, c.B().Set().Key(key).Value(v1).Build()).ToString(); err != nil || s != "OK" {
			return errorf("SET %s: %q %v", key, s, err)
		}
		// Through a follower, the client's own SET is answered once the
		// leader applied it; the follower may apply it a moment later, after
		// the read below, and tell the client once that the key changed (a
		// value that was fresh: harmless, README "Client-side caching is per
		// node"). Wait until the client's node has caught up, so that the
		// cache hit checked next is about caching, not about that moment.
		if err := caughtUp(a); err != nil {
			return err
		}
		v, ok, hit, err := cachedValue(c, key)
		if err != nil || !ok || v != v1 || hit {
			return errorf("first DoCache GET: %q (exists %v, cache hit %v) %v; expected %q from the server", v, ok, hit, err, v1)
		}
		v, ok, hit, err = cachedValue(c, key)
		if err != nil || !ok || v != v1 || !hit {
			return errorf("second DoCache GET: %q (exists %v, cache hit %v) %v; expected %q from the cache", v, ok, hit, err, v1)
		}
		if err := write(); err != nil {
			return err
		}
		wrote := time.Now()
		for {
			v, ok, hit, err = cachedValue(c, key)
			if err != nil {
				return err
			}
			if !hit {
				if (want == "" && ok) || (want != "" && (!ok || v != want)) {
					return errorf("DoCache after the write read %q (exists %v) from the server, expected %q", v, ok, want)
				}
				break
			}
			if !ok || v != v1 {
				return errorf("DoCache after the write: a cache hit with %q (exists %v), neither the old nor the new value", v, ok)
			}
			if time.Since(wrote) > invalidationWait {
				return errorf("DoCache still answers the stale cached %q %.1f s after the write (no invalidation push for %s)",
					v, time.Since(wrote).Seconds(), key)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// And the cache holds the new state again.
		v, ok, hit, err = cachedValue(c, key)
		if err != nil || !hit || (want == "" && ok) || (want != "" && v != want) {
			return errorf("DoCache after the refill: %q (exists %v, cache hit %v) %v; expected %q from the cache", v, ok, hit, err, want)
		}
		got, err := plain.Get(key)
		if err != nil {
			return err
		}
		if (want == "" && got != nil) || (want != "" && string(got) != want) {
			return errorf("server: GET %s = %s, the library believes %q", key, show(got), want)
		}
		return nil
	}

	writer, werr := newRueidis(a, func(o *rueidis.ClientOption) { o.DisableCache = true })
	if werr == nil {
		defer writer.Close()
	}
	needWriter := func() error {
		if werr != nil {
			return errorf("the writing client: NewClient with DisableCache: %v", werr)
		}
		return nil
	}
	setBy := func(c rueidis.Client, key, v string) func() error {
		return func() error {
			if s, err := rdo(c, c.B().Set().Key(key).Value(v).Build()).ToString(); err != nil || s != "OK" {
				return errorf("the other client's SET %s: %q %v", key, s, err)
			}
			return nil
		}
	}

	h.Case(library, "csc DoCache invalidated by another client's SET", func() error {
		if err := errors.Join(need(csc), needWriter()); err != nil {
			return err
		}
		key := unique(a.Prefix, "rueidis-cache-set")
		return cacheThenWrite(csc, key, "v1", setBy(writer, key, "v2"), "v2")
	})

	// The checker's node: the leader, for the follower target (the write reaches
	// the client's node through Raft, and its invalidation must follow).
	h.Case(library, "csc DoCache invalidated by DEL on the checker's node", func() error {
		if err := need(csc); err != nil {
			return err
		}
		key := unique(a.Prefix, "rueidis-cache-del")
		return cacheThenWrite(csc, key, "v1", func() error {
			n, err := plain.Int("DEL", key)
			if err != nil || n != 1 {
				return errorf("the checker's DEL %s: %d %v", key, n, err)
			}
			return nil
		}, "")
	})

	// A lock key read through the cache, released by its owner's script
	// (EVALSHA/EVAL deleting it) from another client.
	h.Case(library, "csc DoCache invalidated by another client's release script", func() error {
		if err := errors.Join(need(csc), needWriter()); err != nil {
			return err
		}
		key := unique(a.Prefix, "rueidis-cache-script")
		tok := randomHex(16)
		script := rueidisUnlockScript(a.Prefix, "cache")
		return cacheThenWrite(csc, key, tok, func() error {
			ctx, cancel := rctx()
			defer cancel()
			if n, err := script.Exec(ctx, writer, []string{key}, []string{tok}).AsInt64(); err != nil || n != 1 {
				return errorf("the other client's release script returned %d, %v; expected 1", n, err)
			}
			return nil
		}, "")
	})

	// The same with the other tracking modes rueidis offers through
	// ClientTrackingOptions (DoCache then sends ECHO "" in place of CLIENT CACHING YES).
	bcastPrefix := a.Prefix + ":rueidis-bcast:"
	for _, mode := range []struct {
		name string
		opts []string
		key  string
	}{
		{"OPTOUT", []string{"OPTOUT"}, unique(a.Prefix, "rueidis-optout")},
		{"BCAST PREFIX", []string{"PREFIX", bcastPrefix, "BCAST"}, bcastPrefix + randomHex(4)},
	} {
		h.Case(library, "csc "+mode.name+": DoCache invalidated by another client's SET", func() error {
			if err := needWriter(); err != nil {
				return err
			}
			c, err := newRueidis(a, func(o *rueidis.ClientOption) { o.ClientTrackingOptions = mode.opts })
			if err != nil {
				return errorf("NewClient with ClientTrackingOptions %v: %v", mode.opts, err)
			}
			defer c.Close()
			return cacheThenWrite(c, mode.key, "v1", setBy(writer, mode.key, "v2"), "v2")
		})
	}

	// --- DisableCache: HELLO 3 and no tracking; DoCache is a plain read ---
	var nocache rueidis.Client
	h.Case(library, "DisableCache connect (HELLO 3, no CLIENT TRACKING)", func() error {
		c, err := newRueidis(a, func(o *rueidis.ClientOption) { o.DisableCache = true })
		if err != nil {
			return errorf("NewClient with DisableCache: %v", err)
		}
		nocache = c
		if resp, err := clientInfoField(c, "resp"); err != nil || resp != "3" {
			return errorf("CLIENT INFO resp=%q (%v), expected 3", resp, err)
		}
		return nil
	})
	if nocache != nil {
		defer nocache.Close()
	}
	h.Case(library, "DisableCache lock recipe (SET NX PX, NewLuaScript release)", func() error {
		return lockRecipe(nocache, "nocache")
	})
	h.Case(library, "DisableCache DoCache reads through", func() error {
		if err := errors.Join(need(nocache), needWriter()); err != nil {
			return err
		}
		key := unique(a.Prefix, "rueidis-nocache")
		for i, v := range []string{"v1", "v2", "v3"} {
			if err := setBy(writer, key, v)(); err != nil {
				return err
			}
			got, ok, hit, err := cachedValue(nocache, key)
			if err != nil || !ok || got != v || hit {
				return errorf("DoCache GET after write %d: %q (exists %v, cache hit %v) %v; expected %q from the server", i+1, got, ok, hit, err, v)
			}
		}
		got, err := plain.Get(key)
		if err != nil || string(got) != "v3" {
			return errorf("server: GET %s = %s (%v), the library read \"v3\"", key, show(got), err)
		}
		return nil
	})
}

// caughtUp waits (at most 5 s) until the node at a.Port has applied what the
// node at a.CheckPort (the leader, for the follower target) had committed.
// Nothing to wait for against a server without RAFT.INFO (--vanilla Redis)
// or when both are the same node.
func caughtUp(a Args) error {
	if a.Port == a.CheckPort {
		return nil
	}
	field := func(port int, name string) (int64, bool) {
		p, err := DialPlain(port)
		if err != nil {
			return 0, false
		}
		defer p.Close()
		r, err := p.Raw("RAFT.INFO")
		b, ok := r.([]byte)
		if err != nil || !ok {
			return 0, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, found := strings.CutPrefix(strings.TrimSpace(line), name+":"); found {
				n, err := strconv.ParseInt(v, 10, 64)
				return n, err == nil
			}
		}
		return 0, false
	}
	commit, ok := field(a.CheckPort, "commit_index")
	if !ok {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if applied, ok := field(a.Port, "applied_index"); ok && applied >= commit {
			return nil
		}
		if time.Now().After(deadline) {
			return errorf("the client's node did not apply index %d within 5 s", commit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
