package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/clock"
)

// memConn is a connection whose visitor sent in and then stopped: reads
// give in, then EOF; writes are kept.
type memConn struct {
	mu     sync.Mutex
	in     *bytes.Reader
	out    bytes.Buffer
	closed bool
}

func (m *memConn) Read(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, net.ErrClosed
	}
	return m.in.Read(p)
}

func (m *memConn) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, net.ErrClosed
	}
	return m.out.Write(p)
}

func (m *memConn) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func (m *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }
func (m *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 5000} }
func (m *memConn) SetDeadline(time.Time) error      { return nil }
func (m *memConn) SetReadDeadline(time.Time) error  { return nil }
func (m *memConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzServeConn feeds arbitrary bytes to a connection and checks that the
// server answers only with well-formed answers it means (never a 500, never
// a panic, never a half-written head), and that it ends.
func FuzzServeConn(f *testing.F) {
	for _, seed := range []string{
		get("/len") + get("/small"),
		"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET /stream HTTP/1.0\r\n\r\n",
		"HEAD /len HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n folded: x\r\n\r\n",
		"GET http://other/ HTTP/1.1\r\nHost: a\r\n\r\n",
		"CONNECT a:443 HTTP/1.1\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("y", 300) + "\r\n\r\n",
		"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	s := &Server{Handler: http.HandlerFunc(answers), Clock: clock.NewFake(time.Unix(0, 0)), MaxHeaderBytes: 256}
	s.init()
	f.Fuzz(func(t *testing.T, in []byte) {
		mc := &memConn{in: bytes.NewReader(in)}
		c := s.newConn(mc)
		done := make(chan struct{})
		go func() { defer close(done); c.serve() }()
		select {
		case <-done: // the input ended, and so did the connection
		case <-time.After(10 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("the connection did not end on %q:\n%s", in, buf[:runtime.Stack(buf, true)])
		}
		out := mc.out.Bytes()
		if len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.1 ")) {
			t.Fatalf("output does not start with a status line: %q", out)
		}
		if bytes.Contains(in, []byte("HEAD")) {
			// A HEAD answer's length describes a body that is not there;
			// without knowing which answer is whose, only the first is read.
			if len(out) > 0 {
				checkAnswer(t, in, out, true)
			}
			return
		}
		checkAnswer(t, in, out, false)
	})
}

// checkAnswer parses the answers in out (only the first when first).
func checkAnswer(t *testing.T, in, out []byte, first bool) {
	br := bufio.NewReader(bytes.NewReader(out))
	for {
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("an answer that does not parse (%v) in %q", err, out)
		}
		switch resp.StatusCode {
		case 100, 200, 204, 400, 404, 417, 431, 505:
		default:
			t.Fatalf("answered %d to %q", resp.StatusCode, in)
		}
		if first {
			return
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil && !(errors.Is(err, io.ErrUnexpectedEOF) && bytes.Contains(in, []byte("/short"))) {
			t.Fatalf("a body that does not parse (%v) in %q", err, out)
		}
	}
}
