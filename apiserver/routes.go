package apiserver

import (
	"net/http"

	"github.com/gorilla/mux"
)

// routes lists every route the API serves, with the scope each needs.
func (s *Server) routes() http.Handler {
	r := mux.NewRouter()
	r.NotFoundHandler = s.handle(anyKey, func(w http.ResponseWriter, r *http.Request) error {
		return notFound("no route for %s %s; see the API reference in docs/", r.Method, r.URL.Path)
	})
	r.MethodNotAllowedHandler = s.handle(anyKey, func(w http.ResponseWriter, r *http.Request) error {
		return invalidRequest("method %s is not allowed on %s", r.Method, r.URL.Path)
	})

	r.Handle("/healthz", http.HandlerFunc(s.healthz)).Methods(http.MethodGet)
	r.Handle("/readyz", http.HandlerFunc(s.readyz)).Methods(http.MethodGet)
	// Per-pool metrics name tenants and pools: operator key (Prometheus
	// sends it as a bearer token).
	r.Handle("/metrics", s.handle(operatorKey, s.serveMetrics)).Methods(http.MethodGet)

	// Full paths on one router (no subrouter), so a known path with the
	// wrong method gets the method answer rather than "no route".
	api := route{r}
	// QoD pools.
	api.Handle("/pool/create", s.handle(adminKey, s.createPool)).Methods(http.MethodPost)
	api.Handle("/pool/setAutoscale", s.handle(adminKey, s.setAutoscale)).Methods(http.MethodPost)
	api.Handle("/pool/scale", s.handle(adminKey, s.scalePool)).Methods(http.MethodPost)
	api.Handle("/pool/suspend", s.handle(adminKey, s.suspendPool)).Methods(http.MethodPost)
	api.Handle("/pool/resume", s.handle(adminKey, s.resumePool)).Methods(http.MethodPost)
	api.Handle("/pool/delete", s.handle(adminKey, s.deletePool)).Methods(http.MethodPost)
	api.Handle("/pool/get", s.handle(anyKey, s.getPool)).Methods(http.MethodGet)
	api.Handle("/pool/list", s.handle(anyKey, s.listPools)).Methods(http.MethodGet)
	api.Handle("/autoscale/config", s.handle(anyKey, s.autoscaleConfig)).Methods(http.MethodGet)
	// The load signal, the sweep's explanation, and the nodes.
	api.Handle("/pool/load", s.handle(adminKey, s.recordLoad)).Methods(http.MethodPost)
	api.Handle("/pool/autoscaleStatus", s.handle(anyKey, s.autoscaleStatus)).Methods(http.MethodGet)
	api.Handle("/pool/nodes", s.handle(anyKey, s.poolNodes)).Methods(http.MethodGet)
	api.Handle("/pool/nodes/setRoutable", s.handle(operatorKey, s.setRoutable)).Methods(http.MethodPost)
	api.Handle("/events", s.handle(anyKey, s.streamEvents)).Methods(http.MethodGet)
	// Aperio scaling hooks.
	api.Handle("/scaling/validate", s.handle(adminKey, s.validateScaling)).Methods(http.MethodPost)
	api.Handle("/scaling", s.handle(anyKey, s.listScaling)).Methods(http.MethodGet)
	api.Handle("/scaling/{hostname}", s.handle(adminKey, s.putScaling)).Methods(http.MethodPut)
	api.Handle("/scaling/{id}", s.handle(anyKey, s.getScaling)).Methods(http.MethodGet)
	api.Handle("/scaling/{id}", s.handle(adminKey, s.disarmScaling)).Methods(http.MethodDelete)
	api.Handle("/clients/heartbeat", s.handle(anyKey, s.heartbeat)).Methods(http.MethodPost)
	// Tenants and keys (operator only), audit.
	api.Handle("/tenant/setQuota", s.handle(operatorKey, s.setQuota)).Methods(http.MethodPost)
	api.Handle("/tenant/get", s.handle(anyKey, s.getTenant)).Methods(http.MethodGet)
	api.Handle("/keys", s.handle(operatorKey, s.createKey)).Methods(http.MethodPost)
	api.Handle("/keys", s.handle(operatorKey, s.listKeys)).Methods(http.MethodGet)
	api.Handle("/keys/{id}", s.handle(operatorKey, s.revokeKey)).Methods(http.MethodDelete)
	api.Handle("/audit", s.handle(anyKey, s.listAudit)).Methods(http.MethodGet)
	return r
}

// route prefixes /api onto every path it registers.
type route struct{ r *mux.Router }

func (a route) Handle(path string, h http.Handler) *mux.Route { return a.r.Handle("/api"+path, h) }
