package main

// Plain is a minimal RESP2 client on a raw net.Conn, deliberately independent of
// go-redis and redsync: a case passes only if the library reports success AND what
// Plain reads from the server afterwards (GET, PTTL, EXISTS, LOCK.INFO) agrees
// with what the library believes.

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// ServerError is an error reply (the text after the '-').
type ServerError string

func (e ServerError) Error() string { return string(e) }

// Status is a simple-string reply (the text after the '+').
type Status string

// Reply values: Status, ServerError, int64, []byte (a bulk string), nil (a null
// bulk or array), []any (an array).

type Plain struct {
	conn    net.Conn
	r       *bufio.Reader
	timeout time.Duration
}

func DialPlain(port int) (*Plain, error) {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("plain connect: %w", err)
	}
	return &Plain{conn: c, r: bufio.NewReader(c), timeout: 10 * time.Second}, nil
}

func (p *Plain) Close() { p.conn.Close() }

func (p *Plain) line() (string, error) {
	l, err := p.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("plain read: %w", err)
	}
	if len(l) < 2 || l[len(l)-2] != '\r' {
		return "", fmt.Errorf("plain: line without CRLF: %q", l)
	}
	return l[:len(l)-2], nil
}

func (p *Plain) reply() (any, error) {
	l, err := p.line()
	if err != nil {
		return nil, err
	}
	if l == "" {
		return nil, fmt.Errorf("plain: empty reply line")
	}
	kind, rest := l[0], l[1:]
	switch kind {
	case '+':
		return Status(rest), nil
	case '-':
		return ServerError(rest), nil
	case ':':
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("plain: bad integer %q", rest)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return nil, fmt.Errorf("plain: bad bulk length %q", rest)
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(p.r, b); err != nil {
			return nil, fmt.Errorf("plain read: %w", err)
		}
		return b[:n], nil
	case '*':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return nil, fmt.Errorf("plain: bad array length %q", rest)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, 0, n)
		for i := 0; i < n; i++ {
			v, err := p.reply()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("plain: unexpected RESP2 reply %q", l)
}

// Raw sends a command and returns its reply, an error reply as a ServerError
// value; the error is for the connection only.
func (p *Plain) Raw(args ...any) (any, error) {
	buf := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		s := fmt.Sprint(a)
		buf = append(buf, '$')
		buf = strconv.AppendInt(buf, int64(len(s)), 10)
		buf = append(buf, "\r\n"...)
		buf = append(buf, s...)
		buf = append(buf, "\r\n"...)
	}
	p.conn.SetDeadline(time.Now().Add(p.timeout))
	if _, err := p.conn.Write(buf); err != nil {
		return nil, fmt.Errorf("plain write: %w", err)
	}
	return p.reply()
}

// Cmd is Raw with an error reply turned into an error.
func (p *Plain) Cmd(args ...any) (any, error) {
	r, err := p.Raw(args...)
	if err != nil {
		return nil, err
	}
	if e, ok := r.(ServerError); ok {
		return nil, fmt.Errorf("server error to %v: %s", args[0], string(e))
	}
	return r, nil
}

func (p *Plain) Int(args ...any) (int64, error) {
	r, err := p.Cmd(args...)
	if err != nil {
		return 0, err
	}
	n, ok := r.(int64)
	if !ok {
		return 0, fmt.Errorf("server: %v replied %s", args, show(r))
	}
	return n, nil
}

// Get returns the value, or nil if the key does not exist.
func (p *Plain) Get(key string) ([]byte, error) {
	r, err := p.Cmd("GET", key)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, nil
	}
	b, ok := r.([]byte)
	if !ok {
		return nil, fmt.Errorf("server: GET %s replied %s", key, show(r))
	}
	return b, nil
}

// ExpectOwner: key holds exactly owner and its PTTL is within (ttl - slack, ttl].
// Returns the PTTL.
func (p *Plain) ExpectOwner(key, owner string, ttlMs, slackMs int64) (int64, error) {
	got, err := p.Get(key)
	if err != nil {
		return 0, err
	}
	if got == nil || string(got) != owner {
		return 0, fmt.Errorf("server: GET %s = %s, library believes the owner is %q", key, show(got), owner)
	}
	pttl, err := p.Int("PTTL", key)
	if err != nil {
		return 0, err
	}
	if !(pttl > ttlMs-slackMs && pttl <= ttlMs) {
		return pttl, fmt.Errorf("server: PTTL %s = %d, expected about %d ms (within (%d, %d])", key, pttl, ttlMs, ttlMs-slackMs, ttlMs)
	}
	return pttl, nil
}

