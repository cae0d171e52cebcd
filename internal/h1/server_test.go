package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/testwait"
)

// rig is a Server on loopback with a fake clock (which drives the watch and
// the timeout sweep; connection reads and writes are real).
type rig struct {
	t   *testing.T
	srv *Server
	clk *clock.Fake
	ln  net.Listener
}

func newRig(t *testing.T, h http.Handler) *rig { return newRigWith(t, h, nil) }

// newRigWith is newRig with the server's fields adjusted by set first.
func newRigWith(t *testing.T, h http.Handler, set func(*Server)) *rig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	s := &Server{Handler: h, Clock: clk, ReadHeaderTimeout: 4 * time.Second, IdleTimeout: 8 * time.Second}
	if set != nil {
		set(s)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return &rig{t: t, srv: s, clk: clk, ln: ln}
}

// client is one raw connection to the rig.
type client struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func (r *rig) dial() *client {
	r.t.Helper()
	nc, err := net.Dial("tcp", r.ln.Addr().String())
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { nc.Close() })
	// A bound on every read, so that a server that fails to answer fails
	// the test instead of hanging it.
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: r.t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *client) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, raw); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads one answer and its whole body.
func (c *client) answer(method string) (*http.Response, string) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading an answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b)
}

// closed reports whether the server has closed the connection (nothing
// more to read).
func (c *client) closed() bool {
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: example.test\r\n\r\n" }

func answers(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/len":
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "fixed")
	case "/small":
		io.WriteString(w, "small ")
		io.WriteString(w, "answer")
	case "/stream":
		w.Header().Set("Content-Type", "text/plain")
		for i := range 3 {
			io.WriteString(w, strings.Repeat(string(rune('a'+i)), 3000))
			w.(http.Flusher).Flush()
		}
		w.Header().Set(http.TrailerPrefix+"X-Sum", "9000")
	case "/empty":
	case "/nocontent":
		w.WriteHeader(http.StatusNoContent)
		io.WriteString(w, "dropped")
	case "/short":
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "12345")
	case "/over":
		w.Header().Set("Content-Length", "2")
		if _, err := io.WriteString(w, "123"); !errors.Is(err, http.ErrContentLength) {
			panic(fmt.Sprintf("writing past Content-Length gave %v", err))
		}
		io.WriteString(w, "12")
	case "/inject":
		w.Header().Set("X-Note", "a\r\nX-Evil: 1")
		w.Header()["Bad Name"] = []string{"x"}
		io.WriteString(w, "ok")
	case "/echo":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, "%s %s host=%s body=%s", r.Method, r.URL.RequestURI(), r.Host, b)
	default:
		http.NotFound(w, r)
	}
}

func TestAnswersAreFramedAndTheConnectionKept(t *testing.T) {
	c := newRig(t, http.HandlerFunc(answers)).dial()

	c.send(get("/len"))
	resp, body := c.answer("GET")
	if resp.StatusCode != 200 || body != "fixed" || resp.ContentLength != 5 || resp.Header.Get("Date") == "" {
		t.Fatalf("/len: %d %q length %d %v", resp.StatusCode, body, resp.ContentLength, resp.Header)
	}

	c.send(get("/small")) // no length given, short: held back and measured
	resp, body = c.answer("GET")
	if body != "small answer" || resp.ContentLength != 12 || len(resp.TransferEncoding) != 0 {
		t.Fatalf("/small: %q length %d te %v", body, resp.ContentLength, resp.TransferEncoding)
	}

	c.send(get("/stream")) // flushed as it goes: chunked, with a trailer
	resp, body = c.answer("GET")
	if len(body) != 9000 || body[0] != 'a' || body[8999] != 'c' || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("/stream: %d bytes, te %v", len(body), resp.TransferEncoding)
	}
	if got := resp.Trailer.Get("X-Sum"); got != "9000" {
		t.Fatalf("trailer X-Sum = %q", got)
	}

	c.send(get("/empty"))
	resp, body = c.answer("GET")
	if resp.StatusCode != 200 || body != "" || resp.ContentLength != 0 {
		t.Fatalf("/empty: %d %q length %d", resp.StatusCode, body, resp.ContentLength)
	}

	c.send(get("/nocontent"))
	resp, body = c.answer("GET")
	if resp.StatusCode != 204 || body != "" {
		t.Fatalf("/nocontent: %d %q", resp.StatusCode, body)
	}

	c.send("HEAD /len HTTP/1.1\r\nHost: example.test\r\n\r\n")
	resp, body = c.answer("HEAD")
	if resp.ContentLength != 5 || body != "" {
		t.Fatalf("HEAD /len: length %d body %q", resp.ContentLength, body)
	}

	c.send(get("/over"))
	if resp, body = c.answer("GET"); body != "12" {
		t.Fatalf("/over: %q", body)
	}

	c.send(get("/inject"))
	resp, _ = c.answer("GET")
	if resp.Header.Get("X-Evil") != "" || resp.Header.Get("X-Note") != "a  X-Evil: 1" || resp.Header.Get("Bad Name") != "" {
		t.Fatalf("a header value broke out of its line: %v", resp.Header)
	}

	// Everything above went over one connection; the next request too.
	c.send("POST /echo?x=1 HTTP/1.1\r\nHost: example.test\r\nContent-Length: 5\r\n\r\nhello")
	if _, body = c.answer("POST"); body != "POST /echo?x=1 host=example.test body=hello" {
		t.Fatalf("/echo: %q", body)
	}
}

