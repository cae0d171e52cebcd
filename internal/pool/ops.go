package pool

import (
	"fmt"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
)

// Spec is a validated request to create a pool.
type Spec struct {
	Key
	Size                 *int
	Roles                *Roles
	MaxConcurrentPerNode *int
	Cohorts              []Cohort
	MinNodes, MaxNodes   *int
}

// New builds a pool from a create request, applying every rule including the
// band rules when a band is given.
func New(s Spec, hardCap int) (*Pool, error) {
	if err := s.Key.Validate(); err != nil {
		return nil, err
	}
	if s.Size == nil {
		return nil, api.Errorf(api.CodeInvalidRequest, "size is required; accepted: 1 to %d", MaxSize)
	}
	size := *s.Size
	if size < 1 || size > MaxSize {
		return nil, api.Errorf(api.CodeInvalidRequest, "size is %d; accepted: 1 to %d", size, MaxSize)
	}
	p := &Pool{Key: s.Key}
	if s.Roles != nil {
		if err := s.Roles.Validate(); err != nil {
			return nil, err
		}
		if s.Roles.Total() != size {
			return nil, api.Errorf(api.CodeInvalidRequest, "roleDistribution (%s) adds up to %d nodes but size is %d; they must match", s.Roles, s.Roles.Total(), size)
		}
		p.Roles = *s.Roles
	} else {
		// One node that can write, the rest readers: the shape a database
		// pool almost always wants, and one the autoscaler can grow.
		p.Roles = Roles{Dual: 1, Readonly: size - 1}
	}
	if s.MaxConcurrentPerNode != nil {
		v := *s.MaxConcurrentPerNode
		if v < 0 || v > MaxConcurrentPerNodeCap {
			return nil, api.Errorf(api.CodeInvalidRequest, "maxConcurrentPerNode is %d; accepted: 0 (no cap) to %d", v, MaxConcurrentPerNodeCap)
		}
		p.MaxConcurrentPerNode = v
	}
	if err := validateCohorts(s.Cohorts, size); err != nil {
		return nil, err
	}
	p.Cohorts = s.Cohorts
	b, ok, err := band.Pair(s.MinNodes, s.MaxNodes)
	if err != nil {
		return nil, err
	}
	if ok {
		if err := band.Validate(b, hardCap, p.BandFacts()); err != nil {
			return nil, err
		}
		p.Band = &b
	}
	return p, nil
}

func validateCohorts(cs []Cohort, size int) error {
	if len(cs) > MaxCohorts {
		return api.Errorf(api.CodeInvalidRequest, "cohorts has %d entries; accepted: at most %d", len(cs), MaxCohorts)
	}
	seen := make(map[string]bool, len(cs))
	total := 0
	for i, c := range cs {
		if err := ValidateName(fmt.Sprintf("cohorts[%d].name", i), c.Name); err != nil {
			return err
		}
		if seen[c.Name] {
			return api.Errorf(api.CodeInvalidRequest, "cohorts[%d].name %q is used twice; cohort names are unique", i, c.Name)
		}
		seen[c.Name] = true
		if c.Nodes < 1 || c.Nodes > size {
			return api.Errorf(api.CodeInvalidRequest, "cohorts[%d].nodes is %d; accepted: 1 to the pool size %d", i, c.Nodes, size)
		}
		total += c.Nodes
	}
	if total > size {
		return api.Errorf(api.CodeInvalidRequest, "cohorts hold %d nodes in all but the pool has %d", total, size)
	}
	return nil
}

// SetBand declares (b != nil) or clears (b == nil) the pool's band. Setting
// a band moves no nodes.
func (p *Pool) SetBand(b *band.Band, hardCap int) error {
	if b != nil {
		if err := band.Validate(*b, hardCap, p.BandFacts()); err != nil {
			return err
		}
		cp := *b
		b = &cp
	}
	p.Band = b
	return nil
}

// Scale moves the pool to target nodes. Without roles the writers are kept and
// the readonly count absorbs the change; with roles they must add up to
// target. Scaling to 0 stops the pool like suspend, keeping its distribution.
// Any scale rewrites the role distribution and so clears authored cohorts.
func (p *Pool) Scale(target int, roles *Roles, hardCap int) error {
	if target < 0 || target > MaxSize {
		return api.Errorf(api.CodeInvalidRequest, "targetSize is %d; accepted: 0 to %d", target, MaxSize)
	}
	if p.Band != nil {
		if err := band.CheckTarget(target, *p.Band); err != nil {
			return err
		}
	}
	if target == 0 {
		if roles != nil {
			return api.Errorf(api.CodeInvalidRequest, "roleDistribution cannot be given with targetSize 0: a stopped pool keeps the distribution it had")
		}
		p.Suspended = true
		return nil
	}
	next := p.Roles
	if roles != nil {
		if err := roles.Validate(); err != nil {
			return err
		}
		if roles.Total() != target {
			return api.Errorf(api.CodeInvalidRequest, "roleDistribution (%s) adds up to %d nodes but targetSize is %d; they must match", roles, roles.Total(), target)
		}
		next = *roles
	} else {
		next.Readonly = target - next.Writeonly - next.Dual
		if next.Readonly < 0 {
			return api.Errorf(api.CodeInvalidRequest, "targetSize %d cannot keep the pool's %d write-capable nodes (writeonly %d + dual %d); pass roleDistribution to change them",
				target, next.Writers(), next.Writeonly, next.Dual)
		}
	}
	if p.Band != nil && next.Writers() > p.Band.Min {
		return api.Errorf(api.CodeInvalidBand, "rule 3 (minNodes covers the write-capable nodes): the new distribution has %d write-capable nodes (writeonly %d + dual %d) but minNodes is %d; adjust the band first via pool/setAutoscale",
			next.Writers(), next.Writeonly, next.Dual, p.Band.Min)
	}
	p.Roles = next
	p.Suspended = false
	p.Cohorts = nil
	return nil
}

// Suspend stops every node and keeps the role distribution. Suspending a
// suspended pool changes nothing.
func (p *Pool) Suspend() { p.Suspended = true }

// Resume brings a suspended pool back: a banded pool at minNodes (writers
// kept, readers fill the rest), an unbanded one at the size it had. Resuming a
// running pool changes nothing.
func (p *Pool) Resume() {
	if !p.Suspended {
		return
	}
	p.Suspended = false
	if p.Band != nil {
		p.Roles.Readonly = max(p.Band.Min-p.Roles.Writeonly-p.Roles.Dual, 0)
	}
}

// CheckQuota refuses a change that would take the tenant's running nodes over
// its quota. others is the number of nodes the tenant's other pools run;
// quota 0 means no quota.
func CheckQuota(p *Pool, others, quota int) error {
	if quota <= 0 {
		return nil
	}
	if total := others + p.Size(); total > quota {
		return api.Errorf(api.CodeQuotaExceeded, "tenant %q has a node quota of %d; this change would run %d nodes (%d in this pool, %d in its other pools)",
			p.Tenant, quota, total, p.Size(), others)
	}
	return nil
}
