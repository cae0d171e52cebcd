package apiserver

import (
	"context"
	"net/http"
	"time"

	"github.com/qodaperio/autoscale/internal/edge"
	"github.com/qodaperio/autoscale/internal/hookengine"
)

// ClientTTL is how long a client heartbeat keeps the client in its
// hostname's pool.
const ClientTTL = 30 * time.Second

// Client states a heartbeat may announce.
const (
	ClientActive   = edge.Active
	ClientDraining = edge.Draining
	ClientDisabled = edge.Disabled
)

// clientQueue bounds the requests waiting on one client's limiter.
const clientQueue = 1000

// HoldForTest counts n requests as held for host, as the edge does when a
// request finds no routable client.
func (s *Server) HoldForTest(host string, n int) {
	for range n {
		s.pools.Hold(host, 1<<30)
	}
}

// edgeHooks tells the edge which hostnames have an armed hook.
type edgeHooks struct{ s *Server }

func (e edgeHooks) Hook(host string) edge.HookInfo {
	e.s.hooks.mu.Lock()
	defer e.s.hooks.mu.Unlock()
	lr := e.s.hooks.byHost[host]
	if lr == nil {
		return edge.HookInfo{}
	}
	// A record's keys bound its visitors even while the server ignores
	// declarations; only an armed, valid record may hold a request.
	hi := edge.HookInfo{AllowedIPs: lr.allowed}
	if e.s.aperio.Scaling && lr.valid && lr.state.Armed {
		hi.Armed, hi.Budget = true, lr.hook.ColdStart
	}
	return hi
}

// EdgeHandler is the edge proxy: requests by Host to the registered clients.
func (s *Server) EdgeHandler() http.Handler {
	return edge.NewProxy(edge.Options{Pools: s.pools, Hooks: edgeHooks{s}, Clock: s.clock, Log: s.log,
		GlobalSlots: s.edgeOpts[0], MaxPending: s.edgeOpts[1],
		OnHeld: func(host string, d time.Duration) { s.metrics.holdTime.WithLabelValues(host).Observe(d.Seconds()) }})
}

// ProbeClients runs one pass of the edge's backend probes now.
func (s *Server) ProbeClients(ctx context.Context) { s.pools.Probe(ctx, s.now()) }

// ProbeEvery is the interval between two passes of the edge's backend
// probes.
const ProbeEvery = 5 * time.Second

// RunProbes probes the clients that declare a probe_path every ProbeEvery
// until ctx ends.
func (s *Server) RunProbes(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.clock.After(ProbeEvery):
			s.ProbeClients(ctx)
		}
	}
}

// RefreshHooks reloads the hook records now (the edge learns new hooks on
// the loop's next tick otherwise).
func (s *Server) RefreshHooks(ctx context.Context) error { return s.reloadHooks(ctx, s.now()) }

// HeldRequests is the requests the edge holds for host now.
func (s *Server) HeldRequests(host string) int { return s.pools.Held(host) }

// PoolSample is the hostname's live pool as the hook loop samples it.
func (s *Server) PoolSample(host string) hookengine.Sample { return s.pools.Sample(host, s.now()) }