func TestAShortAnswerEndsTheConnection(t *testing.T) {
	c := newRig(t, http.HandlerFunc(answers)).dial()
	c.send(get("/short")) // says 10 bytes, writes 5
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if string(b) != "12345" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %q, %v; want the 5 bytes, then the connection closed", b, err)
	}
}

func TestPipelinedRequestsAreAnsweredInOrder(t *testing.T) {
	c := newRig(t, http.HandlerFunc(answers)).dial()
	c.send(get("/len") + "POST /echo HTTP/1.1\r\nHost: example.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + get("/small"))
	for _, want := range []string{"fixed", "POST /echo host=example.test body=abc", "small answer"} {
		if _, body := c.answer("GET"); body != want {
			t.Fatalf("got %q, want %q", body, want)
		}
	}
}

func TestBadRequestsAreRefusedByName(t *testing.T) {
	cases := []struct {
		name, raw string
		code      int
		says      string
	}{
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400, "missing required Host header"},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a.test\r\nhost: b.test\r\n\r\n", 400, "too many Host headers"},
		{"bad Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "malformed Host header"},
		{"HTTP/2", "GET / HTTP/2.0\r\nHost: a.test\r\n\r\n", 505, "only HTTP/1.0 and HTTP/1.1"},
		{"not HTTP", "hello there\r\n\r\n", 400, "malformed request"},
		{"bad header name", "GET / HTTP/1.1\r\nHost: a.test\r\nBad Name: x\r\n\r\n", 400, "invalid header name"},
		{"bad length", "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: -3\r\n\r\n", 400, "malformed request"},
		{"expectation", "POST / HTTP/1.1\r\nHost: a.test\r\nExpect: something\r\nContent-Length: 1\r\n\r\nx", 417, "only expectation served is 100-continue"},
		{"huge head", "GET / HTTP/1.1\r\nHost: a.test\r\nX-Big: " + strings.Repeat("x", DefaultMaxHeaderBytes+8<<10) + "\r\n\r\n", 431, "exceed 65536 bytes"},
	}
	r := newRig(t, http.HandlerFunc(answers))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := r.dial()
			go io.WriteString(c.nc, tc.raw) // the huge head may not all be read
			resp, body := c.answer("GET")
			if resp.StatusCode != tc.code || !strings.Contains(body, tc.says) || !resp.Close {
				t.Fatalf("got %d %q (close %v), want %d saying %q and the connection closed", resp.StatusCode, body, resp.Close, tc.code, tc.says)
			}
		})
	}
}

func TestHTTP10GetsOneAnswerPerConnection(t *testing.T) {
	c := newRig(t, http.HandlerFunc(answers)).dial()
	c.send("GET /stream HTTP/1.0\r\n\r\n")
	resp, body := c.answer("GET")
	if len(body) != 9000 || resp.ContentLength != -1 || len(resp.TransferEncoding) != 0 || !resp.Close {
		t.Fatalf("HTTP/1.0: %d bytes, length %d, te %v, close %v", len(body), resp.ContentLength, resp.TransferEncoding, resp.Close)
	}
}

func TestExpectContinueIsSentWhenTheBodyIsRead(t *testing.T) {
	r := newRig(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/refuse" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		answers(w, req)
	}))
	c := r.dial()
	c.send("POST /echo HTTP/1.1\r\nHost: example.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	line, err := c.br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("got %q, %v; want 100 Continue before the body is sent", line, err)
	}
	c.br.ReadString('\n')
	c.send("hello")
	if _, body := c.answer("POST"); body != "POST /echo host=example.test body=hello" {
		t.Fatalf("echo: %q", body)
	}

	// A handler that answers without reading: no 100, and the body that
	// was never asked for ends the connection.
	c.send("POST /refuse HTTP/1.1\r\nHost: example.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	resp, _ := c.answer("POST")
	if resp.StatusCode != 403 || !resp.Close {
		t.Fatalf("refused: %d, close %v", resp.StatusCode, resp.Close)
	}
}

