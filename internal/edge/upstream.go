package edge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/qodaperio/autoscale/internal/h1"
)

// The direct path: plain HTTP/1.1 to a client, the round trip done on the
// request's own goroutine over a pooled keep-alive connection. It does what
// http.Transport does for the edge's one kind of request, without the two
// goroutines per connection and the hand-offs between them, which are most
// of a proxied request's cost on the edge (see docs/scaling-hooks.md, "The
// edge", for the measurements). Upgrades (WebSocket) and https targets go
// through httputil.ReverseProxy instead.

// idleConns is one client's keep-alive connections, the most recently used
// last.
type idleConns struct {
	mu    sync.Mutex
	conns []*upstreamConn
}

// maxIdlePerClient bounds the idle connections kept per client, over
// idleShards shards: a visitor's requests use one shard (by its address),
// so that two cores serving different visitors rarely wait on each other.
const (
	idleShards       = 8
	maxIdlePerClient = 256
)

// shardedIdle is one client's idle connections.
type shardedIdle [idleShards]idleConns

func (s *shardedIdle) shard(remoteAddr string) *idleConns {
	h := uint(0)
	for i := len(remoteAddr) - 1; i >= 0 && i >= len(remoteAddr)-6; i-- {
		h = h*31 + uint(remoteAddr[i])
	}
	return &s[h%idleShards]
}

func (s *shardedIdle) closeAll() {
	for i := range s {
		s[i].closeAll()
	}
}

// idleTimeout closes a connection idle this long: backends commonly close
// theirs after a minute or more, and a connection they closed while idle
// would fail the next request sent on it.
const idleTimeout = 30 * time.Second

// freshForBody is how recently a connection must have been used to carry a
// request with a body. A request without one is retried on a new connection
// when a kept one turns out closed; one with a body cannot be (its body was
// read), so it only goes on a connection that was just working.
const freshForBody = 2 * time.Second

type upstreamConn struct {
	net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	lastUsed time.Time
}

var (
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

func (u *upstreamConn) close() {
	u.Conn.Close()
	if u.br != nil {
		u.br.Reset(nil)
		readerPool.Put(u.br)
		u.bw.Reset(nil)
		writerPool.Put(u.bw)
		u.br, u.bw = nil, nil
	}
}

func (ic *idleConns) get(now time.Time, body bool) *upstreamConn {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	for n := len(ic.conns); n > 0; n = len(ic.conns) {
		u := ic.conns[n-1]
		ic.conns[n-1] = nil
		ic.conns = ic.conns[:n-1]
		age := now.Sub(u.lastUsed)
		if age < idleTimeout && (!body || age < freshForBody) {
			return u
		}
		go u.close() // the oldest go first; never block the request on it
	}
	return nil
}

func (ic *idleConns) put(u *upstreamConn, now time.Time) {
	u.lastUsed = now
	ic.mu.Lock()
	if len(ic.conns) < maxIdlePerClient/idleShards {
		ic.conns = append(ic.conns, u)
		u = nil
	}
	ic.mu.Unlock()
	if u != nil {
		u.close()
	}
}

// closeAll closes every idle connection (the client went away).
func (ic *idleConns) closeAll() {
	ic.mu.Lock()
	conns := ic.conns
	ic.conns = nil
	ic.mu.Unlock()
	for _, u := range conns {
		u.close()
	}
}

var dialer = &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}

func dial(ctx context.Context, addr string) (*upstreamConn, error) {
	c, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(c)
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(c)
	return &upstreamConn{Conn: c, br: br, bw: bw}, nil
}

// skipHeader reports whether an inbound request header is not forwarded:
// hop-by-hop headers, the visitor's own X-Forwarded-* (the edge is the first
// hop and sets them itself), and Expect (the edge reads the body itself, so
// the visitor's server answers 100-continue).
func skipRequestHeader(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded",
		"Expect", "Host", "Content-Length", ProbeHeader:
		return true
	}
	return false
}

// connectionTokens are the extra hop-by-hop headers a Connection header names.
func connectionTokens(h http.Header) []string {
	var out []string
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" && !strings.EqualFold(f, "keep-alive") && !strings.EqualFold(f, "close") {
				out = append(out, http.CanonicalHeaderKey(f))
			}
		}
	}
	return out
}

// writeRequest writes the request line and headers of r as the client
// receives it: path joined to the target's, Host kept, X-Forwarded-* set.
func writeRequestHead(bw *bufio.Writer, r *http.Request, basePath string, bodyLen int64) {
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	uri := r.URL.EscapedPath()
	if basePath != "" && basePath != "/" {
		uri = joinPath(basePath, uri)
	}
	if uri == "" {
		uri = "/"
	}
	bw.WriteString(uri)
	if r.URL.RawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(r.URL.RawQuery)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(r.Host)
	bw.WriteString("\r\n")
	extra := connectionTokens(r.Header)
	for k, vv := range r.Header {
		if skipRequestHeader(k) || (len(extra) > 0 && contains(extra, k)) {
			continue
		}
		for _, v := range vv {
			h1.WriteHeaderLine(bw, k, v)
		}
	}
	if ip := remoteIP(r.RemoteAddr); ip != "" {
		h1.WriteHeaderLine(bw, "X-Forwarded-For", ip)
	}
	h1.WriteHeaderLine(bw, "X-Forwarded-Host", r.Host)
	if r.TLS != nil {
		h1.WriteHeaderLine(bw, "X-Forwarded-Proto", "https")
	} else {
		h1.WriteHeaderLine(bw, "X-Forwarded-Proto", "http")
	}
	switch {
	case bodyLen > 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(bodyLen, 10))
		bw.WriteString("\r\n")
	case bodyLen < 0:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	bw.WriteString("\r\n")
}

