package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/qodengine"
	"github.com/qodaperio/autoscale/internal/store"
)

func muxVar(r *http.Request, name string) string { return mux.Vars(r)[name] }

func poolView(p *pool.Pool) api.Pool {
	v := api.Pool{
		Tenant: p.Tenant, TenantDB: p.TenantDB, Pool: p.Key.Pool, ID: p.Key.String(),
		Size: p.Size(), Suspended: p.Suspended,
		RoleDistribution:     api.Roles(p.Roles),
		MaxConcurrentPerNode: p.MaxConcurrentPerNode,
		Cohorts:              make([]api.Cohort, 0, len(p.Cohorts)),
		Version:              p.Version, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
	for _, c := range p.Cohorts {
		v.Cohorts = append(v.Cohorts, api.Cohort(c))
	}
	if p.Band != nil {
		v.Elastic = true
		v.MinNodes, v.MaxNodes = &p.Band.Min, &p.Band.Max
	}
	return v
}

func keyOf(ref api.PoolRef) pool.Key {
	return pool.Key{Tenant: ref.Tenant, TenantDB: ref.TenantDB, Pool: ref.Pool}
}

// checkRef validates the pool's names and the caller's right to its tenant.
func checkRef(r *http.Request, k pool.Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	return mayManageTenant(caller(r), k.Tenant)
}

// decodePoolRequest decodes a body into dst, whose pool names ref points at,
// and checks those names and the caller's right to the tenant.
func decodePoolRequest(w http.ResponseWriter, r *http.Request, dst any, ref *api.PoolRef) (pool.Key, error) {
	if err := decodeJSON(w, r, dst); err != nil {
		return pool.Key{}, err
	}
	k := keyOf(*ref)
	return k, checkRef(r, k)
}

func poolNotFound(k pool.Key) error {
	return notFound("pool %s not found", k)
}

// mutation is one change to an existing pool through the gate.
type mutation struct {
	actor, action string
	// change modifies the pool and returns the audit detail.
	change func(p *pool.Pool) (map[string]any, error)
	// engine, if set, changes the pool's autoscale state in the same
	// transaction (a manual scale resets the streaks, a resume starts the
	// out cooldown, an autoscale action records its success).
	engine func(st qodengine.State, now time.Time) qodengine.State
	// version, if not 0, is the pool version the change was decided on:
	// a pool changed since is not touched (errPoolMoved).
	version int64
	// reason goes into the PoolScaled event when the size changes.
	reason string
}

// errPoolMoved: the pool changed between a sweep's read and its action.
var errPoolMoved = errors.New("pool changed since the sweep read it")

// runningRoles is what the node backend should run for p.
func runningRoles(p *pool.Pool) pool.Roles {
	if p.Suspended {
		return pool.Roles{}
	}
	return p.Roles
}

// mutate is the mutation gate for one existing pool, shared by every
// handler and the sweep: it loads the pool in a transaction, lets change
// modify it, checks the tenant quota, has the node backend run the result,
// writes it conditionally on its version, updates the autoscale state and
// records an audit row, all or nothing. A size change is published as a
// PoolScaled event once committed.
func (s *Server) mutate(ctx context.Context, k pool.Key, m mutation) (*pool.Pool, error) {
	var out *pool.Pool
	var before int
	now := s.now()
	err := s.store.Mutate(ctx, func(tx store.Tx) error {
		p, err := tx.GetPool(k)
		if errors.Is(err, store.ErrNotFound) {
			return poolNotFound(k)
		}
		if err != nil {
			return err
		}
		if m.version != 0 && p.Version != m.version {
			return errPoolMoved
		}
		before = p.Size()
		wasRunning := runningRoles(p)
		detail, err := m.change(p)
		if err != nil {
			return err
		}
		if p.Size() > before {
			if err := s.checkQuota(tx, p); err != nil {
				return err
			}
		}
		if err := tx.UpdatePool(p, now); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return api.Errorf(api.CodeConflict, "pool %s changed while this call was applied; retry", k)
			}
			return err
		}
		if m.engine != nil {
			st, err := tx.AutoscaleState(k)
			if err != nil {
				return err
			}
			st.State = m.engine(st.State, now)
			if err := tx.SetAutoscaleState(st); err != nil {
				return err
			}
		}
		if detail == nil {
			detail = map[string]any{}
		}
		detail["fromSize"], detail["toSize"] = before, p.Size()
		if err := tx.Audit(store.AuditRow{At: now, Actor: m.actor, Action: m.action, Tenant: k.Tenant, Target: k.String(), Detail: detail}); err != nil {
			return err
		}
		// Last, so that a refusal above starts or stops nothing.
		if want := runningRoles(p); want != wasRunning {
			if err := s.nodes.Apply(ctx, k, want); err != nil {
				return fmt.Errorf("node backend: run %s for pool %s: %w", want, k, err)
			}
		}
		out = p
		return nil
	})
	if err == nil && out.Size() != before {
		s.events.Publish("PoolScaled", k.Tenant, now, map[string]any{
			"pool": k.String(), "fromSize": before, "toSize": out.Size(), "reason": m.reason, "actor": m.actor,
		})
	}
	return out, err
}

