package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/edge"
	"github.com/qodaperio/autoscale/internal/hook"
	"github.com/qodaperio/autoscale/internal/hookengine"
	"github.com/qodaperio/autoscale/internal/store"
)

// MaxCallsInFlight bounds the hook calls in flight across the server.
const MaxCallsInFlight = 8

// HookTick is the hook loop's sampling interval.
const HookTick = time.Second

// hookLoop holds the loop's records and their state in memory: each
// replica calls from its own view (calls carry an Idempotency-Key for that
// reason). What must survive (armed, failures) is written to the record.
// The records are re-read from the store when a local change marks them
// dirty and every hookReload otherwise (another replica's changes), so a
// tick reads no database.
type hookLoop struct {
	mu       sync.Mutex
	records  []*loopRecord
	byID     map[string]*loopRecord
	byHost   map[string]*loopRecord
	loadedAt time.Time
	dirty    atomic.Bool
	slots    chan struct{}
	calls    sync.WaitGroup
	lastHit  time.Time
}

// loopRecord is one record as the loop works on it.
type loopRecord struct {
	rec     store.ScalingRecord
	hook    hook.Hook
	valid   bool  // the stored declaration passes the rules
	version int64 // the record version state was loaded from
	state   hookengine.State
	util    float64 // at the last sample; -1 unknown
	// allowed are the visitor addresses the arming keys allow; nil when
	// one of them allows everyone.
	allowed []netip.Prefix
}

// hookReload is how often the loop re-reads the records without a local
// change.
const hookReload = 5 * time.Second

func newHookLoop() *hookLoop {
	return &hookLoop{byID: map[string]*loopRecord{}, byHost: map[string]*loopRecord{}, slots: make(chan struct{}, MaxCallsInFlight)}
}

// reload rebuilds the record list from the store, keeping the state of
// records whose version did not change.
func (s *Server) reloadHooks(ctx context.Context, now time.Time) error {
	recs, err := s.store.ListScaling(ctx, "", true)
	if err != nil {
		return err
	}
	keys, err := s.store.ListKeys(ctx)
	if err != nil {
		return err
	}
	keyByID := make(map[string]*store.Key, len(keys))
	for i := range keys {
		keyByID[keys[i].ID] = &keys[i]
	}
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	list := make([]*loopRecord, 0, len(recs))
	byID := make(map[string]*loopRecord, len(recs))
	byHost := make(map[string]*loopRecord, len(recs))
	for i := range recs {
		rec := recs[i]
		lr := s.hooks.byID[rec.ID]
		if lr == nil || lr.version != rec.Version {
			// New, edited, re-armed or disarmed elsewhere: the stored
			// state wins, the clocks start again.
			inFlight := lr != nil && lr.state.InFlight
			h, err := rec.Declaration.Validate()
			lr = &loopRecord{hook: h, valid: err == nil, version: rec.Version, state: rec.State, util: -1}
			lr.state.AboveSince, lr.state.IdleSince, lr.state.InFlight = time.Time{}, time.Time{}, inFlight
		}
		lr.rec = rec
		lr.allowed = armingKeysAllow(rec.KeyIDs, keyByID, now)
		list = append(list, lr)
		byID[rec.ID] = lr
		byHost[rec.Hostname] = lr
	}
	s.hooks.records, s.hooks.byID, s.hooks.byHost, s.hooks.loadedAt = list, byID, byHost, now
	return nil
}

// armingKeysAllow is who may visit a hostname on the word of the keys that
// armed its record: any live one of them allowing an address is enough, and
// one without allowed_ips allows everyone (nil).
func armingKeysAllow(ids []string, keys map[string]*store.Key, now time.Time) []netip.Prefix {
	var out []netip.Prefix
	for _, id := range ids {
		k := keys[id]
		if k == nil || k.RevokedAt != nil || (k.ExpiresAt != nil && !now.Before(*k.ExpiresAt)) {
			continue
		}
		if len(k.AllowedIPs) == 0 {
			return nil
		}
		out = append(out, prefixes(k.AllowedIPs)...)
	}
	return out
}

