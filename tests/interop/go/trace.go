package main

// A logging TCP proxy for --trace FILE (by hand, not used by run.sh): the
// libraries talk to it, it talks to --port, and every RESP frame in either
// direction goes into FILE as one line,
//
//	12.345 c3 > CLIENT TRACKING ON OPTIN
//	12.346 c3 < +OK
//	12.400 c3 < >["invalidate" ["key"]]
//
// (seconds since the start, the connection's number, > from the client, < from
// the server; bulk strings shown quoted when they are not plain words, binary
// and long ones abbreviated). The bytes are forwarded as they are read; the
// parsing only watches them.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type tracer struct {
	mu    sync.Mutex
	w     *bufio.Writer
	f     *os.File
	t0    time.Time
	conns atomic.Int64
}

func (t *tracer) log(conn int64, dir, text string) {
	t.mu.Lock()
	fmt.Fprintf(t.w, "%.3f c%d %s %s\n", time.Since(t.t0).Seconds(), conn, dir, text)
	t.w.Flush()
	t.mu.Unlock()
}

// startTrace listens on a free 127.0.0.1 port in front of upstream; returns the
// port and a function that stops listening and flushes the file.
func startTrace(upstream int, path string) (int, func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		return 0, nil, err
	}
	t := &tracer{w: bufio.NewWriter(f), f: f, t0: time.Now()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go t.serve(c, upstream)
		}
	}()
	stop := func() {
		ln.Close()
		t.mu.Lock()
		t.w.Flush()
		t.mu.Unlock()
	}
	return ln.Addr().(*net.TCPAddr).Port, stop, nil
}

func (t *tracer) serve(c net.Conn, upstream int) {
	id := t.conns.Add(1)
	u, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(upstream)), 5*time.Second)
	if err != nil {
		t.log(id, "!", "upstream: "+err.Error())
		c.Close()
		return
	}
	t.log(id, "+", "connected from "+c.RemoteAddr().String())
	var wg sync.WaitGroup
	wg.Add(2)
	pump := func(dst, src net.Conn, dir string) {
		defer wg.Done()
		r := bufio.NewReader(io.TeeReader(src, dst))
		for {
			v, err := readFrame(r)
			if err != nil {
				if err != io.EOF && !strings.Contains(err.Error(), "use of closed") {
					t.log(id, dir, "(stream: "+err.Error()+"; copying the rest unparsed)")
					io.Copy(io.Discard, r)
				}
				break
			}
			if dir == ">" {
				t.log(id, dir, showCommand(v))
			} else {
				t.log(id, dir, v.show())
			}
		}
		// One side is done: end both.
		c.Close()
		u.Close()
	}
	go pump(u, c, ">")
	go pump(c, u, "<")
	wg.Wait()
	t.log(id, "-", "closed")
}

// frame is one RESP2/RESP3 value as seen on the wire.
type frame struct {
	kind  byte // the type byte: + - : $ * % ~ > _ # , ( = ! |
	text  string
	items []frame
	null  bool
}

func readFrame(r *bufio.Reader) (frame, error) {
	l, err := r.ReadString('\n')
	if err != nil {
		return frame{}, err
	}
	l = strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "\r")
	if l == "" {
		return frame{}, fmt.Errorf("empty line")
	}
	kind, rest := l[0], l[1:]
	switch kind {
	case '+', '-', ':', '_', '#', ',', '(':
		return frame{kind: kind, text: rest, null: kind == '_'}, nil
	case '$', '=', '!':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return frame{}, fmt.Errorf("bad length %q", l)
		}
		if n < 0 {
			return frame{kind: kind, null: true}, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return frame{}, err
		}
		return frame{kind: kind, text: string(b[:n])}, nil
	case '*', '%', '~', '>', '|':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return frame{}, fmt.Errorf("bad length %q", l)
		}
		if n < 0 {
			return frame{kind: kind, null: true}, nil
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		f := frame{kind: kind}
		for i := 0; i < n; i++ {
			v, err := readFrame(r)
			if err != nil {
				return frame{}, err
			}
			f.items = append(f.items, v)
		}
		if kind == '|' { // an attribute precedes the real reply
			v, err := readFrame(r)
			if err != nil {
				return frame{}, err
			}
			f.items = append(f.items, v)
		}
		return f, nil
	}
	// An inline command (redis-cli style): the words of the line.
	f := frame{kind: '*'}
	for _, w := range strings.Fields(l) {
		f.items = append(f.items, frame{kind: '$', text: w})
	}
	return f, nil
}

func word(s string) string {
	if s == "" {
		return `""`
	}
	plain, text := true, true // plain: one bare word; text: worth quoting
	for _, c := range s {
		if c <= ' ' || c > '~' || c == '"' {
			plain = false
		}
		if (c < ' ' && c != '\n' && c != '\t' && c != '\r') || c > '~' {
			text = false
		}
	}
	switch {
	case plain && len(s) <= 80:
		return s
	case !text:
		return fmt.Sprintf("<%d binary bytes>", len(s))
	case len(s) > 80:
		return strconv.Quote(s[:60]) + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// showCommand: a command array as its words.
func showCommand(f frame) string {
	if f.kind != '*' {
		return "(not a command) " + f.show()
	}
	parts := make([]string, len(f.items))
	for i, it := range f.items {
		parts[i] = word(it.text)
	}
	return strings.Join(parts, " ")
}

func (f frame) show() string {
	if f.null {
		switch f.kind {
		case '_':
			return "_null"
		case '*':
			return "*(nil array)"
		}
		return "$(nil)"
	}
	switch f.kind {
	case '+', '-', ':', '#', ',', '(':
		return string(f.kind) + f.text
	case '$', '=':
		return word(f.text)
	case '!':
		return "!" + word(f.text)
	}
	open, close := "[", "]"
	switch f.kind {
	case '%':
		open, close = "{", "}"
	case '~':
		open, close = "~{", "}"
	case '>':
		open, close = ">[", "]"
	case '|':
		open, close = "|{", "}"
	}
	parts := make([]string, len(f.items))
	for i, it := range f.items {
		parts[i] = it.show()
	}
	if f.kind == '%' {
		kv := make([]string, 0, len(parts)/2)
		for i := 0; i+1 < len(parts); i += 2 {
			kv = append(kv, parts[i]+": "+parts[i+1])
		}
		parts = kv
	}
	return open + strings.Join(parts, " ") + close
}
