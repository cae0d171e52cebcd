// Package h1 serves HTTP/1.1 connections to an http.Handler. It is the
// edge's front door: the same handlers as net/http's server, with less
// work around each request.
//
// Why not net/http: under wrk on a 2-core machine, with the kernel's
// loopback work the same for both, net/http's per-request machinery was
// what kept the edge's p99 at 1.6x to 1.8x nginx's: a goroutine that reads
// the connection in the background from the start of every request (to
// notice a visitor hanging up), the cancel machinery around it, a second
// buffer layer for the answer, and read deadlines (runtime timers) set and
// cleared per request. Here the request is parsed by the same code
// (http.ReadRequest), the answer is written straight into the connection's
// buffer, timeouts are enforced by a sweep over the connections (every
// quarter of the shorter timeout, at most every second, so a timeout may
// run over by that much), and the
// visitor is watched for hanging up only once a request has run for
// WatchAfter (20 ms unless set): a request answered within that is never
// watched, and one that waits (held for a cold start, queued on a limiter,
// a slow client) still frees what it holds soon after its visitor leaves,
// 20 ms late at worst. With it the edge's p99 is about 1.4x nginx's
// (docs/scaling-hooks.md, "Measured").
//
// What it does, as net/http does: keep-alive, pipelining, Content-Length or
// chunked bodies both ways, trailers, Expect: 100-continue, HEAD, Hijack,
// Flush, a bounded request head (431), a missing or doubled Host (400),
// invalid header names and values (400), unread request bodies drained up
// to 256 KiB (beyond that the connection closes), read-header and idle
// timeouts, a graceful Shutdown, and (as nginx's client_body_timeout) a
// bound on how long a visitor may go silent in the middle of a body. What it does not: HTTP/2 (505), TLS,
// content sniffing (an answer without a Content-Type goes out without one,
// as a proxy's should), and keep-alive for HTTP/1.0 visitors (their
// connection closes after each answer).
package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/qodaperio/autoscale/internal/clock"
)

// Defaults for the Server's zero fields.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultWatchAfter        = 20 * time.Millisecond
	DefaultBodyTimeout       = 60 * time.Second

	// maxUnreadBody is how much of a request body the handler left unread
	// is read away so that the connection can carry the next request.
	maxUnreadBody = 256 << 10
)

// Server serves HTTP/1.1. Set its fields before Serve; the zero values
// mean the defaults above.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's line and headers.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept connection.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers together; a
	// larger head gets 431.
	MaxHeaderBytes int
	// BodyTimeout bounds each wait for more of a request body the
	// handler is reading; a visitor silent for longer fails that read.
	BodyTimeout time.Duration
	// WatchAfter is how long a request runs before its connection is
	// watched for the visitor hanging up (which cancels its context).
	WatchAfter time.Duration
	// Clock drives WatchAfter, the timeout sweep and accept backoff. Only
	// the bounded reads and writes of a connection that is ending (reading
	// away an unread body, a refusal) use wall-clock deadlines.
	Clock clock.Clock
	Log   *slog.Logger

	// shutting is read on every request, so it is not under mu.
	shutting atomic.Bool
	// now is the clock's time in milliseconds as of the last sweep: the
	// connections stamp their phases with it, which costs them no clock
	// read (and no runtime timer, as a read deadline would) per request.
	now atomic.Int64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	changed   chan struct{} // closed (and replaced) whenever a connection ends
	baseCtx   context.Context
	stopBase  context.CancelFunc
}

// ErrServerClosed is what Serve returns after Shutdown.
var ErrServerClosed = http.ErrServerClosed