// mutatePool runs a caller's change through the gate.
func (s *Server) mutatePool(r *http.Request, k pool.Key, action, reason string, change func(p *pool.Pool) (map[string]any, error)) (*pool.Pool, error) {
	return s.mutate(r.Context(), k, mutation{actor: caller(r).actor(), action: action, change: change, reason: reason})
}

func (s *Server) checkQuota(tx store.Tx, p *pool.Pool) error {
	quota, err := tx.TenantQuota(p.Tenant)
	if err != nil || quota == 0 {
		return err
	}
	others, err := tx.TenantNodes(p.Tenant, p.Key)
	if err != nil {
		return err
	}
	return pool.CheckQuota(p, others, quota)
}

func (s *Server) createPool(w http.ResponseWriter, r *http.Request) error {
	var req api.CreatePoolRequest
	k, err := decodePoolRequest(w, r, &req, &req.PoolRef)
	if err != nil {
		return err
	}
	spec := pool.Spec{Key: k, Size: req.Size, MaxConcurrentPerNode: req.MaxConcurrentPerNode,
		MinNodes: req.MinNodes, MaxNodes: req.MaxNodes}
	if req.RoleDistribution != nil {
		roles := pool.Roles(*req.RoleDistribution)
		spec.Roles = &roles
	}
	for _, c := range req.Cohorts {
		spec.Cohorts = append(spec.Cohorts, pool.Cohort(c))
	}
	p, err := pool.New(spec, s.autoscale.HardCap)
	if err != nil {
		return err
	}
	err = s.store.Mutate(r.Context(), func(tx store.Tx) error {
		if err := s.checkQuota(tx, p); err != nil {
			return err
		}
		now := s.now()
		if err := tx.InsertPool(p, now); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return api.Errorf(api.CodeConflict, "pool %s already exists", k)
			}
			return err
		}
		detail := map[string]any{"size": p.Size(), "roleDistribution": p.Roles}
		if p.Band != nil {
			detail["minNodes"], detail["maxNodes"] = p.Band.Min, p.Band.Max
		}
		if err := tx.Audit(store.AuditRow{At: now, Actor: caller(r).actor(), Action: "pool.create", Tenant: k.Tenant, Target: k.String(), Detail: detail}); err != nil {
			return err
		}
		if err := s.nodes.Apply(r.Context(), k, runningRoles(p)); err != nil {
			return fmt.Errorf("node backend: run pool %s: %w", k, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, poolView(p))
}

func (s *Server) setAutoscale(w http.ResponseWriter, r *http.Request) error {
	var req api.SetAutoscaleRequest
	k, err := decodePoolRequest(w, r, &req, &req.PoolRef)
	if err != nil {
		return err
	}
	b, banded, err := band.Pair(req.MinNodes, req.MaxNodes)
	if err != nil {
		return err
	}
	p, err := s.mutatePool(r, k, "pool.setAutoscale", "", func(p *pool.Pool) (map[string]any, error) {
		if !banded {
			return map[string]any{"band": "cleared"}, p.SetBand(nil, s.autoscale.HardCap)
		}
		return map[string]any{"minNodes": b.Min, "maxNodes": b.Max}, p.SetBand(&b, s.autoscale.HardCap)
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, poolView(p))
}

func (s *Server) scalePool(w http.ResponseWriter, r *http.Request) error {
	var req api.ScaleRequest
	k, err := decodePoolRequest(w, r, &req, &req.PoolRef)
	if err != nil {
		return err
	}
	if req.TargetSize == nil {
		return invalidRequest("targetSize is required; accepted: 0 to %d", pool.MaxSize)
	}
	var roles *pool.Roles
	if req.RoleDistribution != nil {
		r := pool.Roles(*req.RoleDistribution)
		roles = &r
	}
	p, err := s.mutate(r.Context(), k, mutation{actor: caller(r).actor(), action: "pool.scale", reason: "manual scale",
		change: func(p *pool.Pool) (map[string]any, error) {
			return map[string]any{"direction": "manual"}, p.Scale(*req.TargetSize, roles, s.autoscale.HardCap)
		},
		// A person took over: the sweep's streaks start again from here.
		engine: func(st qodengine.State, _ time.Time) qodengine.State { return qodengine.ManuallyScaled(st) },
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, poolView(p))
}

func (s *Server) suspendPool(w http.ResponseWriter, r *http.Request) error {
	return s.simpleMutation(w, r, mutation{action: "pool.suspend", reason: "suspend",
		change: func(p *pool.Pool) (map[string]any, error) { p.Suspend(); return nil, nil }})
}

func (s *Server) resumePool(w http.ResponseWriter, r *http.Request) error {
	return s.simpleMutation(w, r, resumeMutation(""))
}

// resumeMutation resumes a pool and starts its out cooldown: the burst after
// a wake is not evidence of sustained demand.
func resumeMutation(actor string) mutation {
	return mutation{actor: actor, action: "pool.resume", reason: "resume",
		change: func(p *pool.Pool) (map[string]any, error) {
			if !p.Suspended {
				return map[string]any{"note": "already running"}, nil
			}
			p.Resume()
			return nil, nil
		},
		engine: func(st qodengine.State, now time.Time) qodengine.State { return qodengine.Resumed(st, now) },
	}
}

func (s *Server) simpleMutation(w http.ResponseWriter, r *http.Request, m mutation) error {
	var req api.PoolRef
	k, err := decodePoolRequest(w, r, &req, &req)
	if err != nil {
		return err
	}
	m.actor = caller(r).actor()
	p, err := s.mutate(r.Context(), k, m)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, poolView(p))
}

func (s *Server) deletePool(w http.ResponseWriter, r *http.Request) error {
	var req api.PoolRef
	k, err := decodePoolRequest(w, r, &req, &req)
	if err != nil {
		return err
	}
	err = s.store.Mutate(r.Context(), func(tx store.Tx) error {
		if err := tx.DeletePool(k); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return poolNotFound(k)
			}
			return err
		}
		if err := tx.Audit(store.AuditRow{At: s.now(), Actor: caller(r).actor(), Action: "pool.delete", Tenant: k.Tenant, Target: k.String()}); err != nil {
			return err
		}
		return s.nodes.Apply(r.Context(), k, pool.Roles{})
	})
	if err != nil {
		return err
	}
	s.load.Forget(k)
	return writeJSON(w, http.StatusOK, map[string]string{"deleted": k.String()})
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request) error {
	k, err := poolFromQuery(r)
	if err != nil {
		return err
	}
	p, err := s.loadPool(r.Context(), k)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, poolView(p))
}

