package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/qodaperio/autoscale/internal/clock"
)

// Hooks is what the edge needs to know about a hostname's scaling hook.
type Hooks interface {
	Hook(host string) HookInfo
}

// HookInfo is a hostname's scaling hook as the edge sees it.
type HookInfo struct {
	// Armed: a request finding no routable client may be held, for at most
	// Budget, while the hook loop starts one.
	Armed  bool
	Budget time.Duration
	// AllowedIPs are those of the keys that armed the record, for a
	// hostname no client has heartbeated for since the server started.
	AllowedIPs []netip.Prefix
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
	// OnHeld, when set, learns how long each held request waited.
	OnHeld func(host string, held time.Duration)
}

// Proxy routes requests by Host to the hostname's clients.
type Proxy struct {
	o       Options
	slots   *Limiter // the global request slots: a FIFO line, one atomic operation while nobody waits
	rp      *httputil.ReverseProxy
	buffers *bufferPool
}

// targetKey carries, to the reverse proxy's hooks, where a request goes.
type targetKey struct{}

type proxied struct {
	c    *Client
	rt   route
	host string
}

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
	p := &Proxy{o: o, slots: NewLimiter(o.GlobalSlots, math.MaxInt), buffers: bp}
	p.rp = &httputil.ReverseProxy{
		Transport:  transport,
		BufferPool: bp,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(pr.In.Context().Value(targetKey{}).(*proxied).c.Target())
			pr.SetXForwarded()
			pr.Out.Header.Del(ProbeHeader) // only the edge's probes carry it
			pr.Out.Host = pr.In.Host       // the client serves the hostname it registered for
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			px := r.Context().Value(targetKey{}).(*proxied)
			if r.Context().Err() != nil {
				return // the visitor left
			}
			o.Log.Warn("edge: upstream failed", "host", px.host, "err", err)
			if rec, ok := w.(*recorder); ok {
				rec.overflow = true // whatever is served now is not an answer to keep
			}
			p.fallThrough(w, r, px.rt, http.StatusBadGateway, fmt.Sprintf("the client serving %s failed to answer", px.host))
		},
	}
	return p
}