func (s *Server) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns != nil {
		return
	}
	s.listeners = map[net.Listener]struct{}{}
	s.conns = map[*conn]struct{}{}
	s.changed = make(chan struct{})
	s.baseCtx, s.stopBase = context.WithCancel(context.Background())
	if s.ReadHeaderTimeout <= 0 {
		s.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if s.IdleTimeout <= 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.MaxHeaderBytes <= 0 {
		s.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if s.BodyTimeout <= 0 {
		s.BodyTimeout = DefaultBodyTimeout
	}
	if s.WatchAfter <= 0 {
		s.WatchAfter = DefaultWatchAfter
	}
	if s.Clock == nil {
		s.Clock = clock.Real{}
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	s.now.Store(s.Clock.Now().UnixMilli())
	go s.sweep()
}

// sweepEvery is how often the timeouts are checked: a quarter of the
// shorter one, within [10ms, 1s]. A timeout may so run up to that much
// past its value.
func (s *Server) sweepEvery() time.Duration {
	return min(max(min(s.ReadHeaderTimeout, s.IdleTimeout)/4, 10*time.Millisecond), time.Second)
}

// sweep closes the connections that have waited too long for a request, or
// taken too long to send its head, until Shutdown ends.
func (s *Server) sweep() {
	every := s.sweepEvery()
	for {
		select {
		case <-s.Clock.After(every):
		case <-s.baseCtx.Done():
			return
		}
		now := s.Clock.Now().UnixMilli()
		s.now.Store(now)
		s.mu.Lock()
		for c := range s.conns {
			st := c.state.Load()
			var limit time.Duration
			switch st & phaseMask {
			case phaseFirst, phaseHead:
				limit = s.ReadHeaderTimeout
			case phaseIdle:
				limit = s.IdleTimeout
			default:
				continue // a handler runs: its own business
			}
			if now-st>>phaseBits >= limit.Milliseconds() {
				c.nc.Close()
			}
		}
		s.mu.Unlock()
	}
}

// Serve accepts connections on ln until Shutdown (then it returns
// ErrServerClosed) or a permanent accept error.
func (s *Server) Serve(ln net.Listener) error {
	s.init()
	s.mu.Lock()
	if s.shutting.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return ErrServerClosed
			}
			if !temporary(err) {
				return err
			}
			// Out of file descriptors, say: wait a little, doubling up to
			// a second, rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.Log.Warn("edge accept failed; retrying", "err", err, "in", backoff)
			wait := make(chan struct{})
			stop := s.Clock.AfterFunc(backoff, func() { close(wait) })
			select {
			case <-wait:
			case <-s.baseCtx.Done():
				stop()
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		c := s.newConn(nc)
		if c == nil {
			nc.Close()
			return ErrServerClosed
		}
		go c.serve()
	}
}

func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// Shutdown stops accepting, closes connections waiting for a request, and
// waits until the requests being served are answered (their connections
// then close) or ctx ends. Hijacked connections are their new owner's.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.mu.Lock()
	s.shutting.Store(true)
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.closeIfIdle()
	}
	s.mu.Unlock()
	for {
		s.mu.Lock()
		left, changed := len(s.conns), s.changed
		s.mu.Unlock()
		if left == 0 {
			s.stopBase()
			return nil
		}
		select {
		case <-ctx.Done():
			s.stopBase()
			return ctx.Err()
		case <-changed:
		}
	}
}

// Close stops accepting and closes every connection at once, busy or not
// (hijacked ones excepted).
func (s *Server) Close() error {
	s.init()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutting.Store(true)
	s.stopBase()
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	return nil
}

func (s *Server) newConn(nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.ctx, c.cancel = context.WithCancel(s.baseCtx)
	c.enter(phaseFirst)
	c.cr = connReader{nc: nc}
	c.cr.cond.L = &c.cr.mu
	c.watchTimer = clock.NewTimer(s.Clock, c.cr.watchDue)
	c.br = bufio.NewReaderSize(&c.cr, 4<<10)
	c.bw = bufio.NewWriterSize(nc, 4<<10)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return nil
	}
	s.conns[c] = struct{}{}
	return c
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// conn is one visitor connection.
type conn struct {
	srv    *Server
	nc     net.Conn
	remote string
	// ctx is the parent of the connection's request contexts: one per
	// connection, so that requests do not all register with (and lock)
	// the server's.
	ctx    context.Context
	cancel context.CancelFunc
	cr     connReader
	// watchTimer starts the watch of a request WatchAfter in.
	watchTimer *clock.Timer
	br         *bufio.Reader
	bw         *bufio.Writer

	// state is the connection's phase and since when (the server's now,
	// shifted left by phaseBits), in one word so that the sweep never sees
	// a phase with another phase's time.
	state    atomic.Int64
	hijacked bool
}

// A connection's phases.
const (
	phaseFirst = iota // accepted, waiting for its first request
	phaseIdle         // waiting for its next request
	phaseHead         // reading a request head
	phaseBusy         // serving a request
	phaseBits  = 2
	phaseMask  = 1<<phaseBits - 1
)

func (c *conn) enter(phase int64) {
	c.state.Store(c.srv.now.Load()<<phaseBits | phase)
}

// closeIfIdle closes c if it is waiting for a request.
func (c *conn) closeIfIdle() {
	if ph := c.state.Load() & phaseMask; ph == phaseFirst || ph == phaseIdle {
		c.nc.Close()
	}
}

// begin marks c as reading a request, unless the server is shutting down.
// Each side stores its own flag before it loads the other's, so a
// connection Shutdown passes over as busy sees the shutdown when it next
// goes idle.
func (c *conn) begin() bool {
	c.enter(phaseHead)
	return !c.srv.shutting.Load()
}

// idle marks c as waiting for a request, and reports whether it may.
func (c *conn) idle() bool {
	c.enter(phaseIdle)
	return !c.srv.shutting.Load()
}

