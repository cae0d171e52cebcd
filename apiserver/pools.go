package apiserver

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/pool"
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

// mutatePool is the mutation gate for one existing pool: it loads the pool in
// a transaction, lets change modify it, checks the tenant quota, writes it
// conditionally on its version and records an audit row, all or nothing.
func (s *Server) mutatePool(r *http.Request, k pool.Key, action string, change func(p *pool.Pool) (map[string]any, error)) (*pool.Pool, error) {
	var out *pool.Pool
	err := s.store.Mutate(r.Context(), func(tx store.Tx) error {
		p, err := tx.GetPool(k)
		if errors.Is(err, store.ErrNotFound) {
			return poolNotFound(k)
		}
		if err != nil {
			return err
		}
		before := p.Size()
		detail, err := change(p)
		if err != nil {
			return err
		}
		if p.Size() > before {
			if err := s.checkQuota(tx, p); err != nil {
				return err
			}
		}
		now := s.now()
		if err := tx.UpdatePool(p, now); err != nil {
			if errors.Is(err, store.ErrConflict) {
				return api.Errorf(api.CodeConflict, "pool %s changed while this call was applied; retry", k)
			}
			return err
		}
		if detail == nil {
			detail = map[string]any{}
		}
		detail["fromSize"], detail["toSize"] = before, p.Size()
		out = p
		return tx.Audit(store.AuditRow{At: now, Actor: caller(r).actor(), Action: action, Tenant: k.Tenant, Target: k.String(), Detail: detail})
	})
	return out, err
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
		return tx.Audit(store.AuditRow{At: now, Actor: caller(r).actor(), Action: "pool.create", Tenant: k.Tenant, Target: k.String(), Detail: detail})
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
	p, err := s.mutatePool(r, k, "pool.setAutoscale", func(p *pool.Pool) (map[string]any, error) {
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
	p, err := s.mutatePool(r, k, "pool.scale", func(p *pool.Pool) (map[string]any, error) {
		return map[string]any{"direction": "manual"}, p.Scale(*req.TargetSize, roles, s.autoscale.HardCap)
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, poolView(p))
}

func (s *Server) suspendPool(w http.ResponseWriter, r *http.Request) error {
	return s.simpleMutation(w, r, "pool.suspend", func(p *pool.Pool) error { p.Suspend(); return nil })
}

func (s *Server) resumePool(w http.ResponseWriter, r *http.Request) error {
	return s.simpleMutation(w, r, "pool.resume", func(p *pool.Pool) error { p.Resume(); return nil })
}

func (s *Server) simpleMutation(w http.ResponseWriter, r *http.Request, action string, change func(*pool.Pool) error) error {
	var req api.PoolRef
	k, err := decodePoolRequest(w, r, &req, &req)
	if err != nil {
		return err
	}
	p, err := s.mutatePool(r, k, action, func(p *pool.Pool) (map[string]any, error) { return nil, change(p) })
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
		return tx.Audit(store.AuditRow{At: s.now(), Actor: caller(r).actor(), Action: "pool.delete", Tenant: k.Tenant, Target: k.String()})
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]string{"deleted": k.String()})
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r.URL.Query(), "tenant", "tenantDb", "pool")
	if err != nil {
		return err
	}
	k := pool.Key{Tenant: q["tenant"], TenantDB: q["tenantDb"], Pool: q["pool"]}
	if err := checkRef(r, k); err != nil {
		return err
	}
	p, err := s.store.GetPool(r.Context(), k)
	if errors.Is(err, store.ErrNotFound) {
		return poolNotFound(k)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, poolView(p))
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
	if _, err := s.store.CountKeys(r.Context()); err != nil {
		s.log.Warn("readiness check failed", "err", err)
		// 503, the status a load balancer takes as "send elsewhere".
		_ = writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": "store not reachable"})
		return
	}
	_ = writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
