package edge

import (
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qodaperio/autoscale/internal/hookengine"
)

// Client states a heartbeat may announce.
const (
	Active   = "active"
	Draining = "draining"
	Disabled = "disabled"
)

// ClientInfo is what a heartbeat says about a client.
type ClientInfo struct {
	Target        *url.URL // nil: the client serves elsewhere; capacity only
	MaxConcurrent int
	Priority      int
	State         string
	// ProbeOK is the client's own word on its backend.
	ProbeOK bool
	// ProbePath, when set, is the path on Target the edge GETs every probe
	// pass; a client failing it is not routable.
	ProbePath string
	// Inflight is what the client reports in flight itself, for clients
	// the edge does not proxy to.
	Inflight int
}

// HostSettings are a hostname's edge settings, announced with its clients'
// heartbeats; the latest heartbeat's win.
type HostSettings struct {
	// Maintenance answers 503 to every request and never starts a client.
	Maintenance bool
	// Resilience keeps recent successful GET answers, served stale when no
	// client answers in time.
	Resilience bool
	// Fallback is where a request is redirected when no client answers in
	// time and no stale answer is kept; "" for none.
	Fallback string
	// AllowedIPs are the owning key's: visitors from elsewhere get 403
	// before anything else. Empty: everyone.
	AllowedIPs []netip.Prefix
	// Owned is false until a client of the hostname has heartbeated since
	// the server started.
	Owned bool
}