func (c *conn) serve() {
	defer func() {
		c.cancel()
		c.watchTimer.Stop()
		if !c.hijacked {
			c.nc.Close()
		}
		c.srv.forget(c)
	}()
	for {
		// The head of the next request, bounded in size, and in time by
		// the sweep: the first byte may wait as long as the connection
		// may idle, the rest as long as a head may take.
		c.cr.remain = int64(c.srv.MaxHeaderBytes) + 4<<10 // the reader's buffer may read ahead
		pending, _ := c.br.Peek(c.br.Buffered())
		c.cr.startHead(pending)
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if !c.begin() {
			return
		}
		req, err := http.ReadRequest(c.br)
		if err != nil {
			c.reject(err)
			return
		}
		hosts := countHosts(c.cr.endHead())
		c.cr.remain = math.MaxInt64
		c.enter(phaseBusy)
		if code, msg := checkRequest(req, hosts); code != 0 {
			c.plainError(code, msg)
			return
		}
		if !c.serveRequest(req) || !c.idle() {
			return
		}
	}
}

// reject answers a request whose head could not be read.
func (c *conn) reject(err error) {
	switch {
	case c.cr.remain <= 0:
		c.plainError(http.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("the request line and headers exceed %d bytes", c.srv.MaxHeaderBytes))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), isTimeout(err):
		// The visitor went away, or stalled; there is no one to tell.
	default:
		msg := err.Error() // it may quote the visitor's line: not all of it
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		c.plainError(http.StatusBadRequest, "malformed request: "+msg)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// plainError answers with a short text and closes the connection.
func (c *conn) plainError(code int, msg string) {
	body := fmt.Sprintf("%d %s: %s\n", code, http.StatusText(code), msg)
	c.nc.SetWriteDeadline(time.Now().Add(c.srv.ReadHeaderTimeout))
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
	c.bw.Flush()
}

// countHosts counts the Host header lines of a raw request head (which may
// run on past its end). http.ReadRequest keeps only the first Host, and two
// of them are how a request is made to mean one hostname to a proxy in
// front and another here.
func countHosts(head []byte) int {
	n := 0
	for i := 0; ; {
		j := bytes.IndexByte(head[i:], '\n')
		if j < 0 {
			return n
		}
		line := head[i : i+j]
		i += j + 1
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) == 0 {
			return n // the end of the head
		}
		if len(line) >= 5 && line[4] == ':' && strings.EqualFold(string(line[:4]), "host") {
			n++
		}
	}
}

// checkRequest applies the rules net/http's server applies to a parsed
// request head, and returns the status to refuse it with (0: none).
func checkRequest(req *http.Request, hosts int) (int, string) {
	if req.ProtoMajor != 1 {
		return http.StatusHTTPVersionNotSupported, "only HTTP/1.0 and HTTP/1.1 are served here"
	}
	switch {
	case hosts > 1:
		return http.StatusBadRequest, "too many Host headers"
	case req.Host != "" && !httpguts.ValidHostHeader(req.Host):
		return http.StatusBadRequest, "malformed Host header"
	case req.ProtoAtLeast(1, 1) && hosts == 0 && req.Method != http.MethodConnect:
		return http.StatusBadRequest, "missing required Host header"
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return http.StatusBadRequest, "invalid header name"
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return http.StatusBadRequest, "invalid header value in " + k
			}
		}
	}
	if e, ok := req.Header["Expect"]; ok {
		if len(e) != 1 || !strings.EqualFold(e[0], "100-continue") || !req.ProtoAtLeast(1, 1) {
			return http.StatusExpectationFailed, "the only expectation served is 100-continue"
		}
	}
	return 0, ""
}

// serveRequest runs the handler for req and finishes its answer; it
// reports whether the connection can carry another request.
func (c *conn) serveRequest(req *http.Request) (keep bool) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	req = req.WithContext(ctx)
	req.RemoteAddr = c.remote
	w := &response{c: c, req: req, header: http.Header{}, declared: -1}
	_, expect := req.Header["Expect"] // checked: 100-continue, which is this server's business
	delete(req.Header, "Expect")
	if req.Body != nil && req.Body != http.NoBody {
		w.body = &requestBody{rc: req.Body, w: w, expect: expect, length: req.ContentLength}
		req.Body = w.body
	}
	c.cr.startRequest(cancel, w.body == nil)
	c.watchTimer.Reset(c.srv.WatchAfter)

	panicked := c.callHandler(w, req)
	c.watchTimer.Stop()
	if w.hijacked {
		return false
	}
	if panicked {
		c.cr.endRequest()
		return false
	}
	ok := w.finish()
	c.cr.endRequest()
	if !ok || w.closeAfter || c.cr.visitorGone() {
		return false
	}
	if w.body != nil && !w.body.done() {
		return w.body.drain(c)
	}
	return true
}

