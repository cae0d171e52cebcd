package apiserver

import (
	"sync"
	"time"

	"github.com/qodaperio/autoscale/internal/hookengine"
)

// ClientTTL is how long a client heartbeat keeps the client in its
// hostname's pool.
const ClientTTL = 30 * time.Second

// Client states a heartbeat may announce.
const (
	ClientActive   = "active"
	ClientDraining = "draining"
	ClientDisabled = "disabled"
)

// clientEntry is one client as its last heartbeat described it.
type clientEntry struct {
	MaxConcurrent int
	Priority      int
	State         string
	Inflight      int
	ProbeOK       bool
	Seen          time.Time
}

// registry is the live pool of every hostname: the clients that serve it,
// from their heartbeats, and the requests held for it. The edge will feed
// it too (inflight permits, held requests); until then heartbeats carry
// inflight and tests hold requests.
type registry struct {
	mu      sync.Mutex
	clients map[string]map[string]*clientEntry // hostname -> client id
	waiting map[string]int
}

func newRegistry() *registry {
	return &registry{clients: map[string]map[string]*clientEntry{}, waiting: map[string]int{}}
}

func (g *registry) heartbeat(host, id string, e clientEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.clients[host] == nil {
		g.clients[host] = map[string]*clientEntry{}
	}
	g.clients[host][id] = &e
}

// Hold and Release count requests held for a hostname (cold start).
func (g *registry) Hold(host string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting[host] += n
	if g.waiting[host] <= 0 {
		delete(g.waiting, host)
	}
}

// sample is the hostname's pool at now, as the hook loop reads it: only
// fresh, routable (active, probe passing) clients; capacity and inflight
// only from the primary tier.
func (g *registry) sample(host string, now time.Time) hookengine.Sample {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := hookengine.Sample{Waiting: g.waiting[host]}
	for id, c := range g.clients[host] {
		if now.Sub(c.Seen) > ClientTTL {
			delete(g.clients[host], id)
			continue
		}
		if c.State != ClientActive || !c.ProbeOK {
			continue
		}
		s.RoutableAnyTier++
		if c.Priority != 0 {
			continue // standby: serves, but is never capacity
		}
		s.Current++
		s.Capacity += c.MaxConcurrent
		s.Inflight += c.Inflight
	}
	return s
}

// HoldForTest counts n requests as held for host, as the edge will when a
// request finds no routable client.
func (s *Server) HoldForTest(host string, n int) { s.registry.Hold(host, n) }
