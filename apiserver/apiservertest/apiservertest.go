// Package apiservertest starts a real API server in-process on a loopback
// listener over a temporary SQLite file, for tests of the server, the client
// and the providers.
package apiservertest

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/qodaperio/autoscale/apiserver"
	"github.com/qodaperio/autoscale/internal/client"
	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/fence"
	"github.com/qodaperio/autoscale/internal/h1"
	"github.com/qodaperio/autoscale/internal/nodes"
	"github.com/qodaperio/autoscale/internal/store/sqlite"
)

// OperatorKey is the operator key every test server is created with.
const OperatorKey = "test-operator-key-0123456789"

// Instance is a running test server.
type Instance struct {
	URL    string
	Store  *sqlite.Store
	Server *apiserver.Server
	Client *client.Client // authenticated with OperatorKey
	http   *httptest.Server
	edge   *h1.Server
	dir    string
	stop   context.CancelFunc
	done   chan struct{}
}

// Options tune a test server.
type Options struct {
	Autoscale *config.Autoscale // default: config.DefaultAutoscale()
	Now       func() time.Time
	// Clock, if set, drives the server; with RunSweeps the sweep loop runs
	// on it until Close.
	Clock     clock.Clock
	RunSweeps bool
	Nodes     nodes.Backend
	Logger    *slog.Logger
	OnSweep   func(apiserver.SweepReport)
	// Aperio settings; Resolver answers the outbound fence's lookups.
	Aperio   *config.Aperio
	Resolver fence.Resolver
	// EdgeSlots bounds the edge's concurrent requests (0: the default).
	EdgeSlots int
}

// Start starts a server. Close it when done.
func Start(o Options) (*Instance, error) {
	dir, err := os.MkdirTemp("", "apiservertest")
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "test.db"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if _, err := apiserver.EnsureOperatorKey(ctx, st, OperatorKey, time.Now()); err != nil {
		st.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	settings := config.DefaultAutoscale()
	if o.Autoscale != nil {
		settings = *o.Autoscale
	}
	aperio := config.DefaultAperio()
	if o.Aperio != nil {
		aperio = *o.Aperio
	}
	server := apiserver.New(apiserver.Deps{Store: st, Autoscale: settings, Now: o.Now, Clock: o.Clock,
		Nodes: o.Nodes, Logger: o.Logger, OnSweep: o.OnSweep, Aperio: aperio, Resolver: o.Resolver, EdgeSlots: o.EdgeSlots})
	srv := httptest.NewServer(server.Handler())
	c, err := client.New(client.Options{Endpoint: srv.URL, APIKey: OperatorKey, RetryMax: 1})
	if err != nil {
		srv.Close()
		st.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	i := &Instance{URL: srv.URL, Store: st, Server: server, Client: c, http: srv, dir: dir, done: make(chan struct{})}
	loopCtx, stop := context.WithCancel(context.Background())
	i.stop = stop
	if o.RunSweeps {
		go func() { defer close(i.done); _ = server.RunSweeps(loopCtx) }()
	} else {
		close(i.done)
	}
	return i, nil
}

// StartEdge serves the edge on loopback as autoscaled serve does (by h1),
// until Close, and returns its base URL.
func (i *Instance) StartEdge() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	i.edge = &h1.Server{Handler: i.Server.EdgeHandler()}
	go i.edge.Serve(ln)
	return "http://" + ln.Addr().String(), nil
}

// Close stops the server and removes its files.
func (i *Instance) Close() {
	if i.edge != nil {
		i.edge.Close()
	}
	i.stop()
	<-i.done
	i.http.CloseClientConnections()
	i.http.Close()
	i.Store.Close()
	os.RemoveAll(i.dir)
}

// DBPath is the SQLite file the server stores into.
func (i *Instance) DBPath() string { return filepath.Join(i.dir, "test.db") }
