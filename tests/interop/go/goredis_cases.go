package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A lease that is not a whole number of seconds, so that go-redis's SetNX sends
// SET key value PX ms NX (for whole seconds it sends EX s).
const leaseMs = 1500

var ctx = context.Background()

func newGoRedis(a Args, protocol int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         fmt.Sprintf("127.0.0.1:%d", a.Port),
		Protocol:     protocol,
		DialTimeout:  5 * time.Second,
		ReadTimeout:  15 * time.Second,
		WriteTimeout: 15 * time.Second,
	})
}

// The compare-and-delete release, as applications write it. The comment makes its
// SHA1 unique to this run and protocol, so the first EVALSHA meets NOSCRIPT.
func unlockScript(prefix, tag string) string {
	return `-- raftlock interop ` + prefix + ` ` + tag + `
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
else
  return 0
end`
}

// lockInfo: (owner, token) from LOCK.INFO as go-redis returns it: a flat array
// in RESP2, a map in RESP3.
func lockInfo(c *redis.Client, key string) (string, int64, error) {
	v, err := c.Do(ctx, "LOCK.INFO", key).Result()
	if err != nil {
		return "", 0, fmt.Errorf("LOCK.INFO through go-redis: %w", err)
	}
	fields := map[string]any{}
	switch r := v.(type) {
	case []any:
		if len(r)%2 != 0 {
			return "", 0, errorf("LOCK.INFO replied %#v", v)
		}
		for i := 0; i < len(r); i += 2 {
			k, ok := r[i].(string)
			if !ok {
				return "", 0, errorf("LOCK.INFO replied %#v", v)
			}
			fields[k] = r[i+1]
		}
	case map[any]any:
		for k, val := range r {
			ks, ok := k.(string)
			if !ok {
				return "", 0, errorf("LOCK.INFO replied %#v", v)
			}
			fields[ks] = val
		}
	default:
		return "", 0, errorf("LOCK.INFO replied %#v", v)
	}
	for _, n := range []string{"owner", "token", "ttl-ms", "waiters", "next-waiter"} {
		if _, ok := fields[n]; !ok {
			return "", 0, errorf("LOCK.INFO replied %#v (no %q)", v, n)
		}
	}
	if len(fields) != 5 {
		return "", 0, errorf("LOCK.INFO replied %#v", v)
	}
	owner, ok1 := fields["owner"].(string)
	token, ok2 := fields["token"].(int64)
	if !ok1 || !ok2 || token <= 0 {
		return "", 0, errorf("LOCK.INFO replied %#v", v)
	}
	return owner, token, nil
}

// fence: LOCK.FENCE through go-redis: the token it answered, or the server's
// error text.
func fence(c *redis.Client, resource string, token int64) (int64, string) {
	n, err := c.Do(ctx, "LOCK.FENCE", resource, token).Int64()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			return 0, re.Error()
		}
		return 0, "<not a server error: " + err.Error() + ">"
	}
	return n, ""
}