// RunHookLoop samples every armed record every HookTick until ctx ends.
func (s *Server) RunHookLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			s.hooks.calls.Wait()
			return ctx.Err()
		case at := <-s.clock.After(HookTick):
			s.HookTickAt(ctx, at)
		}
	}
}

// WaitHookCalls waits for the calls started so far (tests).
func (s *Server) WaitHookCalls() { s.hooks.calls.Wait() }

// HookTickAt runs one pass of the hook loop at now.
func (s *Server) HookTickAt(ctx context.Context, now time.Time) {
	if now.Sub(s.hooks.lastHit) >= time.Minute {
		s.hooks.lastHit = now
		s.pruneScaling(ctx, now)
	}
	if !s.aperio.Scaling {
		return
	}
	if s.hooks.dirty.Swap(false) || now.Sub(s.hooks.loadedAt) >= hookReload {
		if err := s.reloadHooks(ctx, now); err != nil {
			s.hooks.dirty.Store(true)
			s.log.Warn("hooks: reading records failed; the loop goes on with what it had", "err", err)
		}
	}
	s.hookPass(ctx, now)
}

// hookPass samples every record once: no database, no allocation for a
// record that does not call.
func (s *Server) hookPass(ctx context.Context, now time.Time) {
	s.hooks.mu.Lock()
	defer s.hooks.mu.Unlock()
	for _, lr := range s.hooks.records {
		if !lr.valid {
			continue // stored before a rule changed: never called
		}
		sample := s.pools.Sample(lr.rec.Hostname, now)
		d, next := hookengine.Decide(&lr.hook, lr.state, sample, now)
		lr.util = d.Utilization
		if d.Call != nil {
			select {
			case s.hooks.slots <- struct{}{}:
			default:
				// Eight calls are in flight server-wide: this one waits
				// for a later tick, it is not dropped.
				next.InFlight = false
				lr.state = next
				continue
			}
			key := hookengine.IdempotencyKey(lr.rec.ID, next, *d.Call)
			s.hooks.calls.Add(1)
			go s.callHook(context.WithoutCancel(ctx), lr.rec, lr.hook, *d.Call, key, now)
		}
		lr.state = next
	}
}

// hookBody is exactly the reference page's call body.
type hookBody struct {
	Reason   string  `json:"reason"`
	Hostname string  `json:"hostname"`
	Path     *string `json:"path"`
	OrgID    *string `json:"org_id"`
	Current  int     `json:"current"`
	Desired  int     `json:"desired"`
	Min      int     `json:"min"`
	Max      int     `json:"max"`
}

// callHook makes one call and records its outcome.
func (s *Server) callHook(ctx context.Context, rec store.ScalingRecord, h hook.Hook, c hookengine.Call, key string, decidedAt time.Time) {
	defer s.hooks.calls.Done()
	defer func() { <-s.hooks.slots }()
	err := s.doHookCall(ctx, rec, h, c, key)
	now := s.now()
	s.hooks.mu.Lock()
	lr := s.hooks.byID[rec.ID]
	if lr == nil { // deleted while the call ran
		lr = &loopRecord{version: rec.Version, state: rec.State}
	}
	tripped := false
	if err == nil {
		lr.state = hookengine.Succeeded(&h, lr.state, now)
	} else {
		lr.state, tripped = hookengine.Failed(&h, lr.state, now)
	}
	st, version := lr.state, lr.version
	s.hooks.mu.Unlock()

	detail := map[string]any{"hostname": rec.Hostname, "reason": string(c.Reason), "current": c.Current, "desired": c.Desired,
		"url_host": hostOf(h.URL), "idempotency_key": key}
	action := "scaling_requested"
	if err != nil {
		action = "scaling_failed"
		detail["error"] = err.Error()
		detail["failures"] = st.Failures
		s.log.Warn(fmt.Sprintf("hooks: %s %s %d -> %d failed: %v (failure %d of %d)", rec.Hostname, c.Reason, c.Current, c.Desired, err, st.Failures, hookengine.BreakerFailures))
	} else {
		s.log.Info(fmt.Sprintf("hooks: %s %s %d -> %d accepted", rec.Hostname, c.Reason, c.Current, c.Desired))
	}
	s.metrics.hookCall(rec.Hostname, string(c.Reason), err == nil)
	_ = s.audit(ctx, "aperio", action, rec.Org, rec.ID, detail)
	s.events.Publish(action, rec.Org, now, detail)
	if tripped {
		alert := map[string]any{"hostname": rec.Hostname, "reason": "breaker: five failed calls in a row", "last_error": err.Error()}
		_ = s.audit(ctx, "aperio", "scaling_disarmed", rec.Org, rec.ID, alert)
		s.events.Publish("scaling_disarmed", rec.Org, now, alert)
		s.log.Error(fmt.Sprintf("hooks: %s disarmed after %d failed calls in a row; re-announce or apply the declaration to re-arm", rec.Hostname, hookengine.BreakerFailures))
	}
	// Only what must outlive this replica goes to the record: armed and the
	// failure count.
	if err := s.store.SaveScalingState(ctx, rec.ID, hookengine.State{Armed: st.Armed, Failures: st.Failures}, version); err == nil {
		s.hooks.mu.Lock()
		if lr := s.hooks.byID[rec.ID]; lr != nil && lr.version == version {
			lr.version = version + 1
		}
		s.hooks.mu.Unlock()
	} else if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("hooks: saving the record's state failed", "hostname", rec.Hostname, "err", err)
	}
}

