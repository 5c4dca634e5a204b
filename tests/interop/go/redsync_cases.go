package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// The mutexes' expiry (redsync's default is 8 s; short here to keep the group fast).
const mutexExpiry = 2 * time.Second

// A client of its own, as a separate process would have.
func newRedsync(a Args) (*redsync.Redsync, *redis.Client) {
	c := newGoRedis(a, a.Protocol)
	return redsync.New(goredis.NewPool(c)), c
}

func isTaken(err error) bool {
	var taken *redsync.ErrTaken
	return errors.As(err, &taken)
}

func redsyncCases(h *Harness, a Args) {
	library := "redsync " + moduleVersion("github.com/go-redsync/redsync/v4")
	tag := fmt.Sprintf("resp%d", a.Protocol)
	name := func(s string) string { return tag + " " + s }
	ttlMs := mutexExpiry.Milliseconds()
	plain, err := DialPlain(a.CheckPort)
	if err != nil {
		h.Report(library, name("Lock"), time.Now(), err)
		return
	}
	defer plain.Close()
	rs, c := newRedsync(a)
	defer c.Close()

	lockName := unique(a.Prefix, "redsync-"+tag)
	m := rs.NewMutex(lockName, redsync.WithExpiry(mutexExpiry))
	locked := h.Case(library, name("Lock"), func() error {
		since := time.Now()
		if err := m.Lock(); err != nil {
			return errorf("Lock(): %v", err)
		}
		if m.Value() == "" || !m.Until().After(time.Now()) || m.Until().After(since.Add(mutexExpiry)) {
			return errorf("after Lock(): Value()=%q, Until() %v from now", m.Value(), time.Until(m.Until()))
		}
		if _, err := plain.ExpectOwner(lockName, m.Value(), ttlMs, 1000); err != nil {
			return err
		}
		_, err := plain.ExpectTokenOwner(lockName, m.Value())
		return err
	})

	h.Case(library, name("TryLock on a held mutex"), func() error {
		if !locked {
			return errorf("no lock: Lock() failed")
		}
		rs2, c2 := newRedsync(a)
		defer c2.Close()
		m2 := rs2.NewMutex(lockName, redsync.WithExpiry(mutexExpiry))
		err := m2.TryLock()
		if !isTaken(err) {
			return errorf("TryLock() on a held mutex returned %v, expected redsync.ErrTaken", err)
		}
		// Lock() with a few retries fails the same way.
		m3 := rs2.NewMutex(lockName, redsync.WithExpiry(mutexExpiry), redsync.WithTries(3), redsync.WithRetryDelay(50*time.Millisecond))
		if err := m3.Lock(); !isTaken(err) {
			return errorf("Lock() with 3 tries on a held mutex returned %v, expected redsync.ErrTaken", err)
		}
		_, err = plain.ExpectOwner(lockName, m.Value(), ttlMs, 1000)
		return err
	})

	h.Case(library, name("Extend"), func() error {
		if !locked {
			return errorf("no lock: Lock() failed")
		}
		time.Sleep(700 * time.Millisecond)
		before, err := plain.ExpectOwner(lockName, m.Value(), ttlMs, ttlMs)
		if err != nil {
			return err
		}
		untilBefore := m.Until()
		ok, err := m.Extend()
		if err != nil || !ok {
			return errorf("Extend(): %v, %v", ok, err)
		}
		after, err := plain.ExpectOwner(lockName, m.Value(), ttlMs, 1000)
		if err != nil {
			return err
		}
		if after <= before {
			return errorf("server: PTTL %d after Extend(), %d before it", after, before)
		}
		if !m.Until().After(untilBefore) {
			return errorf("Until() did not move: %v before Extend(), %v after", untilBefore, m.Until())
		}
		return nil
	})

	h.Case(library, name("Unlock"), func() error {
		if !locked {
			return errorf("no lock: Lock() failed")
		}
		ok, err := m.Unlock()
		if err != nil || !ok {
			return errorf("Unlock(): %v, %v", ok, err)
		}
		if err := plain.ExpectGone(lockName); err != nil {
			return err
		}
		ok, err = m.Unlock()
		if ok || !errors.Is(err, redsync.ErrLockAlreadyExpired) {
			return errorf("a second Unlock(): %v, %v; expected false, ErrLockAlreadyExpired", ok, err)
		}
		return nil
	})

	// 8 goroutines, each with its own client and Redsync (as 8 processes), take
	// one mutex 5 times each and increment a counter key under it with a GET and
	// a SET apart. Each checks, while it holds the mutex, that no other goroutine
	// does (an in-process holder slot) and that the server has its value on the
	// lock; the counter ends exact.
	h.Case(library, name("8 goroutines contend (counter)"), func() error {
		const workers, rounds = 8, 5
		mutexName := unique(a.Prefix, "redsync-contended-"+tag)
		counter := unique(a.Prefix, "redsync-counter-"+tag)
		cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		defer cancel()
		var holder atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := 1; w <= workers; w++ {
			wg.Add(1)
			go func(id int32) {
				defer wg.Done()
				errs <- func() error {
					rs, c := newRedsync(a)
					defer c.Close()
					p, err := DialPlain(a.CheckPort)
					if err != nil {
						return err
					}
					defer p.Close()
					for r := 0; r < rounds; r++ {
						m := rs.NewMutex(mutexName, redsync.WithExpiry(mutexExpiry), redsync.WithTries(1000))
						if err := m.LockContext(cctx); err != nil {
							return errorf("goroutine %d round %d: LockContext(): %v", id, r, err)
						}
						if !holder.CompareAndSwap(0, id) {
							return errorf("goroutine %d got the mutex while goroutine %d held it", id, holder.Load())
						}
						if v, err := p.Get(mutexName); err != nil || string(v) != m.Value() {
							return errorf("goroutine %d holds the mutex; server: GET = %s (%v), its value %q", id, show(v), err, m.Value())
						}
						n, err := c.Get(ctx, counter).Int64()
						if err != nil && err != redis.Nil {
							return errorf("GET counter: %v", err)
						}
						time.Sleep(5 * time.Millisecond)
						if err := c.Set(ctx, counter, n+1, 0).Err(); err != nil {
							return errorf("SET counter: %v", err)
						}
						if v, err := p.Get(mutexName); err != nil || string(v) != m.Value() {
							return errorf("goroutine %d still holds the mutex; server: GET = %s (%v), its value %q", id, show(v), err, m.Value())
						}
						if time.Now().After(m.Until()) {
							return errorf("goroutine %d: the critical section outlasted the mutex's validity", id)
						}
						if !holder.CompareAndSwap(id, 0) {
							return errorf("goroutine %d: goroutine %d took the mutex while it was held", id, holder.Load())
						}
						if ok, err := m.Unlock(); err != nil || !ok {
							return errorf("goroutine %d: Unlock(): %v, %v", id, ok, err)
						}
					}
					return nil
				}()
			}(int32(w))
		}
		wg.Wait()
		close(errs)
		var all []error
		for err := range errs {
			if err != nil {
				all = append(all, err)
			}
		}
		if len(all) > 0 {
			return errors.Join(all...)
		}
		v, err := plain.Get(counter)
		if err != nil {
			return err
		}
		if string(v) != strconv.Itoa(workers*rounds) {
			return errorf("server: GET counter = %s after %d increments under the mutex", show(v), workers*rounds)
		}
		return plain.ExpectGone(mutexName)
	})

	// A holder takes a 1.2 s mutex and never unlocks it: a second mutex is refused
	// (TryLock, then Lock retrying every 50 ms) until the lease has run out, then
	// gets it with a higher token; the old holder's late Unlock and Extend fail
	// with ErrTaken and leave the new holder's lock alone.
	h.Case(library, name("expiry (holder never unlocks)"), func() error {
		const shortExpiry = 1200 * time.Millisecond
		mutexName := unique(a.Prefix, "redsync-expiry-"+tag)
		rs1, c1 := newRedsync(a)
		defer c1.Close()
		dead := rs1.NewMutex(mutexName, redsync.WithExpiry(shortExpiry))
		since := time.Now()
		if err := dead.Lock(); err != nil {
			return errorf("holder Lock(): %v", err)
		}
		oldToken, err := plain.ExpectTokenOwner(mutexName, dead.Value())
		if err != nil {
			return err
		}
		rs2, c2 := newRedsync(a)
		defer c2.Close()
		if err := rs2.NewMutex(mutexName, redsync.WithExpiry(mutexExpiry)).TryLock(); !isTaken(err) {
			return errorf("TryLock() on the held mutex returned %v, expected ErrTaken", err)
		}
		m2 := rs2.NewMutex(mutexName, redsync.WithExpiry(mutexExpiry), redsync.WithTries(600), redsync.WithRetryDelay(50*time.Millisecond))
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := m2.LockContext(lctx); err != nil {
			return errorf("Lock() retrying for 30 s after a %v lease: %v", shortExpiry, err)
		}
		acquiredAt := time.Now()
		if acquiredAt.Add(5 * time.Millisecond).Before(since.Add(shortExpiry)) {
			return errorf("the mutex was taken %v after the holder's %v lease was requested", acquiredAt.Sub(since), shortExpiry)
		}
		if _, err := plain.ExpectOwner(mutexName, m2.Value(), ttlMs, 1000); err != nil {
			return err
		}
		newToken, err := plain.ExpectTokenOwner(mutexName, m2.Value())
		if err != nil {
			return err
		}
		if newToken <= oldToken {
			return errorf("token after the expiry %d, not above the old holder's %d", newToken, oldToken)
		}
		if ok, err := dead.Unlock(); ok || !isTaken(err) {
			return errorf("the old holder's Unlock() of a lock now held by another: %v, %v; expected false, ErrTaken", ok, err)
		}
		if ok, err := dead.Extend(); ok || !isTaken(err) {
			return errorf("the old holder's Extend() of a lock now held by another: %v, %v; expected false, ErrTaken", ok, err)
		}
		if _, err := plain.ExpectOwner(mutexName, m2.Value(), ttlMs, 1000); err != nil {
			return err
		}
		if ok, err := m2.Unlock(); err != nil || !ok {
			return errorf("Unlock(): %v, %v", ok, err)
		}
		return plain.ExpectGone(mutexName)
	})

	// A 1 s mutex left to expire: Unlock() reports ErrLockAlreadyExpired, Extend()
	// fails, and nothing is left on the server.
	h.Case(library, name("Unlock after expiry"), func() error {
		const shortExpiry = 1000 * time.Millisecond
		mutexName := unique(a.Prefix, "redsync-expired-"+tag)
		m := rs.NewMutex(mutexName, redsync.WithExpiry(shortExpiry))
		since := time.Now()
		if err := m.Lock(); err != nil {
			return errorf("Lock(): %v", err)
		}
		if _, err := plain.ExpectOwner(mutexName, m.Value(), shortExpiry.Milliseconds(), 1000); err != nil {
			return err
		}
		if err := plain.ExpectExpires(mutexName, shortExpiry.Milliseconds(), since, 30*time.Second); err != nil {
			return err
		}
		if ok, err := m.Unlock(); ok || !errors.Is(err, redsync.ErrLockAlreadyExpired) {
			return errorf("Unlock() of an expired mutex: %v, %v; expected false, ErrLockAlreadyExpired", ok, err)
		}
		if ok, err := m.Extend(); ok || err == nil {
			return errorf("Extend() of an expired mutex: %v, %v; expected false and an error", ok, err)
		}
		return plain.ExpectGone(mutexName)
	})
}
