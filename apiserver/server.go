// Package apiserver is the HTTP API of the control plane: QoD pools and their
// autoscale bands, the load signal and the sweep that acts on it, keys,
// tenants, the audit log, events and metrics. New wires the handlers and the
// sweep onto a store; the binary under cmd/ runs them.
package apiserver

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/edge"
	"github.com/qodaperio/autoscale/internal/events"
	"github.com/qodaperio/autoscale/internal/fence"
	"github.com/qodaperio/autoscale/internal/nodes"
	"github.com/qodaperio/autoscale/internal/qodload"
	"github.com/qodaperio/autoscale/internal/secretbox"
	"github.com/qodaperio/autoscale/internal/store"
)

// Deps is everything the server needs from outside.
type Deps struct {
	Store     store.Store
	Autoscale config.Autoscale
	// Clock drives the sweep and stamps every change; tests pass a fake
	// one. Nil: Now if set, else the wall clock.
	Clock clock.Clock
	// Now is the clock for callers that only need to fix the time.
	Now    func() time.Time
	Logger *slog.Logger
	// Nodes runs the pools' nodes; nil: an in-memory backend.
	Nodes nodes.Backend
	// OnSweep, if set, is called after every sweep with what it did.
	OnSweep func(SweepReport)
	// Leader, for several replicas on one database, says whether this one
	// decides; nil: a single replica, which always does.
	Leader Leader
	// FlushGrace is how long a leader waits after the sweep instant for
	// the other replicas' flushes; 0: DefaultFlushGrace.
	FlushGrace time.Duration
	// Aperio is the Aperio half's settings (scaling on, outbound fence).
	Aperio config.Aperio
	// Resolver resolves hook hosts for the outbound fence; nil: the
	// system's. Tests inject one.
	Resolver fence.Resolver
	// SecretKey seals hook secrets (32 bytes). Nil: a random key for this
	// process only, so stored secrets do not survive a restart.
	SecretKey []byte
	// EdgeSlots bounds the requests the edge serves at once, and
	// EdgeMaxPending the requests held per hostname (0: Aperio's
	// edge_max_concurrent and cold_start_max_pending).
	EdgeSlots, EdgeMaxPending int
}

// Server holds the dependencies the handlers and the sweep share.
type Server struct {
	store     store.Store
	autoscale config.Autoscale
	clock     clock.Clock
	log       *slog.Logger
	nodes     nodes.Backend
	load      *qodload.Recorder
	events    *events.Bus
	metrics   *metrics
	sweeper   *sweeper
	onSweep   func(SweepReport)
	leader    Leader
	// leading is what the leader said at the last sweep.
	leading    atomic.Bool
	flushGrace time.Duration
	aperio     config.Aperio
	fence      *fence.Fence
	secrets    *secretbox.Box
	pools      *edge.Pools
	edgeOpts   [2]int
	hooks      *hookLoop
	handler    http.Handler
	// closing is closed by CloseStreams: event streams end.
	closing   chan struct{}
	closeOnce sync.Once
}

// CloseStreams ends every open event stream (at shutdown).
func (s *Server) CloseStreams() { s.closeOnce.Do(func() { close(s.closing) }) }

// nowClock is a clock whose time comes from a function; it waits on the
// wall clock.
type nowClock struct{ now func() time.Time }

func (c nowClock) Now() time.Time                         { return c.now() }
func (c nowClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c nowClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// New returns the server. Serve its Handler and run RunSweeps beside it.
func New(d Deps) *Server {
	s := &Server{store: d.Store, autoscale: d.Autoscale, clock: d.Clock, log: d.Logger, nodes: d.Nodes,
		load: qodload.NewRecorder(), events: events.NewBus(), onSweep: d.OnSweep, closing: make(chan struct{}),
		leader: d.Leader, flushGrace: d.FlushGrace}
	if s.flushGrace <= 0 {
		s.flushGrace = DefaultFlushGrace
	}
	s.leading.Store(s.leader == nil)
	s.aperio = d.Aperio
	s.pools, s.hooks = edge.NewPools(ClientTTL, clientQueue), newHookLoop()
	if d.EdgeSlots == 0 {
		d.EdgeSlots = d.Aperio.EdgeMaxConcurrent
	}
	if d.EdgeMaxPending == 0 {
		d.EdgeMaxPending = d.Aperio.ColdStartMaxPending
	}
	s.edgeOpts = [2]int{d.EdgeSlots, d.EdgeMaxPending}
	s.fence, _ = fence.New(fence.Policy{AllowHTTP: d.Aperio.ScalingAllowHTTP, AllowPrivate: d.Aperio.ScalingAllowPrivate,
		Allowlist: d.Aperio.OutboundAllowlist, BlockPrivate: d.Aperio.OutboundBlockPrivate}, d.Resolver)
	key := d.SecretKey
	if key == nil {
		key = make([]byte, secretbox.KeySize)
		_, _ = rand.Read(key)
	}
	var err error
	if s.secrets, err = secretbox.New(key); err != nil {
		panic("apiserver: " + err.Error()) // a programming error: serve checks the key first
	}
	if s.clock == nil {
		s.clock = clock.Real{}
		if d.Now != nil {
			s.clock = nowClock{d.Now}
		}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.nodes == nil {
		s.nodes = nodes.NewMemory()
	}
	s.sweeper = newSweeper()
	s.metrics = newMetrics(s)
	s.handler = s.routes()
	return s
}

// NewServer returns the API as an http.Handler, without the sweep loop.
func NewServer(d Deps) http.Handler { return New(d).Handler() }

// Handler is the HTTP API.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the server's Prometheus registry (served on /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.metrics.registry }

// Events is the server's event bus.
func (s *Server) Events() *events.Bus { return s.events }

func (s *Server) now() time.Time { return s.clock.Now() }

// RestoreNodes tells the node backend what every stored pool should run;
// call it once at start-up, before serving.
func (s *Server) RestoreNodes(ctx context.Context) error {
	pools, err := s.store.ListPools(ctx, "")
	if err != nil {
		return err
	}
	for i := range pools {
		if err := s.nodes.Apply(ctx, pools[i].Key, runningRoles(&pools[i])); err != nil {
			return err
		}
	}
	return nil
}
