package edge

import (
	"net/url"
	"sync"
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
	ProbeOK       bool
	// Inflight is what the client reports in flight itself, for clients
	// the edge does not proxy to.
	Inflight int
}

// Client is one registered client of a hostname.
type Client struct {
	ID   string
	info ClientInfo
	seen time.Time
	lim  *Limiter
}

// Target is where the client serves.
func (c *Client) Target() *url.URL { return c.info.Target }

// Limiter is the client's concurrency limiter.
func (c *Client) Limiter() *Limiter { return c.lim }

func (c *Client) routable(now time.Time, ttl time.Duration) bool {
	return now.Sub(c.seen) <= ttl && c.info.State == Active && c.info.ProbeOK
}

// Pools is every hostname's live pool.
type Pools struct {
	// TTL is how long a heartbeat keeps a client.
	TTL time.Duration
	// QueueLen bounds each client's line of waiting requests.
	QueueLen int

	mu    sync.Mutex
	hosts map[string]*hostPool
}

type hostPool struct {
	clients map[string]*Client
	// ready is closed, and replaced, when a client becomes routable:
	// every held request waits on it, no polling.
	ready chan struct{}
	held  int
}

// NewPools returns an empty set of pools.
func NewPools(ttl time.Duration, queueLen int) *Pools {
	return &Pools{TTL: ttl, QueueLen: queueLen, hosts: map[string]*hostPool{}}
}

func (p *Pools) host(name string) *hostPool {
	h := p.hosts[name]
	if h == nil {
		h = &hostPool{clients: map[string]*Client{}, ready: make(chan struct{})}
		p.hosts[name] = h
	}
	return h
}

// Heartbeat registers or refreshes a client; a client that becomes routable
// wakes every request held for the hostname at once.
func (p *Pools) Heartbeat(host, id string, info ClientInfo, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.host(host)
	c := h.clients[id]
	if c == nil {
		c = &Client{ID: id, lim: NewLimiter(info.MaxConcurrent, p.QueueLen)}
		h.clients[id] = c
	} else if c.info.MaxConcurrent != info.MaxConcurrent {
		c.lim.SetMax(info.MaxConcurrent)
	}
	c.info, c.seen = info, now
	if c.routable(now, p.TTL) && c.info.Target != nil {
		close(h.ready)
		h.ready = make(chan struct{})
	}
}

// Pick returns the client to send a request for host to: a routable primary
// client with the fewest permits in use, else a standby one. With none, it
// returns the channel that closes when one becomes routable (nil for a
// hostname no client ever registered: nothing is kept for unknown names).
func (p *Pools) Pick(host string, now time.Time) (*Client, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[host]
	if h == nil {
		return nil, nil
	}
	var best *Client
	bestLoad := 0
	for id, c := range h.clients {
		if now.Sub(c.seen) > p.TTL && c.lim.InUse() == 0 {
			delete(h.clients, id) // expired and idle: forget it
			continue
		}
		if !c.routable(now, p.TTL) || c.info.Target == nil {
			continue
		}
		load := c.lim.InUse()
		switch {
		case best == nil,
			c.info.Priority < best.info.Priority,
			c.info.Priority == best.info.Priority && load < bestLoad:
			best, bestLoad = c, load
		}
	}
	if best != nil {
		return best, nil
	}
	return nil, h.ready
}

// Hold counts a request as held for host, unless limit are held already;
// it returns the channel to wait on. Callers only hold for hostnames with an
// armed hook, so the pools kept for them are bounded by the records.
func (p *Pools) Hold(host string, limit int) (<-chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.host(host)
	if h.held >= limit {
		return nil, false
	}
	h.held++
	return h.ready, true
}

// Unhold ends one hold for host.
func (p *Pools) Unhold(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hosts[host]; h != nil && h.held > 0 {
		h.held--
	}
}

// Held is the requests held for host now.
func (p *Pools) Held(host string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hosts[host]; h != nil {
		return h.held
	}
	return 0
}

// Sample is the hostname's pool as the hook loop reads it: fresh, routable
// clients; capacity and inflight from the primary tier only. Inflight is
// the permits in use on the edge, or what a client reports when the edge
// does not proxy to it.
func (p *Pools) Sample(host string, now time.Time) hookengine.Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[host]
	if h == nil {
		return hookengine.Sample{}
	}
	s := hookengine.Sample{Waiting: h.held}
	for _, c := range h.clients {
		if !c.routable(now, p.TTL) {
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