// loadPool reads one pool, answering not_found for a pool that is not there.
func (s *Server) loadPool(ctx context.Context, k pool.Key) (*pool.Pool, error) {
	p, err := s.store.GetPool(ctx, k)
	if errors.Is(err, store.ErrNotFound) {
		return nil, poolNotFound(k)
	}
	return p, err
}

// visibleTenant is the tenant a listing covers: the one asked for, checked
// against the caller's scope, or an org key's own tenant when none is asked
// for ("" means every tenant, for the operator).
func visibleTenant(r *http.Request, asked string) (string, error) {
	c := caller(r)
	if asked == "" {
		if c.operator() {
			return "", nil
		}
		return c.Org, nil
	}
	if err := pool.ValidateName("tenant", asked); err != nil {
		return "", err
	}
	return asked, mayManageTenant(c, asked)
}

func (s *Server) listPools(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r.URL.Query(), "tenant")
	if err != nil {
		return err
	}
	tenant, err := visibleTenant(r, q["tenant"])
	if err != nil {
		return err
	}
	pools, err := s.store.ListPools(r.Context(), tenant)
	if err != nil {
		return err
	}
	out := api.PoolList{Pools: make([]api.Pool, 0, len(pools))}
	for i := range pools {
		out.Pools = append(out.Pools, poolView(&pools[i]))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) autoscaleConfig(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r.URL.Query()); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.autoscale)
}