func goRedisCases(h *Harness, a Args) {
	library := "go-redis " + moduleVersion("github.com/redis/go-redis/v9")
	tag := fmt.Sprintf("resp%d", a.Protocol)
	name := func(s string) string { return tag + " " + s }
	plain, err := DialPlain(a.CheckPort)
	if err != nil {
		h.Report(library, name("connect"), time.Now(), err)
		return
	}
	defer plain.Close()
	rdb := newGoRedis(a, a.Protocol)
	defer rdb.Close()

	h.Case(library, name("connect"), func() error {
		pong, err := rdb.Ping(ctx).Result()
		if err != nil || pong != "PONG" {
			return errorf("PING: %q %v", pong, err)
		}
		// The connection really speaks the protocol asked for (go-redis falls
		// back to RESP2 quietly if HELLO is refused).
		info, err := rdb.Do(ctx, "CLIENT", "INFO").Text()
		if err != nil {
			return errorf("CLIENT INFO: %v", err)
		}
		for _, f := range strings.Fields(info) {
			if f == fmt.Sprintf("resp=%d", a.Protocol) {
				return nil
			}
		}
		return errorf("CLIENT INFO does not show resp=%d: %s", a.Protocol, info)
	})

	// SET NX PX through SetNX; a second SetNX from another client on the held key
	// returns false and changes nothing.
	key := unique(a.Prefix, "go-redis-"+tag)
	tok := randomHex(16)
	acquired := h.Case(library, name("acquire (SET NX PX)"), func() error {
		ok, err := rdb.SetNX(ctx, key, tok, leaseMs*time.Millisecond).Result()
		if err != nil || !ok {
			return errorf("SetNX on a free key: %v, %v", ok, err)
		}
		if _, err := plain.ExpectOwner(key, tok, leaseMs, 1000); err != nil {
			return err
		}
		if _, err := plain.ExpectTokenOwner(key, tok); err != nil {
			return err
		}
		other := newGoRedis(a, a.Protocol)
		defer other.Close()
		ok, err = other.SetNX(ctx, key, randomHex(16), leaseMs*time.Millisecond).Result()
		if err != nil || ok {
			return errorf("a second SetNX on a held key returned %v, %v; expected false", ok, err)
		}
		_, err = plain.ExpectOwner(key, tok, leaseMs, 1000)
		return err
	})

	// The release script through redis.NewScript: EVALSHA meets NOSCRIPT, Run
	// falls back to EVAL; a non-owner's release does nothing; the owner's deletes
	// the key; SCRIPT LOAD answers the SHA1 go-redis computed, and EVALSHA runs it.
	h.Case(library, name("release (NewScript: EVALSHA, NOSCRIPT, EVAL)"), func() error {
		if !acquired {
			return errorf("no lock: acquire failed")
		}
		src := unlockScript(a.Prefix, tag)
		script := redis.NewScript(src)
		cached, err := plain.ScriptCached(src)
		if err != nil {
			return err
		}
		if cached {
			return errorf("server: SCRIPT EXISTS finds a script unique to this run before it was sent")
		}
		if err := script.EvalSha(ctx, rdb, []string{key}, "not-the-owner").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return errorf("EVALSHA of an unknown script: %v, expected a NOSCRIPT error", err)
		}
		n, err := script.Run(ctx, rdb, []string{key}, "not-the-owner").Int64()
		if err != nil || n != 0 {
			return errorf("release by a non-owner (Run) returned %d, %v; expected 0", n, err)
		}
		if _, err := plain.ExpectOwner(key, tok, leaseMs, 1000); err != nil {
			return err
		}
		n, err = script.Run(ctx, rdb, []string{key}, tok).Int64()
		if err != nil || n != 1 {
			return errorf("release by the owner (Run) returned %d, %v; expected 1", n, err)
		}
		if err := plain.ExpectGone(key); err != nil {
			return err
		}
		n, err = script.Run(ctx, rdb, []string{key}, tok).Int64()
		if err != nil || n != 0 {
			return errorf("a second release returned %d, %v; expected 0", n, err)
		}
		sha, err := script.Load(ctx, rdb).Result()
		if err != nil || sha != script.Hash() {
			return errorf("SCRIPT LOAD answered %q, %v; go-redis computed %s", sha, err, script.Hash())
		}
		n, err = script.EvalSha(ctx, rdb, []string{key}, tok).Int64()
		if err != nil || n != 0 {
			return errorf("EVALSHA after SCRIPT LOAD returned %d, %v; expected 0", n, err)
		}
		return nil
	})

	// A holder takes an 800 ms lease and never releases it; another client
	// retrying SetNX is refused until the lease has run out, then gets the lock
	// with a higher token; the old holder's late release does not touch it.
	h.Case(library, name("expiry (crashed holder)"), func() error {
		key := unique(a.Prefix, "go-redis-expiry-"+tag)
		const shortMs = 800
		dead := randomHex(16)
		holder := newGoRedis(a, a.Protocol)
		since := time.Now()
		ok, err := holder.SetNX(ctx, key, dead, shortMs*time.Millisecond).Result()
		holder.Close()
		if err != nil || !ok {
			return errorf("holder SetNX: %v, %v", ok, err)
		}
		oldToken, err := plain.ExpectTokenOwner(key, dead)
		if err != nil {
			return err
		}
		other := newGoRedis(a, a.Protocol)
		defer other.Close()
		me := randomHex(16)
		tries := 0
		var acquiredAt time.Time
		for {
			ok, err := other.SetNX(ctx, key, me, leaseMs*time.Millisecond).Result()
			if err != nil {
				return errorf("SetNX: %v", err)
			}
			tries++
			if ok {
				acquiredAt = time.Now()
				break
			}
			if time.Since(since) > 30*time.Second {
				return errorf("no one got the lock within 30 s of an %d ms lease", shortMs)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if acquiredAt.Add(5 * time.Millisecond).Before(since.Add(shortMs * time.Millisecond)) {
			return errorf("the lock was taken %v after the holder's %d ms lease was requested", acquiredAt.Sub(since), shortMs)
		}
		if tries < 2 {
			return errorf("the first SetNX on a held lock succeeded")
		}
		if _, err := plain.ExpectOwner(key, me, leaseMs, 1000); err != nil {
			return err
		}
		newToken, err := plain.ExpectTokenOwner(key, me)
		if err != nil {
			return err
		}
		if newToken <= oldToken {
			return errorf("token after the expiry %d, not above the crashed holder's %d", newToken, oldToken)
		}
		script := redis.NewScript(unlockScript(a.Prefix, tag))
		if n, err := script.Run(ctx, rdb, []string{key}, dead).Int64(); err != nil || n != 0 {
			return errorf("the expired holder's release returned %d, %v; expected 0", n, err)
		}
		if _, err := plain.ExpectOwner(key, me, leaseMs, 1000); err != nil {
			return err
		}
		if n, err := script.Run(ctx, other, []string{key}, me).Int64(); err != nil || n != 1 {
			return errorf("release returned %d, %v; expected 1", n, err)
		}
		return plain.ExpectGone(key)
	})

	// Tokens from LOCK.INFO through go-redis (an array in RESP2, a map in RESP3);
	// the resource honours each holder's token, then refuses the first, lower one
	// with the exact STALE error.
	h.Case(library, name("fenced write"), func() error {
		key := unique(a.Prefix, "go-redis-fence-"+tag)
		resource := unique(a.Prefix, "go-redis-resource-"+tag)
		script := redis.NewScript(unlockScript(a.Prefix, tag))
		first := randomHex(16)
		if ok, err := rdb.SetNX(ctx, key, first, leaseMs*time.Millisecond).Result(); err != nil || !ok {
			return errorf("first holder SetNX: %v, %v", ok, err)
		}
		owner, t1, err := lockInfo(rdb, key)
		if err != nil {
			return err
		}
		if owner != first {
			return errorf("LOCK.INFO owner %q, expected %q", owner, first)
		}
		if pt, err := plain.ExpectTokenOwner(key, first); err != nil || pt != t1 {
			return errorf("plain LOCK.INFO token %d (%v), go-redis read %d", pt, err, t1)
		}
		if n, e := fence(rdb, resource, t1); e != "" || n != t1 {
			return errorf("LOCK.FENCE with the holder's token %d: %d %s", t1, n, e)
		}
		if n, err := script.Run(ctx, rdb, []string{key}, first).Int64(); err != nil || n != 1 {
			return errorf("first release returned %d, %v", n, err)
		}
		other := newGoRedis(a, a.Protocol)
		defer other.Close()
		second := randomHex(16)
		if ok, err := other.SetNX(ctx, key, second, leaseMs*time.Millisecond).Result(); err != nil || !ok {
			return errorf("second holder SetNX: %v, %v", ok, err)
		}
		owner, t2, err := lockInfo(other, key)
		if err != nil {
			return err
		}
		if owner != second || t2 <= t1 {
			return errorf("second holder: owner %q token %d (first token %d)", owner, t2, t1)
		}
		if n, e := fence(other, resource, t2); e != "" || n != t2 {
			return errorf("LOCK.FENCE with the second holder's token %d: %d %s", t2, n, e)
		}
		if n, e := fence(rdb, resource, t1); e != staleText(t1, t2) {
			return errorf("LOCK.FENCE with the first holder's lower token gave %d %q, expected -%s", n, e, staleText(t1, t2))
		}
		if err := plain.ExpectFence(resource, t1, t2); err != nil {
			return err
		}
		if err := plain.ExpectFence(resource, t2, t2); err != nil {
			return err
		}
		if n, err := script.Run(ctx, other, []string{key}, second).Int64(); err != nil || n != 1 {
			return errorf("second release returned %d, %v", n, err)
		}
		return plain.ExpectGone(key)
	})
}