// callHandler runs the handler, turning a panic into a closed connection
// (and, unless it is http.ErrAbortHandler, a logged stack).
func (c *conn) callHandler(w *response, req *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if v != http.ErrAbortHandler {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.Log.Error("edge handler panicked", "remote", c.remote, "panic", fmt.Sprint(v), "stack", string(buf))
			}
		}
	}()
	c.srv.Handler.ServeHTTP(w, req)
	return false
}

// aLongTimeAgo is a deadline in the past, which makes a pending read
// return at once.
var aLongTimeAgo = time.Unix(1, 0)

// connReader is what the connection's buffered reader reads from. It bounds
// the bytes a request head may take, and it runs the watch for a visitor
// hanging up: a one-byte read while the handler works, which either fails
// (the visitor left: the request's context is cancelled) or gets the first
// byte of a pipelined request, kept for the next read.
type connReader struct {
	nc net.Conn
	// remain is what the current request head may still read; only the
	// goroutine reading the request or its body touches it.
	remain int64

	mu   sync.Mutex
	cond sync.Cond
	// Set per request: the context to cancel, whether the body is read
	// to its end (a watch may not read underneath a body being read),
	// whether WatchAfter has passed, and whether the handler still runs.
	cancel              context.CancelFunc
	bodyDone, due, live bool
	watching, aborting  bool
	gone                bool // the watch saw the visitor leave
	hasByte             bool
	byteBuf             [1]byte

	// The raw bytes of the request head being read, for countHosts.
	recording bool
	head      []byte
}

func (cr *connReader) Read(p []byte) (int, error) {
	if cr.remain <= 0 {
		return 0, io.EOF // the head is too large; reject sees remain and says so
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) > cr.remain {
		p = p[:cr.remain]
	}
	cr.mu.Lock()
	if cr.watching {
		cr.mu.Unlock()
		return 0, errors.New("h1: read while the connection is watched") // a handler read its body after its end
	}
	if cr.hasByte {
		p[0] = cr.byteBuf[0]
		cr.hasByte = false
		cr.mu.Unlock()
		cr.remain--
		if cr.recording {
			cr.head = append(cr.head, p[0])
		}
		return 1, nil
	}
	cr.mu.Unlock()
	n, err := cr.nc.Read(p)
	cr.remain -= int64(n)
	if cr.recording {
		cr.head = append(cr.head, p[:n]...)
	}
	return n, err
}

// startHead starts keeping a copy of what is read, for countHosts, from
// pending: what the buffered reader holds already (a pipelined request).
func (cr *connReader) startHead(pending []byte) {
	if cap(cr.head) > 16<<10 {
		cr.head = nil // one huge head is no reason to keep its buffer
	}
	cr.head, cr.recording = append(cr.head[:0], pending...), true
}

// endHead returns the bytes kept since startHead: the head, and perhaps
// what followed it.
func (cr *connReader) endHead() []byte {
	cr.recording = false
	return cr.head
}

func (cr *connReader) startRequest(cancel context.CancelFunc, bodyDone bool) {
	cr.mu.Lock()
	cr.cancel, cr.bodyDone, cr.due, cr.live, cr.gone = cancel, bodyDone, false, true, false
	cr.mu.Unlock()
}

// watchDue is called WatchAfter into a request.
func (cr *connReader) watchDue() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.due = true
	cr.maybeWatchLocked()
}

// bodyRead is called when the request body has been read to its end.
func (cr *connReader) bodyRead() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.bodyDone = true
	cr.maybeWatchLocked()
}

func (cr *connReader) maybeWatchLocked() {
	if !cr.live || !cr.due || !cr.bodyDone || cr.watching || cr.hasByte || cr.gone {
		return
	}
	cr.watching = true
	go cr.watch()
}

func (cr *connReader) watch() {
	n, err := cr.nc.Read(cr.byteBuf[:])
	cr.mu.Lock()
	if n == 1 {
		cr.hasByte = true // a pipelined request: the visitor is there
	} else if err != nil && !(cr.aborting && isTimeout(err)) {
		cr.gone = true
		cr.cancel()
	}
	cr.watching = false
	cr.cond.Broadcast()
	cr.mu.Unlock()
}

// endRequest stops the request's watch and waits until it has stopped, so
// that the connection can be read (or handed over) again.
func (cr *connReader) endRequest() {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.live = false
	if !cr.watching {
		return
	}
	cr.aborting = true
	cr.nc.SetReadDeadline(aLongTimeAgo)
	for cr.watching {
		cr.cond.Wait()
	}
	cr.aborting = false
	cr.nc.SetReadDeadline(time.Time{})
}

func (cr *connReader) visitorGone() bool {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	return cr.gone
}