func (s *Server) doHookCall(ctx context.Context, rec store.ScalingRecord, h hook.Hook, c hookengine.Call, key string) error {
	// The fence checks the destination again at call time: DNS may have
	// changed since the declaration. A refusal is a failure, never retried
	// inside the call.
	target, err := s.fence.Check(ctx, h.URL)
	if err != nil {
		return err
	}
	body := hookBody{Reason: string(c.Reason), Hostname: rec.Hostname, Current: c.Current, Desired: c.Desired, Min: h.Min, Max: h.Max}
	if rec.Org != "" {
		org := rec.Org
		body.OrgID = &org
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, h.URL, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("User-Agent", "autoscaled-hooks")
	if len(rec.SecretEnc) > 0 {
		secret, err := s.secrets.Open(rec.SecretEnc, []byte(rec.ID))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+string(secret))
	}
	resp, err := s.fence.Do(ctx, target, req)
	if err != nil {
		return err
	}
	resp.Body.Close() // the body is never read
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s answered %d", target, resp.StatusCode)
	}
	return nil
}

// heartbeatRequest is the body of POST /api/clients/heartbeat.
type heartbeatRequest struct {
	ClientID      string `json:"client_id"`
	Hostname      string `json:"hostname"`
	Target        string `json:"target"`
	MaxConcurrent *int   `json:"max_concurrent"`
	Priority      int    `json:"priority"`
	State         string `json:"state"`
	// Inflight is the permits in use on this client; the edge will report
	// it itself.
	Inflight int   `json:"inflight"`
	ProbeOK  *bool `json:"probe_ok,omitempty"`
	// ProbePath is the path on target the edge GETs every few seconds;
	// a client failing it gets no requests.
	ProbePath string `json:"probe_path"`
	// The hostname's edge settings (the latest heartbeat's win).
	Maintenance bool   `json:"maintenance"`
	Resilience  bool   `json:"resilience"`
	Fallback    string `json:"fallback"`
	// Scaling announces the hostname's scaling declaration.
	Scaling *scalingRequest `json:"scaling,omitempty"`
}

