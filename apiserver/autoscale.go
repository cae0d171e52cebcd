package apiserver

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/nodes"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/qodengine"
	"github.com/qodaperio/autoscale/internal/store"
)

// How far from the server's clock a statement's completion time may be:
// older rows are purged anyway, and a clock far ahead is a bug to report.
const (
	maxStatementAge  = LoadRetentionMinutes * time.Minute
	maxStatementSkew = time.Minute
)

// recordLoad is POST /api/pool/load: the edge reports statements it served.
// A statement for a suspended pool wakes it first.
func (s *Server) recordLoad(w http.ResponseWriter, r *http.Request) error {
	var req api.LoadRequest
	k, err := decodePoolRequest(w, r, &req, &req.PoolRef)
	if err != nil {
		return err
	}
	if len(req.Statements) == 0 {
		return invalidRequest("statements is required; accepted: 1 to %d statements, each {\"durationMs\": 0 to %d, \"at\": RFC 3339 time}", api.MaxLoadStatements, api.MaxStatementMs)
	}
	if len(req.Statements) > api.MaxLoadStatements {
		return invalidRequest("statements has %d entries; accepted: at most %d per call", len(req.Statements), api.MaxLoadStatements)
	}
	now := s.now()
	minutes := make([]int64, len(req.Statements))
	for i, st := range req.Statements {
		var at time.Time
		if st.At != nil {
			t, err := time.Parse(time.RFC3339Nano, *st.At)
			if err != nil {
				return invalidRequest("statements[%d].at %q is not accepted; accepted: an RFC 3339 time such as %s", i, clip(*st.At), now.UTC().Format(time.RFC3339))
			}
			at = t
			minutes[i] = t.Unix() / 60
		}
		switch {
		case st.DurationMs == nil:
			return invalidRequest("statements[%d].durationMs is required; accepted: 0 to %d", i, api.MaxStatementMs)
		case *st.DurationMs < 0 || *st.DurationMs > api.MaxStatementMs:
			return invalidRequest("statements[%d].durationMs is %d; accepted: 0 to %d", i, *st.DurationMs, api.MaxStatementMs)
		case st.At == nil:
			return invalidRequest("statements[%d].at is required; accepted: the RFC 3339 time the statement completed", i)
		case at.Before(now.Add(-maxStatementAge)):
			return invalidRequest("statements[%d].at %s is more than %d minutes before the server's time %s; accepted: the last %d minutes",
				i, at.UTC().Format(time.RFC3339), LoadRetentionMinutes, now.UTC().Format(time.RFC3339), LoadRetentionMinutes)
		case at.After(now.Add(maxStatementSkew)):
			return invalidRequest("statements[%d].at %s is after the server's time %s; accepted: up to %s ahead (check the reporter's clock)",
				i, at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), maxStatementSkew)
		}
	}
	p, err := s.loadPool(r.Context(), k)
	if err != nil {
		return err
	}
	resp := api.LoadResponse{Recorded: len(req.Statements)}
	if p.Suspended {
		if _, err := s.mutate(r.Context(), k, resumeMutation(ActorWake)); err != nil {
			return err
		}
		resp.Woke = true
		s.log.Info(fmt.Sprintf("autoscale: %s woke on a statement", k))
	}
	h := s.load.Handle(k)
	for i, st := range req.Statements {
		h.Record(*st.DurationMs, minutes[i])
	}
	s.metrics.statements.Add(float64(len(req.Statements)))
	return writeJSON(w, http.StatusOK, resp)
}

