package apiserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/fence"
	"github.com/qodaperio/autoscale/internal/hook"
	"github.com/qodaperio/autoscale/internal/store"
)

// scalingRequest is the body of PUT /api/scaling/{hostname} and
// POST /api/scaling/validate: the declaration and, write-only, its secret.
type scalingRequest struct {
	hook.Declaration
	// Secret is sent as the hook's Bearer token; absent keeps the stored
	// one, "" removes it. It is never returned.
	Secret *string `json:"secret,omitempty"`
}

const scalingOffNotice = "scaling is off on this server (the operator has not set APERIO_SCALING=1): the record is kept but no call is ever made"

func newRecordID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "sh_" + hex.EncodeToString(b)
}

// effective fills the declaration's omitted fields with the defaults, as
// the API shows them; declared strings are kept as written.
func effective(d hook.Declaration, h hook.Hook) hook.Declaration {
	orDur := func(s string, v time.Duration) string {
		if s != "" {
			return s
		}
		return v.String()
	}
	min, max, mc, tu := h.Min, h.Max, h.MaxConcurrent, h.TargetUtilization
	return hook.Declaration{Hostname: h.Hostname, URL: h.URL, Min: &min, Max: &max,
		ColdStart: orDur(d.ColdStart, h.ColdStart), TargetUtilization: &tu, Window: orDur(d.Window, h.Window),
		Cooldown: orDur(d.Cooldown, h.Cooldown), IdleTimeout: orDur(d.IdleTimeout, h.IdleTimeout), MaxConcurrent: &mc}
}

func (s *Server) scalingView(r *store.ScalingRecord) api.ScalingRecord {
	d := r.Declaration
	v := api.ScalingRecord{ID: r.ID, Hostname: r.Hostname, Org: r.Org, URL: d.URL, ColdStart: d.ColdStart, Window: d.Window,
		Cooldown: d.Cooldown, IdleTimeout: d.IdleTimeout, SecretSet: len(r.SecretEnc) > 0, Armed: r.State.Armed,
		Breaker: "closed", Failures: r.State.Failures, Source: r.Source, AnnouncedAt: r.AnnouncedAt, UpdatedAt: r.UpdatedAt,
		Active: s.aperio.Scaling}
	if d.Min != nil {
		v.Min = *d.Min
	}
	if d.Max != nil {
		v.Max = *d.Max
	}
	if d.TargetUtilization != nil {
		v.TargetUtilization = *d.TargetUtilization
	}
	if d.MaxConcurrent != nil {
		v.MaxConcurrent = *d.MaxConcurrent
	}
	if !r.State.Armed && r.State.Failures >= 5 {
		v.Breaker = "open"
	}
	if !s.aperio.Scaling {
		v.Notice = scalingOffNotice
	}
	if r.Hostname != "" {
		// The live pool, as the loop samples it.
		sample := s.pools.Sample(r.Hostname, s.now())
		v.Pool = &api.ScalingPoolView{Instances: sample.Current, Capacity: sample.Capacity, Inflight: sample.Inflight}
		if sample.Capacity > 0 {
			u := float64(sample.Inflight) / float64(sample.Capacity)
			v.Pool.Utilization = &u
		}
	}
	return v
}

// checkDeclaration runs every rule on a declaration: the static ones, then
// the outbound fence on its URL, live.
func (s *Server) checkDeclaration(ctx context.Context, req *scalingRequest, pathHost string) (hook.Hook, error) {
	if pathHost != "" {
		if req.Hostname == "" {
			req.Hostname = pathHost
		} else if req.Hostname != pathHost {
			return hook.Hook{}, api.Errorf(api.CodeInvalidHook, "hostname %q in the body differs from %q in the path; send one, or the same", clip(req.Hostname), clip(pathHost))
		}
	}
	h, err := req.Declaration.Validate()
	if err != nil {
		return h, err
	}
	if _, err := s.fence.Check(ctx, h.URL); err != nil {
		var r *fence.RefusedError
		if errors.As(err, &r) {
			return h, r.APIError("url")
		}
		return h, err
	}
	return h, nil
}

// declare checks a declaration and stores it for the caller's
// organization, sealing its secret to the record: the one path for
// PUT /api/scaling/{hostname} and a heartbeat's scaling block.
func (s *Server) declare(ctx context.Context, c principal, req *scalingRequest, pathHost, source string) (*store.ScalingRecord, bool, hook.Hook, error) {
	h, err := s.checkDeclaration(ctx, req, pathHost)
	if err != nil {
		return nil, false, h, err
	}
	rec := &store.ScalingRecord{ID: newRecordID(), Org: c.Org, Hostname: h.Hostname,
		Declaration: effective(req.Declaration, h), Source: source, AnnouncedAt: s.now()}
	if old, err := s.store.GetScaling(ctx, h.Hostname); err == nil {
		rec.ID = old.ID // the secret is sealed to the record it belongs to
	}
	if req.Secret != nil && *req.Secret != "" {
		if len(*req.Secret) > 4096 {
			return nil, false, h, api.Errorf(api.CodeInvalidHook, "secret is %d bytes long; accepted: at most 4096", len(*req.Secret))
		}
		if rec.SecretEnc, err = s.secrets.Seal([]byte(*req.Secret), []byte(rec.ID)); err != nil {
			return nil, false, h, err
		}
	}
	stored, created, err := s.store.PutScaling(ctx, rec, c.KeyID, req.Secret != nil)
	if errors.Is(err, store.ErrConflict) {
		return nil, false, h, api.Errorf(api.CodeConflict, "hostname %s is declared by another organization", h.Hostname)
	}
	if err != nil {
		return nil, false, h, err
	}
	s.hooks.dirty.Store(true)
	// The edge reads the loop's cache: a record it does not know yet as
	// armed is loaded now, so the very next request for the hostname can
	// be held (a re-announcement of a known record waits for the tick).
	s.hooks.mu.Lock()
	lr := s.hooks.byHost[stored.Hostname]
	known := lr != nil && lr.version == stored.Version
	s.hooks.mu.Unlock()
	if !known {
		if err := s.reloadHooks(ctx, s.now()); err != nil {
			s.log.Warn("hooks: reloading the records failed; the next tick tries again", "err", err)
		}
	}
	return stored, created, h, nil
}

