// Go clients against raftlock, unchanged:
//
//   - go-redis v9 as applications use it for locks: SET key token NX PX through
//     SetNX, and a compare-and-delete Lua script through redis.NewScript (Run:
//     EVALSHA, then EVAL on NOSCRIPT); contention, expiry, fenced write; in the
//     protocol asked for (go-redis's Protocol option, 2 or 3);
//   - redsync v4 with its go-redis v9 pool: Mutex Lock/Unlock, TryLock on a held
//     mutex, Extend, 8 goroutines contending for one mutex, a holder that never
//     unlocks, Unlock of an expired and of a stolen lock;
//   - rueidis (rueidis_cases.go): the lock recipe through its command builder and
//     NewLuaScript, client-side caching (DoCache over CLIENT TRACKING, in OPTIN,
//     OPTOUT and BCAST mode) invalidated by other clients' writes, and the same
//     client with DisableCache;
//   - rueidislock (rueidislock_cases.go): its Locker (KeyMajority 1) with
//     client-side caching (OPTOUT, and OPTOUT NOLOOP) and with DisableCache:
//     WithContext, TryWithContext, contention, extension, cancellation, and a
//     waiter woken by the release (an invalidation push, or its polling).
//
// rueidis speaks RESP3 whatever --protocol says (it needs it for the cache).
//
// A case passes only if the library reports success AND a plain RESP2 client on
// a raw net.Conn (plain.go, independent of both libraries) reads back the state
// the library believes in. Each case prints
// RESULT<TAB>library<TAB>case<TAB>PASS|FAIL<TAB>detail for tests/interop/run.sh.
//
//	raftlock-interop-go --port P --check-port C --prefix X --protocol 2|3 \
//	    [--only go-redis,redsync,rueidis,rueidislock] [--trace FILE]
//
// --trace FILE (by hand) puts a logging proxy (trace.go) between the libraries
// and --port: every command and reply, push frames included, goes into FILE.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"
)

type Harness struct {
	failed int
}

// Case runs fn and prints its RESULT line; true if it passed.
func (h *Harness) Case(library, name string, fn func() error) bool {
	t0 := time.Now()
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return fn()
	}()
	return h.Report(library, name, t0, err)
}

func (h *Harness) Report(library, name string, t0 time.Time, err error) bool {
	took := fmt.Sprintf("%.1fs", time.Since(t0).Seconds())
	if err == nil {
		fmt.Printf("RESULT\t%s\t%s\tPASS\t%s\n", library, name, took)
		return true
	}
	h.failed++
	detail := strings.Join(strings.Fields(err.Error()), " ")
	if utf8.RuneCountInString(detail) > 400 {
		detail = string([]rune(detail)[:400])
	}
	fmt.Printf("RESULT\t%s\t%s\tFAIL\t%s %s\n", library, name, took, detail)
	return false
}

// errorf is fmt.Errorf, named for the checks that read like assertions.
func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

// moduleVersion: the version of a module this binary was built with ("9.23.0").
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil {
					d = d.Replace
				}
				return strings.TrimPrefix(d.Version, "v")
			}
		}
	}
	return "?"
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func unique(prefix, name string) string {
	return prefix + ":" + name + ":" + randomHex(4)
}

type Args struct {
	Port, CheckPort, Protocol int
	Prefix                    string
	// Vanilla: the server is a real Redis (to check the cases themselves): the
	// checks of raftlock's own LOCK.INFO are skipped (rueidis groups only).
	Vanilla bool
}

func main() {
	var a Args
	flag.IntVar(&a.Port, "port", 0, "node the libraries talk to")
	flag.IntVar(&a.CheckPort, "check-port", 0, "node the plain checker reads from")
	flag.StringVar(&a.Prefix, "prefix", "interop", "key prefix (unique per run)")
	flag.IntVar(&a.Protocol, "protocol", 3, "RESP version go-redis asks for (2 or 3)")
	only := flag.String("only", "go-redis,redsync", "comma-separated: go-redis, redsync, rueidis, rueidislock")
	flag.BoolVar(&a.Vanilla, "vanilla", false, "the server is a real Redis: skip LOCK.INFO checks (rueidis groups)")
	trace := flag.String("trace", "", "log every command and reply the libraries exchange with --port into this file")
	flag.Parse()
	if a.Port == 0 || a.CheckPort == 0 || (a.Protocol != 2 && a.Protocol != 3) {
		fmt.Fprintln(os.Stderr, "usage: raftlock-interop-go --port P --check-port C [--prefix X] [--protocol 2|3] [--only GROUPS] [--trace FILE]")
		os.Exit(2)
	}
	if *trace != "" {
		port, stop, err := startTrace(a.Port, *trace)
		if err != nil {
			fmt.Fprintln(os.Stderr, "--trace:", err)
			os.Exit(2)
		}
		defer stop()
		a.Port = port
	}
	h := &Harness{}
	for _, g := range strings.Split(*only, ",") {
		switch strings.TrimSpace(g) {
		case "go-redis":
			goRedisCases(h, a)
		case "redsync":
			redsyncCases(h, a)
		case "rueidis":
			rueidisCases(h, a)
		case "rueidislock":
			rueidislockCases(h, a)
		default:
			fmt.Fprintf(os.Stderr, "unknown group %q\n", g)
			os.Exit(2)
		}
	}
	if h.failed > 0 {
		os.Exit(1) // the trace file is flushed line by line
	}
}
