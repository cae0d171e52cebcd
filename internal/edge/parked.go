package edge

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/qodaperio/autoscale/internal/h1"
)

// A held request without a body is parked rather than held on its
// goroutine: the edge takes its connection over from the HTTP server (which
// then lets go of its goroutines and buffers), keeps only the connection and
// the parsed request, and resumes it on a new goroutine when the hostname
// wakes or the budget runs out. That is what keeps a thousand visitors
// waiting for a sleeping hostname cheap (about 2 KiB each instead of about
// 21). The answer then goes out on the connection with Connection: close.

// parked is one parked request.
type parked struct {
	conn net.Conn
	r    *http.Request
	host string
	// expires is when its budget runs out (stop cancels that timer);
	// since is when the hold began.
	expires, since time.Time
	budget         time.Duration
	stop           func() bool
	// claimed makes sure exactly one of wake and budget resumes it.
	claimed atomic.Bool
	p       *Proxy
}

// addParked keeps pk until a client of host becomes routable; ready is the
// signal the hold was counted under: if it fired meanwhile, pk wakes now.
func (p *Pools) addParked(host string, pk *parked, ready <-chan struct{}) {
	h := p.host(host)
	h.mu.Lock()
	select {
	case <-ready:
		h.mu.Unlock()
		pk.wake()
		return
	default:
	}
	h.parked = append(h.parked, pk)
	h.mu.Unlock()
}

// unpark takes pk off host's list.
func (p *Pools) unpark(host string, pk *parked) {
	if h := p.lookup(host); h != nil {
		h.mu.Lock()
		for i, x := range h.parked {
			if x == pk {
				h.parked = append(h.parked[:i], h.parked[i+1:]...)
				break
			}
		}
		h.mu.Unlock()
	}
}

// parkable reports whether r may be parked: nothing left to read from the
// visitor, and a connection the server can hand over.
func parkable(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return false // a body is still to be read: the request waits on its goroutine
	}
	if r.ProtoMajor != 1 || r.Header.Get("Upgrade") != "" {
		return false
	}
	_, ok := w.(http.Hijacker)
	return ok
}

// parkedWriter answers a parked request on its own connection: HTTP/1.1,
// Connection: close, the body delimited by its Content-Length when the
// answer has one and by the end of the connection otherwise.
type parkedWriter struct {
	conn        net.Conn
	bw          *bufio.Writer
	header      http.Header
	head        bool // a HEAD request: no body
	wroteHeader bool
	noBody      bool
}

func newParkedWriter(conn net.Conn, r *http.Request) *parkedWriter {
	return &parkedWriter{conn: conn, header: http.Header{}, head: r.Method == http.MethodHead}
}

func (w *parkedWriter) Header() http.Header { return w.header }

func (w *parkedWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	// The buffer is taken only now: a woken burst must not allocate a
	// thousand of them before the first answer is even on its way.
	w.bw = writerPool.Get().(*bufio.Writer)
	w.bw.Reset(w.conn)
	w.noBody = w.head || code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if w.header.Get("Date") == "" {
		w.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	w.header.Del("Transfer-Encoding")
	w.header.Set("Connection", "close")
	h1.WriteHead(w.bw, code, w.header) // trailers do not fit a close-delimited answer: left out
}

func (w *parkedWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		if w.header.Get("Content-Type") == "" {
			w.header.Set("Content-Type", http.DetectContentType(b))
		}
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return len(b), nil
	}
	return w.bw.Write(b)
}

func (w *parkedWriter) Flush() {
	if w.bw != nil {
		w.bw.Flush()
	}
}

// finish sends what is buffered and closes the connection.
func (w *parkedWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.bw.Flush()
	w.bw.Reset(nil)
	writerPool.Put(w.bw)
	w.conn.Close()
}

type parkOutcome int

const (
	parkedOK   parkOutcome = iota
	parkFull               // cold_start_max_pending are held already
	parkUnable             // the connection could not be taken over: hold on the goroutine
)

// parkRequest counts r as held for host, takes its connection over from the
// HTTP server and parks it until a client is routable or expires.
func (p *Proxy) parkRequest(w http.ResponseWriter, r *http.Request, host string, expires, since time.Time, budget time.Duration) parkOutcome {
	pk := &parked{host: host, expires: expires, since: since, budget: budget, p: p}
	// The budget's timer starts before the request counts as held, so that
	// whoever sees it held knows its budget is running; it waits for the
	// parking to finish before it may act.
	setup := make(chan struct{})
	pk.stop = p.o.Clock.AfterFunc(expires.Sub(p.o.Clock.Now()), func() {
		<-setup
		if pk.claimed.CompareAndSwap(false, true) {
			p.o.Pools.unpark(host, pk)
			pk.spent()
		}
	})
	abandon := func() {
		pk.claimed.Store(true)
		pk.stop()
		close(setup)
	}
	ready, ok := p.o.Pools.Hold(host, p.o.MaxPending)
	if !ok {
		abandon()
		return parkFull
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.o.Pools.Unhold(host)
		abandon()
		return parkUnable
	}
	// The server's buffers are let go (nothing more is read), and the
	// request outlives its handler, whose context ends with it.
	pk.conn, pk.r = conn, r.WithContext(context.WithoutCancel(r.Context()))
	close(setup)
	p.o.Pools.addParked(host, pk, ready)
	return parkedOK
}

// wake resumes a parked request because a client became routable, unless
// its budget claimed it first.
func (pk *parked) wake() {
	if pk.claimed.CompareAndSwap(false, true) {
		pk.p.o.Pools.Unhold(pk.host)
		pk.dispatch()
	}
}

// dispatch sends a request that left its hold (and was counted out of it)
// to be served on a goroutine of its own.
func (pk *parked) dispatch() {
	pk.stop()
	if o := pk.p.o; o.OnHeld != nil {
		o.OnHeld(pk.host, o.Clock.Now().Sub(pk.since))
	}
	go pk.serve()
}

// spent answers a parked request whose budget ran out.
func (pk *parked) spent() {
	p := pk.p
	p.o.Pools.Unhold(pk.host)
	if p.o.OnHeld != nil {
		p.o.OnHeld(pk.host, p.o.Clock.Now().Sub(pk.since))
	}
	w := newParkedWriter(pk.conn, pk.r)
	defer w.finish()
	p.budgetSpent(w, pk.r, pk.host, pk.budget)
}

// serve serves a woken parked request through a client.
func (pk *parked) serve() {
	w := newParkedWriter(pk.conn, pk.r)
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			panic(v)
		}
		w.finish() // a cut-short answer ends with the connection, as it must
	}()
	pk.p.serve(w, pk.r, pk.host, pk.expires, pk.since)
}