func TestUnreadBodiesAreReadAwayUpToALimit(t *testing.T) {
	c := newRig(t, http.HandlerFunc(answers)).dial()
	c.send("POST /len HTTP/1.1\r\nHost: example.test\r\nContent-Length: 10\r\n\r\n0123456789")
	if resp, body := c.answer("POST"); body != "fixed" || resp.Close {
		t.Fatalf("small unread body: %q close %v", body, resp.Close)
	}
	c.send(get("/small")) // the connection is still in step
	if _, body := c.answer("GET"); body != "small answer" {
		t.Fatalf("next request: %q", body)
	}

	big := maxUnreadBody + 1
	go io.WriteString(c.nc, fmt.Sprintf("POST /len HTTP/1.1\r\nHost: example.test\r\nContent-Length: %d\r\n\r\n%s", big, strings.Repeat("x", big)))
	if resp, _ := c.answer("POST"); !resp.Close {
		t.Fatal("a large unread body did not end the connection")
	}
}

func TestAPanickingHandlerLosesOnlyItsConnection(t *testing.T) {
	r := newRig(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/panic":
			panic("boom")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		answers(w, req)
	}))
	for _, path := range []string{"/panic", "/abort"} {
		c := r.dial()
		c.send(get(path))
		if !c.closed() {
			t.Fatalf("%s: the connection stayed open", path)
		}
	}
	c := r.dial()
	c.send(get("/len"))
	if _, body := c.answer("GET"); body != "fixed" {
		t.Fatalf("after the panics: %q", body)
	}
}

func TestHijackHandsTheConnectionOver(t *testing.T) {
	r := newRig(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		nc, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		go func() {
			defer nc.Close()
			line, _ := rw.ReadString('\n') // what the visitor sent after the head
			fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(line), line)
			rw.Flush()
		}()
	}))
	c := r.dial()
	c.send(get("/") + "after the head\n")
	if _, body := c.answer("GET"); body != "after the head\n" {
		t.Fatalf("hijacked: %q", body)
	}
}

func TestAVisitorWhoLeavesIsNoticedOnceTheRequestRunsWatchAfter(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	r := newRig(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		close(started)
		<-req.Context().Done()
		ended <- req.Context().Err()
	}))
	c := r.dial()
	c.send(get("/wait"))
	<-started
	c.nc.Close()
	select {
	case err := <-ended:
		t.Fatalf("cancelled (%v) before the watch was due", err)
	default:
	}
	// The handler runs, so its watch timer is set (beside the sweep's).
	r.clk.Advance(DefaultWatchAfter)
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("context ended with %v", err)
	}
}

func TestTheWatchKeepsAPipelinedRequest(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var seen []string
	r := newRig(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/slow" {
			close(started)
			<-release
			if err := req.Context().Err(); err != nil {
				panic("cancelled though the visitor stayed: " + err.Error())
			}
		}
		mu.Lock()
		seen = append(seen, req.URL.Path)
		mu.Unlock()
		answers(w, req)
	}))
	c := r.dial()
	c.send(get("/slow"))
	<-started
	r.clk.Advance(DefaultWatchAfter) // the watch reads the connection now
	testwait.For(t, "the watch", func() bool { return r.watching(1) })
	c.send(get("/len")) // and gets the start of this one
	close(release)
	if resp, _ := c.answer("GET"); resp.StatusCode != 404 {
		t.Fatalf("/slow answered %d", resp.StatusCode)
	}
	if _, body := c.answer("GET"); body != "fixed" {
		t.Fatalf("the pipelined request was mangled: %q", body)
	}
}

// phases counts the server's connections by phase.
func (r *rig) phases() map[int64]int {
	r.srv.mu.Lock()
	defer r.srv.mu.Unlock()
	n := map[int64]int{}
	for c := range r.srv.conns {
		n[c.state.Load()&phaseMask]++
	}
	return n
}

// watching reports whether n connections have their watch running.
func (r *rig) watching(n int) bool {
	r.srv.mu.Lock()
	defer r.srv.mu.Unlock()
	for c := range r.srv.conns {
		c.cr.mu.Lock()
		if c.cr.watching {
			n--
		}
		c.cr.mu.Unlock()
	}
	return n == 0
}

