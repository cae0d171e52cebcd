// Package pool is the QoD pool model and the pure rules for changing it:
// names, role distributions, manual scaling, suspend and resume, tenant
// quotas. The server applies these inside one store transaction (the mutation
// gate); the autoscale engine goes through the same functions.
package pool

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
)

// Limits on numbers taken from outside. They keep arithmetic far from
// overflow and say plainly what is accepted.
const (
	MaxSize                 = 1024
	MaxConcurrentPerNodeCap = 1_000_000
	MaxCohorts              = 64
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// MaxNameLen is the longest name ValidateName accepts.
const MaxNameLen = 63

// NameRule describes what ValidateName accepts, for messages and docs.
const NameRule = "1 to 63 characters: letters, digits, '_', '.', '-', starting with a letter or digit"

// ValidateName checks one of tenant, tenantDb or pool. field is the name the
// caller used for it, so the message points at the right spot.
func ValidateName(field, v string) error {
	if v == "" {
		return api.Errorf(api.CodeInvalidRequest, "%s is required (%s)", field, NameRule)
	}
	if !nameRE.MatchString(v) {
		return api.Errorf(api.CodeInvalidRequest, "%s %q is not a valid name; accepted: %s", field, clip(v), NameRule)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Key names one pool.
type Key struct {
	Tenant   string `json:"tenant"`
	TenantDB string `json:"tenantDb"`
	Pool     string `json:"pool"`
}

// String is the pool's id, also the Terraform import id: tenant/tenantDb/pool.
func (k Key) String() string { return k.Tenant + "/" + k.TenantDB + "/" + k.Pool }

// Validate checks all three names, using the API's camelCase field names.
func (k Key) Validate() error {
	return k.validate("tenant", "tenantDb", "pool")
}

func (k Key) validate(tenant, db, pool string) error {
	if err := ValidateName(tenant, k.Tenant); err != nil {
		return err
	}
	if err := ValidateName(db, k.TenantDB); err != nil {
		return err
	}
	return ValidateName(pool, k.Pool)
}

// ParseID parses a tenant/tenantDb/pool id.
func ParseID(id string) (Key, error) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 {
		return Key{}, api.Errorf(api.CodeInvalidRequest, "id %q must have the form tenant/tenant_db/pool", clip(id))
	}
	k := Key{Tenant: parts[0], TenantDB: parts[1], Pool: parts[2]}
	if err := k.validate("tenant", "tenant_db", "pool"); err != nil {
		return Key{}, err
	}
	return k, nil
}

// Roles is a role distribution: how many nodes of each kind.
type Roles struct {
	Writeonly int `json:"writeonly"`
	Readonly  int `json:"readonly"`
	Dual      int `json:"dual"`
}

// Total is the number of nodes.
func (r Roles) Total() int { return r.Writeonly + r.Readonly + r.Dual }

// Writers is the number of write-capable nodes.
func (r Roles) Writers() int { return r.Writeonly + r.Dual }

// Readers is the number of read-capable nodes.
func (r Roles) Readers() int { return r.Readonly + r.Dual }

func (r Roles) String() string {
	return fmt.Sprintf("writeonly %d, readonly %d, dual %d", r.Writeonly, r.Readonly, r.Dual)
}

// Validate checks every count is within 0..MaxSize and at least one node can
// serve reads or writes.
func (r Roles) Validate() error {
	for _, c := range []struct {
		name string
		v    int
	}{{"writeonly", r.Writeonly}, {"readonly", r.Readonly}, {"dual", r.Dual}} {
		if c.v < 0 || c.v > MaxSize {
			return api.Errorf(api.CodeInvalidRequest, "roleDistribution.%s is %d; accepted: 0 to %d", c.name, c.v, MaxSize)
		}
	}
	return nil
}

// Cohort is an operator-authored group of nodes inside a pool (for example
// the nodes an ETL job pins to). Scaling rewrites the role distribution and
// so clears cohorts, which is why a pool with cohorts cannot be elastic.
type Cohort struct {
	Name  string `json:"name"`
	Nodes int    `json:"nodes"`
}

// Pool is one pool as stored.
type Pool struct {
	Key
	// Roles is the role distribution. A suspended pool keeps it, so that
	// resume knows what to bring back.
	Roles                Roles
	Suspended            bool
	MaxConcurrentPerNode int
	Band                 *band.Band
	Cohorts              []Cohort
	// Version increases by one on every change; updates are conditional on it.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Size is the number of running nodes: 0 when suspended.
func (p *Pool) Size() int {
	if p.Suspended {
		return 0
	}
	return p.Roles.Total()
}

// BandFacts is what the band rules need to know about p.
func (p *Pool) BandFacts() band.Pool {
	return band.Pool{
		Size:      p.Size(),
		Suspended: p.Suspended,
		Writeonly: p.Roles.Writeonly,
		Dual:      p.Roles.Dual,
		Cohorts:   len(p.Cohorts),
	}
}