// ExpectExpires: key goes, not before its TTL (counted from since, taken before
// the command that set it; 5 ms of slack for log time in whole milliseconds), and
// within a bounded wait after it.
func (p *Plain) ExpectExpires(key string, ttlMs int64, since time.Time, within time.Duration) error {
	ends := since.Add(time.Duration(ttlMs) * time.Millisecond)
	for {
		n, err := p.Int("EXISTS", key)
		if err != nil {
			return err
		}
		replied := time.Now()
		if n == 0 {
			if replied.Before(ends.Add(-5 * time.Millisecond)) {
				return fmt.Errorf("server: %s gone %.3f s after its %d ms lease was requested, before its TTL",
					key, replied.Sub(since).Seconds(), ttlMs)
			}
			return nil
		}
		if replied.After(ends.Add(within)) {
			return fmt.Errorf("server: %s still exists %.1f s after a %d ms lease was requested",
				key, replied.Sub(since).Seconds(), ttlMs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LockInfo: (owner, token, true) from LOCK.INFO, or ok=false if the lock is free.
func (p *Plain) LockInfo(key string) (owner string, token int64, ok bool, err error) {
	r, err := p.Cmd("LOCK.INFO", key)
	if err != nil || r == nil {
		return "", 0, false, err
	}
	a, isArr := r.([]any)
	names := []string{"owner", "token", "ttl-ms", "waiters", "next-waiter"}
	if !isArr || len(a) != 10 {
		return "", 0, false, fmt.Errorf("server: LOCK.INFO %s = %s", key, show(r))
	}
	for i, n := range names {
		if b, isB := a[2*i].([]byte); !isB || string(b) != n {
			return "", 0, false, fmt.Errorf("server: LOCK.INFO %s = %s", key, show(r))
		}
	}
	o, isB := a[1].([]byte)
	t, isI := a[3].(int64)
	if !isB || !isI {
		return "", 0, false, fmt.Errorf("server: LOCK.INFO %s = %s", key, show(r))
	}
	return string(o), t, true, nil
}

// ExpectTokenOwner: LOCK.INFO shows owner; returns its token.
func (p *Plain) ExpectTokenOwner(key, owner string) (int64, error) {
	o, t, ok, err := p.LockInfo(key)
	if err != nil {
		return 0, err
	}
	if !ok || o != owner || t <= 0 {
		return 0, fmt.Errorf("server: LOCK.INFO %s = (owner %q, token %d, held %v), expected owner %q", key, o, t, ok, owner)
	}
	return t, nil
}

// ExpectFence: LOCK.FENCE resource token is honoured (returns token) if token >=
// highest, else refused with exactly the STALE error naming both.
func (p *Plain) ExpectFence(resource string, token, highest int64) error {
	r, err := p.Raw("LOCK.FENCE", resource, token)
	if err != nil {
		return err
	}
	if token >= highest {
		if n, ok := r.(int64); !ok || n != token {
			return fmt.Errorf("server: LOCK.FENCE %s %d = %s, expected %d", resource, token, show(r), token)
		}
		return nil
	}
	if e, ok := r.(ServerError); !ok || string(e) != staleText(token, highest) {
		return fmt.Errorf("server: LOCK.FENCE %s %d = %s, expected -%s", resource, token, show(r), staleText(token, highest))
	}
	return nil
}

func (p *Plain) ExpectGone(key string) error {
	n, err := p.Int("EXISTS", key)
	if err != nil {
		return err
	}
	if n != 0 {
		v, _ := p.Get(key)
		return fmt.Errorf("server: EXISTS %s = %d after release, expected 0 (GET=%s)", key, n, show(v))
	}
	return nil
}

// ScriptCached: SCRIPT EXISTS for the SHA1 of src, computed here.
func (p *Plain) ScriptCached(src string) (bool, error) {
	sum := sha1.Sum([]byte(src))
	r, err := p.Cmd("SCRIPT", "EXISTS", hex.EncodeToString(sum[:]))
	if err != nil {
		return false, err
	}
	a, ok := r.([]any)
	if !ok || len(a) != 1 {
		return false, fmt.Errorf("server: SCRIPT EXISTS replied %s", show(r))
	}
	n, ok := a[0].(int64)
	if !ok || (n != 0 && n != 1) {
		return false, fmt.Errorf("server: SCRIPT EXISTS replied %s", show(r))
	}
	return n == 1, nil
}

// staleText is the exact error (without the '-') for a fence below the highest token.
func staleText(token, highest int64) string {
	return fmt.Sprintf("STALE token %d is lower than %d, the highest honored for this resource", token, highest)
}

// show renders a reply for a message.
func show(r any) string {
	switch v := r.(type) {
	case nil:
		return "(nil)"
	case []byte:
		if v == nil {
			return "(nil)"
		}
		return strconv.Quote(string(v))
	case Status:
		return "+" + string(v)
	case ServerError:
		return "-" + string(v)
	case []any:
		s := "["
		for i, e := range v {
			if i > 0 {
				s += " "
			}
			s += show(e)
		}
		return s + "]"
	}
	return fmt.Sprintf("%v", r)
}