// settle waits until the connections are in the given phases and only the
// sweep waits on the clock (no request's watch timer is set), so that the
// sweep's steps count from a known state.
func (r *rig) settle(want map[int64]int) {
	r.t.Helper()
	testwait.For(r.t, fmt.Sprintf("connections in phases %v", want), func() bool {
		got := r.phases()
		for ph, n := range want {
			if got[ph] != n {
				return false
			}
		}
		return len(got) == len(want) && r.clk.Waiters() == 1
	})
}

// sweep moves the fake clock on by d in the sweep's steps, letting the
// sweep run at each.
func (r *rig) sweep(d time.Duration) {
	r.t.Helper()
	every := r.srv.sweepEvery()
	for moved := time.Duration(0); moved < d; moved += every {
		testwait.For(r.t, "the sweep", func() bool { return r.clk.Waiters() > 0 })
		r.clk.Advance(every)
	}
	testwait.For(r.t, "the sweep", func() bool { return r.clk.Waiters() > 0 })
}

func TestSlowHeadsAndIdleConnectionsAreClosed(t *testing.T) {
	r := newRig(t, http.HandlerFunc(answers))

	slow := r.dial()
	slow.send("GET / HTTP/1.1\r\nHost: exa") // and no more
	kept := r.dial()
	kept.send(get("/len"))
	kept.answer("GET")

	r.settle(map[int64]int{phaseHead: 1, phaseIdle: 1})
	r.sweep(r.srv.ReadHeaderTimeout + time.Second)
	if !slow.closed() {
		t.Fatal("a head sent too slowly kept its connection")
	}
	kept.send(get("/len")) // idle for less than IdleTimeout: still there
	if _, body := kept.answer("GET"); body != "fixed" {
		t.Fatalf("kept: %q", body)
	}
	r.settle(map[int64]int{phaseIdle: 1})
	r.sweep(r.srv.IdleTimeout + time.Second)
	if !kept.closed() {
		t.Fatal("an idle connection outlived IdleTimeout")
	}
}

func TestShutdownFinishesRequestsAndClosesIdleConnections(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	r := newRig(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/slow" {
			close(started)
			<-release
		}
		answers(w, req)
	}))
	idle := r.dial()
	idle.send(get("/len"))
	idle.answer("GET")
	busy := r.dial()
	busy.send(get("/slow"))
	<-started

	done := make(chan error, 1)
	go func() { done <- r.srv.Shutdown(context.Background()) }()
	if !idle.closed() {
		t.Fatal("Shutdown left an idle connection open")
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a request still running", err)
	default:
	}
	close(release)
	resp, _ := busy.answer("GET")
	if resp.StatusCode != 404 || !resp.Close {
		t.Fatalf("the running request: %d, close %v", resp.StatusCode, resp.Close)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := net.Dial("tcp", r.ln.Addr().String()); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}

func TestShutdownGivesUpWhenItsContextEnds(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	r := newRig(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		close(started)
		<-release
	}))
	r.dial().send(get("/"))
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want the context's error", err)
	}
}

func TestCountHosts(t *testing.T) {
	for head, want := range map[string]int{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n":                        1,
		"GET / HTTP/1.1\r\nhost: a\r\nHOST: b\r\n\r\n":             2,
		"GET / HTTP/1.1\r\nX-Host: a\r\n\r\nHost: in the body\r\n": 0,
		"GET / HTTP/1.1\nHost: a\n\n":                              1,
		"GET / HTTP/1.1\r\nHostile: a\r\n\r\n":                     0,
	} {
		if got := countHosts([]byte(head)); got != want {
			t.Errorf("countHosts(%q) = %d, want %d", head, got, want)
		}
	}
}

func TestAVisitorSilentInTheMiddleOfABodyFailsTheRead(t *testing.T) {
	got := make(chan error, 1)
	r := newRigWith(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, err := io.ReadAll(req.Body)
		if len(b) != 3 {
			err = fmt.Errorf("read %q before the silence", b)
		}
		got <- err
		http.Error(w, "body incomplete", http.StatusBadRequest)
	}), func(s *Server) { s.BodyTimeout = 50 * time.Millisecond })
	c := r.dial()
	c.send("POST /upload HTTP/1.1\r\nHost: example.test\r\nContent-Length: 10\r\n\r\nabc") // and then nothing
	var ne net.Error
	if err := <-got; !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the handler's read ended with %v, want a timeout", err)
	}
	if resp, _ := c.answer("POST"); resp.StatusCode != 400 || !resp.Close {
		t.Fatalf("answer %d, close %v", resp.StatusCode, resp.Close)
	}
}