// AllowedBy reports whether addr is inside one of prefixes; no prefixes
// allow everyone.
func AllowedBy(prefixes []netip.Prefix, addr netip.Addr) bool {
	if len(prefixes) == 0 {
		return true
	}
	addr = addr.Unmap()
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Client is one registered client of a hostname.
type Client struct {
	ID   string
	info ClientInfo
	seen time.Time
	lim  *Limiter

	// Where the direct path sends requests: host:port and the target's
	// path, for plain-http targets.
	addr     string
	basePath string
	direct   bool
	idle     shardedIdle

	probeFailed atomic.Bool
	// st is what the request path reads without a lock: the fields above
	// as of the last heartbeat, replaced whole.
	st atomic.Pointer[clientState]
}

// clientState is a client as the last heartbeat left it.
type clientState struct {
	info     ClientInfo
	seen     time.Time
	addr     string
	basePath string
	direct   bool
}

func (c *Client) publish() {
	c.st.Store(&clientState{info: c.info, seen: c.seen, addr: c.addr, basePath: c.basePath, direct: c.direct})
}

func (c *Client) state() *clientState { return c.st.Load() }

// live is the one rule of a client taking work: a fresh heartbeat, active,
// its probe passing. Routing also needs a target; capacity does not (a
// client may serve elsewhere and report its own inflight).
func (st *clientState) live(c *Client, now time.Time, ttl time.Duration) bool {
	return now.Sub(st.seen) <= ttl && st.info.State == Active && st.info.ProbeOK && !c.probeFailed.Load()
}

// Target is where the client serves.
func (c *Client) Target() *url.URL { return c.state().info.Target }

// Limiter is the client's concurrency limiter.
func (c *Client) Limiter() *Limiter { return c.lim }

func (c *Client) setTarget(u *url.URL) {
	old := c.info.Target
	if old != nil && u != nil && old.String() == u.String() {
		return
	}
	c.idle.closeAll()
	c.addr, c.basePath, c.direct = "", "", false
	if u == nil {
		return
	}
	c.addr = u.Host
	if u.Port() == "" {
		c.addr = u.Hostname() + ":80"
		if strings.Contains(u.Hostname(), ":") {
			c.addr = "[" + u.Hostname() + "]:80"
		}
	}
	c.basePath = u.EscapedPath()
	c.direct = u.Scheme == "http"
}

func (c *Client) live(now time.Time, ttl time.Duration) bool { return c.state().live(c, now, ttl) }

// Pools is every hostname's live pool.
type Pools struct {
	// TTL is how long a heartbeat keeps a client.
	TTL time.Duration
	// QueueLen bounds each client's line of waiting requests.
	QueueLen int

	mu    sync.RWMutex
	hosts map[string]*hostPool
}

type hostPool struct {
	mu      sync.Mutex
	clients map[string]*Client
	// ready is closed, and replaced, when a client becomes routable:
	// every held request waits on it, no polling.
	ready    chan struct{}
	held     int
	settings *HostSettings // replaced whole, never changed in place
	parked   []*parked     // held requests without a goroutine
	view     atomic.Pointer[hostView]
	stale    *staleCache // nil unless the hostname opted into resilience
}

// NewPools returns an empty set of pools.
func NewPools(ttl time.Duration, queueLen int) *Pools {
	return &Pools{TTL: ttl, QueueLen: queueLen, hosts: map[string]*hostPool{}}
}

// lookup returns host's pool, or nil.
func (p *Pools) lookup(name string) *hostPool {
	p.mu.RLock()
	h := p.hosts[name]
	p.mu.RUnlock()
	return h
}

// host returns host's pool, creating it.
func (p *Pools) host(name string) *hostPool {
	if h := p.lookup(name); h != nil {
		return h
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[name]
	if h == nil {
		h = &hostPool{clients: map[string]*Client{}, ready: make(chan struct{}), settings: &HostSettings{}}
		h.rebuildLocked()
		p.hosts[name] = h
	}
	return h
}

// Heartbeat registers or refreshes a client and the hostname's settings; a
// client that becomes routable wakes every request held for the hostname at
// once.
func (p *Pools) Heartbeat(host, id string, info ClientInfo, settings HostSettings, now time.Time) {
	h := p.host(host)
	h.mu.Lock()
	// Hostnames without a hook are never sampled: their heartbeats are
	// where clients that went away are forgotten.
	h.forgetExpiredLocked(now, p.TTL)
	var woken []*parked
	defer func() {
		h.mu.Unlock()
		wakeAll(woken)
	}()
	c := h.clients[id]
	if c == nil {
		c = &Client{ID: id, lim: NewLimiter(info.MaxConcurrent, p.QueueLen)}
		h.clients[id] = c
	} else if c.info.MaxConcurrent != info.MaxConcurrent {
		c.lim.SetMax(info.MaxConcurrent)
	}
	if c.info.ProbePath != info.ProbePath || c.info.Target == nil || info.Target == nil || c.info.Target.String() != info.Target.String() {
		c.probeFailed.Store(false) // a new thing to probe: innocent until probed
	}
	c.setTarget(info.Target)
	c.info, c.seen = info, now
	c.publish()
	settings.Owned = true
	h.settings = &settings
	switch {
	case settings.Resilience && h.stale == nil:
		h.stale = newStaleCache()
	case !settings.Resilience:
		h.stale = nil
	}
	woken = h.wakeIfRoutableLocked(c, now, p.TTL)
	h.rebuildLocked()
}

// hostView is what the request path reads without a lock: the hostname's
// clients that have a target, its settings, and its ready signal.
type hostView struct {
	clients  []*Client
	settings *HostSettings
	stale    *staleCache
	ready    chan struct{}
}

// rebuildLocked publishes the hostname's view after a change.
func (h *hostPool) rebuildLocked() {
	v := &hostView{settings: h.settings, stale: h.stale, ready: h.ready}
	for _, c := range h.clients {
		if c.info.Target != nil {
			v.clients = append(v.clients, c)
		}
	}
	h.view.Store(v)
}

// forgetExpiredLocked drops clients whose heartbeat expired and that serve
// nothing any more.
func (h *hostPool) forgetExpiredLocked(now time.Time, ttl time.Duration) {
	changed := false
	for id, c := range h.clients {
		if now.Sub(c.seen) > ttl && c.lim.InUse() == 0 {
			delete(h.clients, id)
			c.idle.closeAll()
			changed = true
		}
	}
	if changed {
		h.rebuildLocked()
	}
}

// wakeIfRoutableLocked fires the hostname's signal when c is routable, and
// returns the parked requests to wake (outside the lock, which each of them
// takes on its way to the client).
func (h *hostPool) wakeIfRoutableLocked(c *Client, now time.Time, ttl time.Duration) []*parked {
	if !c.live(now, ttl) || c.info.Target == nil {
		return nil
	}
	close(h.ready)
	h.ready = make(chan struct{})
	woken := h.parked[:0]
	for _, pk := range h.parked {
		// One that its budget claimed first is on its way out already.
		if pk.claimed.CompareAndSwap(false, true) {
			woken = append(woken, pk)
			h.held--
		}
	}
	h.parked = nil
	return woken
}

// wakeAll sends requests that left their hold on their way, in the order
// they arrived.
func wakeAll(list []*parked) {
	for _, pk := range list {
		pk.dispatch()
	}
}

// route is where a request for a hostname goes now.
type route struct {
	client *Client // nil: no routable client
	// ready closes when a client becomes routable (nil for a hostname no
	// client ever registered: nothing is kept for unknown names).
	ready    <-chan struct{}
	settings *HostSettings
	stale    *staleCache
}

var noSettings = &HostSettings{}

// route picks the client to send a request for host to: a routable primary
// client with the fewest permits in use, else a standby one. It takes no
// lock: it reads the hostname's published view.
func (p *Pools) route(host string, now time.Time) route {
	h := p.lookup(host)
	if h == nil {
		return route{settings: noSettings}
	}
	v := h.view.Load()
	var best *Client
	var bestSt *clientState
	bestLoad := 0
	for _, c := range v.clients {
		st := c.state()
		if st.info.Target == nil || !st.live(c, now, p.TTL) {
			continue
		}
		load := c.lim.InUse()
		switch {
		case best == nil,
			st.info.Priority < bestSt.info.Priority,
			st.info.Priority == bestSt.info.Priority && load < bestLoad:
			best, bestSt, bestLoad = c, st, load
		}
	}
	rt := route{client: best, settings: v.settings, stale: v.stale}
	if best == nil {
		rt.ready = v.ready
	}
	return rt
}

// Pick returns the client route would send a request for host to, or the
// channel that closes when one becomes routable.
func (p *Pools) Pick(host string, now time.Time) (*Client, <-chan struct{}) {
	rt := p.route(host, now)
	return rt.client, rt.ready
}

// Hold counts a request as held for host, unless limit are held already;
// it returns the channel to wait on. Callers only hold for hostnames with an
// armed hook, so the pools kept for them are bounded by the records.
func (p *Pools) Hold(host string, limit int) (<-chan struct{}, bool) {
	h := p.host(host)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held >= limit {
		return nil, false
	}
	h.held++
	return h.ready, true
}

// Unhold ends one hold for host.
func (p *Pools) Unhold(host string) {
	if h := p.lookup(host); h != nil {
		h.mu.Lock()
		if h.held > 0 {
			h.held--
		}
		h.mu.Unlock()
	}
}

// Held is the requests held for host now.
func (p *Pools) Held(host string) int {
	if h := p.lookup(host); h != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.held
	}
	return 0
}

// Sample is the hostname's pool as the hook loop reads it: fresh, routable
// clients; capacity and inflight from the primary tier only. Inflight is
// the permits in use on the edge, or what a client reports when the edge
// does not proxy to it.
func (p *Pools) Sample(host string, now time.Time) hookengine.Sample {
	h := p.lookup(host)
	if h == nil {
		return hookengine.Sample{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgetExpiredLocked(now, p.TTL)
	s := hookengine.Sample{Waiting: h.held}
	for _, c := range h.clients {
		if !c.live(now, p.TTL) {
			continue
		}
		s.RoutableAnyTier++
		if c.info.Priority != 0 {
			continue // standby: serves, never capacity
		}
		s.Current++
		s.Capacity += c.info.MaxConcurrent
		s.Inflight += max(c.lim.InUse(), c.info.Inflight)
	}
	return s
}