// putScaling is PUT /api/scaling/{hostname}: declare or edit the record for
// the caller's organization (re-arming it).
func (s *Server) putScaling(w http.ResponseWriter, r *http.Request) error {
	var req scalingRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	c := caller(r)
	stored, created, h, err := s.declare(r.Context(), c, &req, muxVar(r, "hostname"), "api")
	if err != nil {
		return err
	}
	action := "scaling.update"
	if created {
		action = "scaling.declare"
	}
	detail := map[string]any{"hostname": h.Hostname, "url_host": hostOf(h.URL), "min": h.Min, "max": h.Max, "secret_set": len(stored.SecretEnc) > 0}
	if err := s.audit(r.Context(), c.actor(), action, c.Org, stored.ID, detail); err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(w, status, s.scalingView(stored))
}

// validateScaling is POST /api/scaling/validate: every rule and the live
// fence, nothing stored.
func (s *Server) validateScaling(w http.ResponseWriter, r *http.Request) error {
	var req scalingRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	h, err := s.checkDeclaration(r.Context(), &req, "")
	if err != nil {
		return err
	}
	view := s.scalingView(&store.ScalingRecord{Hostname: h.Hostname, Org: caller(r).Org, Declaration: effective(req.Declaration, h),
		SecretEnc: nil, Source: "api"})
	view.SecretSet = req.Secret != nil && *req.Secret != ""
	view.Armed = true
	return writeJSON(w, http.StatusOK, api.ScalingValidation{Valid: true, Record: view})
}

// findScaling reads a record by id or hostname that the caller may see; a
// record of another organization is not found.
func (s *Server) findScaling(ctx context.Context, c principal, idOrHost string) (*store.ScalingRecord, error) {
	rec, err := s.store.GetScaling(ctx, idOrHost)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !c.operator() && rec.Org != c.Org) {
		return nil, api.Errorf(api.CodeNotFound, "scaling record %q not found", clip(idOrHost))
	}
	return rec, err
}

func (s *Server) getScaling(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r.URL.Query()); err != nil {
		return err
	}
	rec, err := s.findScaling(r.Context(), caller(r), muxVar(r, "id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.scalingView(rec))
}

func (s *Server) listScaling(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r.URL.Query()); err != nil {
		return err
	}
	c := caller(r)
	recs, err := s.store.ListScaling(r.Context(), c.Org, c.operator())
	if err != nil {
		return err
	}
	out := api.ScalingList{Records: make([]api.ScalingRecord, 0, len(recs))}
	for i := range recs {
		out.Records = append(out.Records, s.scalingView(&recs[i]))
	}
	return writeJSON(w, http.StatusOK, out)
}

// disarmScaling is DELETE /api/scaling/{id}: the record goes; a client that
// still declares the block re-arms it on its next heartbeat.
func (s *Server) disarmScaling(w http.ResponseWriter, r *http.Request) error {
	c := caller(r)
	rec, err := s.findScaling(r.Context(), c, muxVar(r, "id"))
	if err != nil {
		return err
	}
	if err := s.store.DeleteScaling(r.Context(), rec.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.hooks.dirty.Store(true)
	if err := s.audit(r.Context(), c.actor(), "scaling_disarmed", rec.Org, rec.ID, map[string]any{"hostname": rec.Hostname, "reason": "disarmed by " + c.actor()}); err != nil {
		return err
	}
	s.events.Publish("scaling_disarmed", rec.Org, s.now(), map[string]any{"id": rec.ID, "hostname": rec.Hostname, "reason": "disarmed"})
	return writeJSON(w, http.StatusOK, map[string]string{"disarmed": rec.ID, "hostname": rec.Hostname})
}

// audit writes one audit row on its own.
func (s *Server) audit(ctx context.Context, actor, action, tenant, target string, detail map[string]any) error {
	return s.store.Mutate(ctx, func(tx store.Tx) error {
		return tx.Audit(store.AuditRow{At: s.now(), Actor: actor, Action: action, Tenant: tenant, Target: target, Detail: detail})
	})
}

// hostOf is a URL's scheme and host, what logs and audit rows may carry.
func hostOf(raw string) string {
	t, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%s://%s", t.Scheme, t.Host)
}

// HookSecret opens the stored secret of a hostname's hook, for tests that
// check what the server holds (the provider's acceptance tests); no route
// serves it.
func (s *Server) HookSecret(ctx context.Context, hostname string) (string, error) {
	rec, err := s.store.GetScaling(ctx, hostname)
	if err != nil {
		return "", err
	}
	if len(rec.SecretEnc) == 0 {
		return "", nil
	}
	b, err := s.secrets.Open(rec.SecretEnc, []byte(rec.ID))
	return string(b), err
}