func poolFromQuery(r *http.Request) (pool.Key, error) {
	q, err := queryParams(r.URL.Query(), "tenant", "tenantDb", "pool")
	if err != nil {
		return pool.Key{}, err
	}
	k := pool.Key{Tenant: q["tenant"], TenantDB: q["tenantDb"], Pool: q["pool"]}
	return k, checkRef(r, k)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func ceilSecs(d time.Duration) int { return int(math.Ceil(d.Seconds())) }

// autoscaleStatus is GET /api/pool/autoscaleStatus: the last sweep's view of
// one pool, with its streaks, cooldowns and backoff as they stand now.
func (s *Server) autoscaleStatus(w http.ResponseWriter, r *http.Request) error {
	k, err := poolFromQuery(r)
	if err != nil {
		return err
	}
	p, err := s.loadPool(r.Context(), k)
	if err != nil {
		return err
	}
	row, err := s.store.AutoscaleState(r.Context(), k)
	if err != nil {
		return err
	}
	a := s.autoscale
	now := s.now()
	st := row.State
	out := api.AutoscaleStatus{
		Pool: k.String(), Enabled: a.Enabled, Banded: p.Band != nil, Size: p.Size(), Suspended: p.Suspended,
		NextSweepAt:   nextSweep(now, time.Duration(a.SweepSeconds)*time.Second).UTC(),
		HighWatermark: a.HighWatermark, LowWatermark: a.LowWatermark,
		OutStreak:         api.Streak{Count: st.OutStreak, Needed: a.OutStreak},
		InStreak:          api.Streak{Count: st.InStreak, Needed: a.InStreak},
		Failures:          st.Failures,
		BackoffSweepsLeft: st.BackoffLeft,
		LastAction:        timePtr(st.LastAction), LastResume: timePtr(st.LastResume),
		UnroutableReaders: s.nodes.UnroutableReaders(k),
		Decision:          "hold", From: p.Size(), To: p.Size(),
	}
	outLeft, inLeft := qodengine.CooldownsLeft(&a, &st, now)
	out.OutCooldownLeft, out.InCooldownLeft = ceilSecs(outLeft), ceilSecs(inLeft)
	if p.Band != nil {
		out.MinNodes, out.MaxNodes = &p.Band.Min, &p.Band.Max
	}
	sw, actionErr, lastAt := s.sweeper.get(k)
	switch {
	case p.Band == nil:
		out.Rule, out.RuleCode = "no band: the sweep leaves this pool alone; set one with pool/setAutoscale", "no_band"
	case !a.Enabled:
		out.Rule, out.RuleCode = qodengine.Decision{Why: qodengine.WhyDisabled}.Rule(), qodengine.WhyDisabled.String()
	case sw == nil:
		out.Rule, out.RuleCode = "not swept yet", "not_swept"
		if !lastAt.IsZero() {
			out.Rule = "not swept yet: the band was set after the last sweep"
		}
	default:
		d := sw.Decision
		out.SweptAt = timePtr(lastAt.UTC())
		out.Rule, out.RuleCode = d.Rule(), d.Why.String()
		out.From, out.To = d.From, d.To
		if d.Acts() {
			out.Decision = d.Direction.String()
		}
		out.Acted, out.ActionError = sw.Acted, actionErr
		out.Demand, out.Capacity = d.Demand, max(d.Capacity, 0)
		if !math.IsNaN(d.Utilization) {
			u := d.Utilization
			out.Utilization = &u
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

// poolNodes is GET /api/pool/nodes: the pool's nodes as the backend sees them.
func (s *Server) poolNodes(w http.ResponseWriter, r *http.Request) error {
	k, err := poolFromQuery(r)
	if err != nil {
		return err
	}
	if _, err := s.loadPool(r.Context(), k); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"pool": k.String(), "nodes": s.nodes.Nodes(k)})
}

// setRoutable is POST /api/pool/nodes/setRoutable: mark a node of the memory
// backend routable or not, for tests and drills.
func (s *Server) setRoutable(w http.ResponseWriter, r *http.Request) error {
	var req api.SetRoutableRequest
	k, err := decodePoolRequest(w, r, &req, &req.PoolRef)
	if err != nil {
		return err
	}
	if req.Index == nil || *req.Index < 0 {
		return invalidRequest("index is required; accepted: a node index from 0")
	}
	if req.Routable == nil {
		return invalidRequest("routable is required; accepted: true or false")
	}
	m, ok := s.nodes.(nodes.Marker)
	if !ok {
		return api.Errorf(api.CodeConflict, "this server's node backend reports routability itself; marking nodes needs the memory backend")
	}
	if err := m.SetRoutable(k, req.Role, *req.Index, *req.Routable); err != nil {
		return err
	}
	err = s.store.Mutate(r.Context(), func(tx store.Tx) error {
		return tx.Audit(store.AuditRow{At: s.now(), Actor: caller(r).actor(), Action: "pool.setRoutable", Tenant: k.Tenant,
			Target: k.String(), Detail: map[string]any{"role": req.Role, "index": *req.Index, "routable": *req.Routable}})
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"pool": k.String(), "nodes": s.nodes.Nodes(k)})
}