// heartbeat is POST /api/clients/heartbeat: the client is capacity for its
// hostname for ClientTTL; a scaling block announces (and re-arms) the
// hostname's record.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) error {
	var req heartbeatRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := hook.ValidHostname(req.Hostname); err != nil {
		return err // the shared hostname rule, with its own code
	}
	if req.ClientID == "" || len(req.ClientID) > 128 {
		return invalidRequest("client_id is required; accepted: 1 to 128 characters")
	}
	switch req.State {
	case "":
		req.State = ClientActive
	case ClientActive, ClientDraining, ClientDisabled:
	default:
		return invalidRequest("state %q is not accepted; accepted: active, draining, disabled", clip(req.State))
	}
	if req.Priority < 0 || req.Priority > 100 {
		return invalidRequest("priority is %d; accepted: 0 (primary) to 100", req.Priority)
	}
	mc := 0
	if req.MaxConcurrent != nil {
		mc = *req.MaxConcurrent
	}
	if mc < 0 || mc > hook.MaxMaxConcurrent {
		return invalidRequest("max_concurrent is %d; accepted: 0 to %d", mc, hook.MaxMaxConcurrent)
	}
	if req.Inflight < 0 || req.Inflight > 10_000_000 {
		return invalidRequest("inflight is %d; accepted: 0 to 10000000", req.Inflight)
	}
	probe := req.ProbeOK == nil || *req.ProbeOK
	var target *url.URL
	if req.Target != "" {
		u, ok := hook.ParseHTTPURL(req.Target)
		if !ok {
			return invalidRequest("target %q is not accepted; accepted: an absolute http(s) URL such as http://127.0.0.1:3000", clip(req.Target))
		}
		target = u
	}
	if req.ProbePath != "" && (!strings.HasPrefix(req.ProbePath, "/") || len(req.ProbePath) > 1024 || strings.ContainsAny(req.ProbePath, "?# \t\r\n")) {
		return invalidRequest("probe_path %q is not accepted; accepted: a path starting with / (no query), at most 1024 characters, such as /healthz", clip(req.ProbePath))
	}
	if req.ProbePath != "" && target == nil {
		return invalidRequest("probe_path needs a target: the edge probes the target it proxies to")
	}
	if req.Fallback != "" {
		if _, ok := hook.ParseHTTPURL(req.Fallback); !ok || len(req.Fallback) > 2048 {
			return invalidRequest("fallback %q is not accepted; accepted: an absolute http(s) URL of at most 2048 characters, such as https://status.example.com", clip(req.Fallback))
		}
	}
	c := caller(r)
	now := s.now()
	s.pools.Heartbeat(req.Hostname, c.Org+"/"+req.ClientID, edge.ClientInfo{Target: target, MaxConcurrent: mc, Priority: req.Priority,
		State: req.State, Inflight: req.Inflight, ProbeOK: probe, ProbePath: req.ProbePath},
		edge.HostSettings{Maintenance: req.Maintenance, Resilience: req.Resilience, Fallback: req.Fallback, AllowedIPs: c.AllowedIPs}, now)
	out := map[string]any{"hostname": req.Hostname, "ttl_seconds": int(ClientTTL.Seconds())}
	if req.Scaling != nil {
		out["scaling"] = s.announce(r.Context(), c, req.Hostname, req.Scaling)
	}
	return writeJSON(w, http.StatusOK, out)
}

// announce stores a heartbeat's scaling block, or says why not.
func (s *Server) announce(ctx context.Context, c principal, host string, req *scalingRequest) map[string]any {
	if !s.aperio.Scaling {
		return map[string]any{"accepted": false, "notice": scalingOffNotice}
	}
	stored, _, _, err := s.declare(ctx, c, req, host, "heartbeat")
	if err != nil {
		var ae *api.Error
		if !errors.As(err, &ae) {
			s.log.Error("hooks: storing an announced declaration failed", "hostname", host, "err", err)
			ae = api.Errorf(api.CodeInternal, "internal error; the server log has the details")
		}
		return map[string]any{"accepted": false, "error": ae}
	}
	return map[string]any{"accepted": true, "id": stored.ID, "armed": stored.State.Armed}
}

// pruneScaling drops records whose arming keys are all revoked or expired,
// and heartbeat records not re-announced within the record TTL.
func (s *Server) pruneScaling(ctx context.Context, now time.Time) {
	gone, err := s.store.PruneScaling(ctx, now, s.aperio.ScalingRecordTTL)
	if err != nil {
		s.log.Warn("hooks: pruning records failed", "err", err)
		return
	}
	if len(gone) > 0 {
		s.hooks.dirty.Store(true)
	}
	for _, host := range gone {
		s.log.Info("hooks: record dropped: no live key armed it, or nothing re-announced it", "hostname", host)
		s.events.Publish("scaling_disarmed", "", now, map[string]any{"hostname": host, "reason": "no live arming key, or not re-announced within the TTL"})
	}
}