// canonicalHost is the Host header without port, lowercased. The common
// case, a lowercase name without port, costs nothing.
func canonicalHost(h string) string {
	plain := true
	for i := 0; i < len(h); i++ {
		if c := h[i]; c == ':' || ('A' <= c && c <= 'Z') {
			plain = false
			break
		}
	}
	if plain && !strings.HasSuffix(h, ".") {
		return h
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := canonicalHost(r.Host)
	rt := p.o.Pools.route(host, p.o.Clock.Now())
	// The owning key's allowed_ips come first, so that a visitor it would
	// refuse can neither start a client nor learn that the route exists.
	allowed := rt.settings.AllowedIPs
	if !rt.settings.Owned && rt.client == nil {
		allowed = p.o.Hooks.Hook(host).AllowedIPs
	}
	if len(allowed) > 0 {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !AllowedBy(allowed, ap.Addr()) {
			http.Error(w, "your address may not reach this hostname", http.StatusForbidden)
			return
		}
	}
	if rt.settings.Maintenance {
		w.Header().Set("Retry-After", "300")
		http.Error(w, fmt.Sprintf("%s is down for maintenance", host), http.StatusServiceUnavailable)
		return
	}
	p.serve(w, r, host, time.Time{}, time.Time{})
}

// serve routes r to a client of host, holding it through a cold start
// whose budget ends at expires (zero: none started yet; heldSince is when
// the hold began).
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, host string, expires, heldSince time.Time) {
	// The global limit queues arrivals rather than refusing them: the line
	// moves as requests finish or are held.
	if p.slots.Acquire(r.Context()) != nil {
		return // the visitor left while in line
	}
	slot := true
	defer func() {
		if slot {
			p.slots.Release()
		}
	}()
	rt := p.o.Pools.route(host, p.o.Clock.Now())
	var expired <-chan time.Time // the budget's timer, one for the whole hold
	for rt.client == nil {
		hk := p.o.Hooks.Hook(host)
		if !hk.Armed {
			why := fmt.Sprintf("no client serves %s", host)
			if rt.ready != nil {
				why = fmt.Sprintf("no client of %s is routable now", host)
			}
			p.fallThrough(w, r, rt, http.StatusBadGateway, why)
			return
		}
		now := p.o.Clock.Now()
		if expires.IsZero() {
			expires, heldSince = now.Add(hk.Budget), now
		}
		if !now.Before(expires) {
			p.budgetSpent(w, r, host, hk.Budget)
			return
		}
		// A held request gives its slot back: a hundred visitors waiting
		// for one sleeping hostname must not starve the others.
		p.slots.Release()
		slot = false
		if parkable(w, r) {
			switch p.parkRequest(w, r, host, expires, heldSince, hk.Budget) {
			case parkedOK:
				return // resumed on a new goroutine when the hostname wakes
			case parkFull:
				p.tooManyHeld(w, host)
				return
			}
		}
		if expired == nil {
			// The timer starts before the request counts as held, so that
			// whoever sees it held knows its budget is running.
			expired = p.o.Clock.After(expires.Sub(now))
		}
		wait, ok := p.o.Pools.Hold(host, p.o.MaxPending)
		if !ok {
			p.tooManyHeld(w, host)
			return
		}
		err := p.hold(r.Context(), wait, expired)
		p.o.Pools.Unhold(host)
		if p.o.OnHeld != nil {
			p.o.OnHeld(host, p.o.Clock.Now().Sub(heldSince))
		}
		if err != nil {
			if errors.Is(err, errBudget) {
				p.budgetSpent(w, r, host, hk.Budget)
			}
			return
		}
		// Woken: take a slot back, waiting for one if need be (the burst
		// that a cold start releases is served as slots free up).
		if p.slots.Acquire(r.Context()) != nil {
			return
		}
		slot = true
		rt = p.o.Pools.route(host, p.o.Clock.Now())
	}
	c := rt.client
	if err := c.Limiter().Acquire(r.Context()); err != nil {
		if errors.Is(err, ErrQueueFull) {
			http.Error(w, fmt.Sprintf("every client of %s is busy and its queue is full; retry shortly", host), http.StatusServiceUnavailable)
		}
		return
	}
	defer c.Limiter().Release()
	var rec *recorder
	out := w
	if rt.stale != nil && keepable(r) {
		rec = &recorder{ResponseWriter: w}
		out = rec
	}
	if !c.state().direct || r.Header.Get("Upgrade") != "" {
		p.rp.ServeHTTP(out, r.WithContext(context.WithValue(r.Context(), targetKey{}, &proxied{c: c, rt: rt, host: host})))
	} else if wrote, err := p.roundTrip(out, r, c); err != nil {
		if !wrote {
			if r.Context().Err() == nil {
				p.o.Log.Warn("edge: upstream failed", "host", host, "err", err)
				p.fallThrough(w, r, rt, http.StatusBadGateway, fmt.Sprintf("the client serving %s failed to answer", host))
			}
			return
		}
		if rec != nil {
			rec.overflow = true // cut short: not an answer to keep
		}
		// Part of the answer went out: all that is left is to cut the
		// visitor's connection so it cannot take the part for the whole.
		panic(http.ErrAbortHandler)
	}
	if rec != nil {
		if a := rec.answer(p.o.Clock.Now()); a != nil {
			rt.stale.put(r.URL.RequestURI(), a)
		}
	}
}

func (p *Proxy) tooManyHeld(w http.ResponseWriter, host string) {
	http.Error(w, fmt.Sprintf("%s is starting and %d requests already wait for it; retry shortly", host, p.o.MaxPending), http.StatusServiceUnavailable)
}

// budgetSpent answers a request whose cold-start budget ran out.
func (p *Proxy) budgetSpent(w http.ResponseWriter, r *http.Request, host string, budget time.Duration) {
	p.fallThrough(w, r, p.o.Pools.route(host, p.o.Clock.Now()), http.StatusGatewayTimeout,
		fmt.Sprintf("%s did not start within %s", host, budget))
}

// fallThrough answers a request no client will serve: the hostname's kept
// answer when it opted into resilience, else its fallback redirect, else
// code with why.
func (p *Proxy) fallThrough(w http.ResponseWriter, r *http.Request, rt route, code int, why string) {
	if rt.stale != nil && keepable(r) {
		if a := rt.stale.get(r.URL.RequestURI()); a != nil {
			a.serve(w, p.o.Clock.Now())
			return
		}
	}
	if rt.settings.Fallback != "" {
		http.Redirect(w, r, rt.settings.Fallback, http.StatusFound)
		return
	}
	http.Error(w, why, code)
}

var errBudget = errors.New("cold start budget spent")

// hold waits for the hostname's ready signal, the budget, or the client
// going away.
func (p *Proxy) hold(ctx context.Context, ready <-chan struct{}, expired <-chan time.Time) error {
	select {
	case <-ready:
		return nil
	case <-expired:
		return errBudget
	case <-ctx.Done():
		return ctx.Err()
	}
}
