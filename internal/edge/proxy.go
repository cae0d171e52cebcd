package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/qodaperio/autoscale/internal/clock"
)

// Hooks is what the edge needs to know about a hostname's scaling hook.
type Hooks interface {
	// ColdStart reports whether the hostname has an armed hook (a request
	// may be held for it) and how long a request may be held.
	ColdStart(host string) (budget time.Duration, ok bool)
}

// Options configure the proxy.
type Options struct {
	Pools *Pools
	Hooks Hooks
	Clock clock.Clock
	Log   *slog.Logger
	// GlobalSlots bounds the requests being served at once; held requests
	// do not take one.
	GlobalSlots int
	// MaxPending bounds the requests held per hostname.
	MaxPending int
}

// Proxy routes requests by Host to the hostname's clients.
type Proxy struct {
	o     Options
	slots chan struct{}
	rp    *httputil.ReverseProxy
}

type targetKey struct{}

// bufferPool lends 32 KiB copy buffers to the reverse proxy.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(v []byte) { b.p.Put(&v) }

// NewProxy returns the edge handler.
func NewProxy(o Options) *Proxy {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.GlobalSlots <= 0 {
		o.GlobalSlots = 10_000
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 1000
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	bp := &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
	p := &Proxy{o: o, slots: make(chan struct{}, o.GlobalSlots)}
	p.rp = &httputil.ReverseProxy{
		Transport:  transport,
		BufferPool: bp,
		Rewrite: func(pr *httputil.ProxyRequest) {
			c := pr.In.Context().Value(targetKey{}).(*Client)
			pr.SetURL(c.Target())
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host // the client serves the hostname it registered for
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			o.Log.Warn("edge: upstream failed", "host", r.Host, "err", err)
			http.Error(w, "the client serving this hostname failed to answer", http.StatusBadGateway)
		},
	}
	return p
}

// canonicalHost is the Host header without port, lowercased.
func canonicalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := canonicalHost(r.Host)
	// The global limit queues arrivals rather than refusing them: the line
	// moves as requests finish or are held.
	select {
	case p.slots <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	slot := true
	defer func() {
		if slot {
			<-p.slots
		}
	}()
	var c *Client
	for {
		var ready <-chan struct{}
		c, ready = p.o.Pools.Pick(host, p.o.Clock.Now())
		if c != nil {
			break
		}
		budget, armed := p.o.Hooks.ColdStart(host)
		if !armed {
			if ready == nil {
				http.Error(w, fmt.Sprintf("no client serves %s", host), http.StatusBadGateway)
			} else {
				http.Error(w, fmt.Sprintf("no client of %s is routable now", host), http.StatusBadGateway)
			}
			return
		}
		wait, ok := p.o.Pools.Hold(host, p.o.MaxPending)
		if !ok {
			http.Error(w, fmt.Sprintf("%s is starting and %d requests already wait for it; retry shortly", host, p.o.MaxPending), http.StatusServiceUnavailable)
			return
		}
		// A held request gives its slot back: a hundred visitors waiting
		// for one sleeping hostname must not starve the others.
		<-p.slots
		slot = false
		err := p.hold(r.Context(), wait, budget)
		p.o.Pools.Unhold(host)
		if err != nil {
			if errors.Is(err, errBudget) {
				http.Error(w, fmt.Sprintf("%s did not start within %s", host, budget), http.StatusGatewayTimeout)
			}
			return
		}
		// Woken: take a slot back, waiting for one if need be (the burst
		// that a cold start releases is served as slots free up).
		select {
		case p.slots <- struct{}{}:
			slot = true
		case <-r.Context().Done():
			return
		}
	}
	if err := c.Limiter().Acquire(r.Context()); err != nil {
		if errors.Is(err, ErrQueueFull) {
			http.Error(w, fmt.Sprintf("every client of %s is busy and its queue is full; retry shortly", host), http.StatusServiceUnavailable)
		}
		return
	}
	defer c.Limiter().Release()
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, c)))
}

var errBudget = errors.New("cold start budget spent")

// hold waits for the hostname's ready signal, the budget, or the client
// going away.
func (p *Proxy) hold(ctx context.Context, ready <-chan struct{}, budget time.Duration) error {
	select {
	case <-ready:
		return nil
	case <-p.o.Clock.After(budget):
		return errBudget
	case <-ctx.Done():
		return ctx.Err()
	}
}