func (s *Server) setQuota(w http.ResponseWriter, r *http.Request) error {
	var req api.SetQuotaRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := pool.ValidateName("tenant", req.Tenant); err != nil {
		return err
	}
	if req.NodeQuota == nil {
		return invalidRequest("nodeQuota is required; accepted: 0 (no quota) to 1000000")
	}
	if q := *req.NodeQuota; q < 0 || q > 1_000_000 {
		return invalidRequest("nodeQuota is %d; accepted: 0 (no quota) to 1000000", q)
	}
	err := s.store.Mutate(r.Context(), func(tx store.Tx) error {
		if err := tx.SetTenantQuota(req.Tenant, *req.NodeQuota); err != nil {
			return err
		}
		return tx.Audit(store.AuditRow{At: s.now(), Actor: caller(r).actor(), Action: "tenant.setQuota", Tenant: req.Tenant,
			Target: req.Tenant, Detail: map[string]any{"nodeQuota": *req.NodeQuota}})
	})
	if err != nil {
		return err
	}
	return s.writeTenant(w, r, req.Tenant)
}

func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r.URL.Query(), "tenant")
	if err != nil {
		return err
	}
	if err := pool.ValidateName("tenant", q["tenant"]); err != nil {
		return err
	}
	if err := mayManageTenant(caller(r), q["tenant"]); err != nil {
		return err
	}
	return s.writeTenant(w, r, q["tenant"])
}

func (s *Server) writeTenant(w http.ResponseWriter, r *http.Request, tenant string) error {
	quota, nodes, err := s.store.TenantQuota(r.Context(), tenant)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, api.Tenant{Tenant: tenant, NodeQuota: quota, Nodes: nodes})
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r.URL.Query(), "tenant", "limit")
	if err != nil {
		return err
	}
	tenant, err := visibleTenant(r, q["tenant"])
	if err != nil {
		return err
	}
	limit := 100
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalidRequest("limit %q is not accepted; accepted: a whole number from 1 to 1000", clip(v))
		}
		limit = n
	}
	rows, err := s.store.ListAudit(r.Context(), tenant, limit)
	if err != nil {
		return err
	}
	out := make([]api.AuditEntry, 0, len(rows))
	for _, a := range rows {
		out = append(out, api.AuditEntry(a))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"entries": out})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	_ = writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ready(ctx); err != nil {
		s.log.Warn("readiness check failed", "err", err)
		// 503, the status a load balancer takes as "send elsewhere".
		_ = writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready",
			"reason": "store not reachable or not migrated", "leader": s.leading.Load()})
		return
	}
	_ = writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "leader": s.leading.Load()})
}