// remoteIP is the address part of a RemoteAddr ("1.2.3.4:5", "[::1]:5").
func remoteIP(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return ""
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr[:i], "["), "]")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func joinPath(a, b string) string {
	switch as, bs := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/"); {
	case as && bs:
		return a + b[1:]
	case !as && !bs:
		return a + "/" + b
	}
	return a + b
}

// roundTrip sends r to c and copies the answer to w. It reports whether the
// answer (status line at least) was written, so the caller knows whether a
// 502 can still be sent.
func (p *Proxy) roundTrip(w http.ResponseWriter, r *http.Request, c *Client) (wrote bool, err error) {
	bodyLen := r.ContentLength
	hasBody := r.Body != nil && r.Body != http.NoBody && bodyLen != 0
	if !hasBody {
		bodyLen = 0
	}
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		u := c.idle.shard(r.RemoteAddr).get(p.o.Clock.Now(), hasBody)
		reused := u != nil
		if u == nil {
			if u, err = dial(ctx, c.state().addr); err != nil {
				return false, err
			}
		}
		wrote, retry, err := p.exchange(ctx, w, r, c, u, bodyLen, hasBody, reused)
		if retry && attempt == 0 {
			continue // a kept connection the client had closed: once more, fresh
		}
		return wrote, err
	}
}

// exchange does one request on u. retry reports a kept connection that
// failed before anything was read from it, for a request without a body.
func (p *Proxy) exchange(ctx context.Context, w http.ResponseWriter, r *http.Request, c *Client, u *upstreamConn, bodyLen int64, hasBody, reused bool) (wrote, retry bool, err error) {
	// The visitor going away aborts the exchange: a deadline in the past
	// unblocks the reads and writes below.
	stop := context.AfterFunc(ctx, func() { u.SetDeadline(time.Unix(1, 0)) })
	healthy := false
	defer func() {
		if !stop() || !healthy {
			u.close()
			return
		}
		c.idle.shard(r.RemoteAddr).put(u, p.o.Clock.Now())
	}()
	writeRequestHead(u.bw, r, c.state().basePath, bodyLen)
	var bodyDone chan error
	if hasBody {
		// The body goes up while the answer is read, as http.Transport
		// does: a client may answer (413, say) before reading it all.
		if err := u.bw.Flush(); err != nil {
			return false, false, err
		}
		bodyDone = make(chan error, 1)
		go func() {
			err := writeBody(u.bw, r.Body, bodyLen)
			if errors.Is(err, errVisitorBody) {
				// The visitor's body broke off (it hung up, or went
				// silent past the front door's body timeout): the client
				// would wait for the rest forever, so the exchange ends.
				u.SetDeadline(time.Unix(1, 0))
			}
			bodyDone <- err
		}()
	} else if err := u.bw.Flush(); err != nil {
		return false, reused && idempotent(r.Method), err
	}
	h := w.Header()
	rh, err := readResponseHead(u.br, h, r.Method)
	if err != nil {
		clear(h) // a head read halfway is not the visitor's business
		if bodyDone != nil {
			u.SetDeadline(time.Unix(1, 0))
			<-bodyDone
		}
		return false, reused && !hasBody && idempotent(r.Method) && ctx.Err() == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)), err
	}
	w.WriteHeader(rh.status)
	// An answer of unknown length (a stream, server-sent events) is flushed
	// as it comes; one of known length is buffered by the server as usual.
	var body bodyReader
	body.reset(u.br, rh)
	buf := p.buffers.Get()
	copyErr := copyBody(w, &body, buf, rh.length < 0)
	p.buffers.Put(buf)
	if copyErr == nil && rh.chunked {
		tr, terr := readTrailers(u.br)
		for k, vv := range tr {
			h[http.TrailerPrefix+k] = vv
		}
		copyErr = terr
	}
	if bodyDone != nil {
		if copyErr != nil {
			u.SetDeadline(time.Unix(1, 0))
		}
		if berr := <-bodyDone; berr != nil && copyErr == nil {
			// The answer came whole, but the body did not all go up: the
			// connection is out of step.
			return true, false, nil
		}
	}
	healthy = copyErr == nil && !rh.close && !r.Close
	return true, false, copyErr
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// writeBody sends the request body: exactly bodyLen bytes, or chunked when
// the length is unknown.
// A failure on the visitor's side is marked with errVisitorBody.
func writeBody(bw *bufio.Writer, body io.Reader, bodyLen int64) error {
	src := &sourceReader{r: body}
	var err error
	if bodyLen > 0 {
		var n int64
		n, err = io.Copy(bw, io.LimitReader(src, bodyLen))
		if err == nil && n < bodyLen {
			src.err = io.ErrUnexpectedEOF
		}
	} else {
		cw := httputil.NewChunkedWriter(bw)
		if _, err = io.Copy(cw, src); err == nil {
			err = cw.Close()
		}
		if err == nil {
			_, err = bw.WriteString("\r\n")
		}
	}
	if src.err != nil {
		return fmt.Errorf("%w: %w", errVisitorBody, src.err)
	}
	if err == nil {
		err = bw.Flush()
	}
	return err
}

var errVisitorBody = errors.New("the visitor's request body broke off")

// sourceReader keeps the error its reader gave, so that a failed copy can
// tell the visitor's side from the client's.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// copyBody copies the answer's body to w, flushing each piece when stream.
func copyBody(w http.ResponseWriter, body io.Reader, buf []byte, stream bool) error {
	var fl http.Flusher
	if stream {
		fl, _ = w.(http.Flusher)
	}
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
