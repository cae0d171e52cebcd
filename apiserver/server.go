// Package apiserver is the HTTP API of the control plane: QoD pools and their
// autoscale bands, keys, tenants and the audit log. NewServer wires the
// handlers onto a store; the binary under cmd/ runs it.
package apiserver

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/store"
)

// Deps is everything the server needs from outside.
type Deps struct {
	Store     store.Store
	Autoscale config.Autoscale
	// Now is the clock; tests pass a fake one.
	Now    func() time.Time
	Logger *slog.Logger
}

// Server holds the dependencies the handlers share.
type Server struct {
	store     store.Store
	autoscale config.Autoscale
	now       func() time.Time
	log       *slog.Logger
}

// NewServer returns the API as an http.Handler.
func NewServer(d Deps) http.Handler {
	s := &Server{store: d.Store, autoscale: d.Autoscale, now: d.Now, log: d.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s.routes()
}
