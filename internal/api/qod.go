package api

import "time"

// The QoD pool API speaks camelCase JSON, as the reference page does.

// PoolRef names a pool in a request body.
type PoolRef struct {
	Tenant   string `json:"tenant"`
	TenantDB string `json:"tenantDb"`
	Pool     string `json:"pool"`
}

// Roles is a role distribution on the wire.
type Roles struct {
	Writeonly int `json:"writeonly"`
	Readonly  int `json:"readonly"`
	Dual      int `json:"dual"`
}

// Cohort is an authored cohort on the wire.
type Cohort struct {
	Name  string `json:"name"`
	Nodes int    `json:"nodes"`
}

// CreatePoolRequest is the body of POST /api/pool/create.
type CreatePoolRequest struct {
	PoolRef
	Size                 *int     `json:"size"`
	RoleDistribution     *Roles   `json:"roleDistribution,omitempty"`
	MaxConcurrentPerNode *int     `json:"maxConcurrentPerNode,omitempty"`
	Cohorts              []Cohort `json:"cohorts,omitempty"`
	MinNodes             *int     `json:"minNodes,omitempty"`
	MaxNodes             *int     `json:"maxNodes,omitempty"`
}

// SetAutoscaleRequest is the body of POST /api/pool/setAutoscale. Both bounds
// or neither: neither clears the band.
type SetAutoscaleRequest struct {
	PoolRef
	MinNodes *int `json:"minNodes,omitempty"`
	MaxNodes *int `json:"maxNodes,omitempty"`
}

// ScaleRequest is the body of POST /api/pool/scale.
type ScaleRequest struct {
	PoolRef
	TargetSize       *int   `json:"targetSize"`
	RoleDistribution *Roles `json:"roleDistribution,omitempty"`
}

// Pool is a pool as the API shows it.
type Pool struct {
	Tenant               string    `json:"tenant"`
	TenantDB             string    `json:"tenantDb"`
	Pool                 string    `json:"pool"`
	ID                   string    `json:"id"`
	Size                 int       `json:"size"`
	Suspended            bool      `json:"suspended"`
	RoleDistribution     Roles     `json:"roleDistribution"`
	MaxConcurrentPerNode int       `json:"maxConcurrentPerNode"`
	Cohorts              []Cohort  `json:"cohorts"`
	Elastic              bool      `json:"elastic"`
	MinNodes             *int      `json:"minNodes"`
	MaxNodes             *int      `json:"maxNodes"`
	Version              int64     `json:"version"`
	CreatedAt            time.Time `json:"createdAt"`
	UpdatedAt            time.Time `json:"updatedAt"`
}

// PoolList is the answer of GET /api/pool/list.
type PoolList struct {
	Pools []Pool `json:"pools"`
}

// AutoscaleConfig is the answer of GET /api/autoscale/config: the effective
// manager-wide settings.
type AutoscaleConfig struct {
	Enabled                   bool    `json:"enabled"`
	SweepSeconds              int     `json:"sweepSeconds"`
	WindowMinutes             int     `json:"windowMinutes"`
	HighWatermark             float64 `json:"highWatermark"`
	LowWatermark              float64 `json:"lowWatermark"`
	OutStreak                 int     `json:"outStreak"`
	InStreak                  int     `json:"inStreak"`
	ScaleOutCooldownSec       int     `json:"scaleOutCooldownSec"`
	ScaleInCooldownSec        int     `json:"scaleInCooldownSec"`
	AssumedConcurrencyPerNode int     `json:"assumedConcurrencyPerNode"`
	HardCap                   int     `json:"hardCap"`
	FailureBackoffSweeps      int     `json:"failureBackoffSweeps"`
}

// SetQuotaRequest is the body of POST /api/tenant/setQuota (operator only).
type SetQuotaRequest struct {
	Tenant    string `json:"tenant"`
	NodeQuota *int   `json:"nodeQuota"`
}

// Tenant is a tenant's quota and usage.
type Tenant struct {
	Tenant    string `json:"tenant"`
	NodeQuota int    `json:"nodeQuota"`
	Nodes     int    `json:"nodes"`
}

// CreateKeyRequest is the body of POST /api/keys (operator only).
type CreateKeyRequest struct {
	Name       string     `json:"name"`
	Org        string     `json:"org"`
	Kind       string     `json:"kind"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	AllowedIPs []string   `json:"allowedIps,omitempty"`
}

// Key is an API key as listed; the secret is shown once, at creation.
type Key struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Org        string     `json:"org"`
	Kind       string     `json:"kind"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	AllowedIPs []string   `json:"allowedIps"`
	CreatedAt  time.Time  `json:"createdAt"`
	Secret     string     `json:"secret,omitempty"`
}

// AuditEntry is one row of the audit log.
type AuditEntry struct {
	ID     int64          `json:"id"`
	At     time.Time      `json:"at"`
	Actor  string         `json:"actor"`
	Action string         `json:"action"`
	Tenant string         `json:"tenant,omitempty"`
	Target string         `json:"target"`
	Detail map[string]any `json:"detail,omitempty"`
}

// MaxLoadStatements bounds one POST /api/pool/load batch.
const MaxLoadStatements = 10_000

// MaxStatementMs is the longest statement duration accepted: one day.
const MaxStatementMs = 86_400_000

// LoadRequest is the body of POST /api/pool/load: statements the edge served
// for one pool.
type LoadRequest struct {
	PoolRef
	Statements []Statement `json:"statements"`
}

// Statement is one served statement: how long it ran and when it completed.
type Statement struct {
	DurationMs *int64 `json:"durationMs"`
	// At is an RFC 3339 time; the server parses it so that a bad one is
	// reported with its index.
	At *string `json:"at"`
}

// LoadResponse is the answer of POST /api/pool/load.
type LoadResponse struct {
	Recorded int `json:"recorded"`
	// Woke is true when the pool was suspended and these statements resumed it.
	Woke bool `json:"woke"`
}

// Streak is a streak against the number of sweeps it needs.
type Streak struct {
	Count  int `json:"count"`
	Needed int `json:"needed"`
}

// AutoscaleStatus is the answer of GET /api/pool/autoscaleStatus: what the
// last sweep saw and decided for one pool, and why.
type AutoscaleStatus struct {
	Pool      string `json:"pool"`
	Enabled   bool   `json:"enabled"`
	Banded    bool   `json:"banded"`
	MinNodes  *int   `json:"minNodes"`
	MaxNodes  *int   `json:"maxNodes"`
	Size      int    `json:"size"`
	Suspended bool   `json:"suspended"`

	SweptAt     *time.Time `json:"sweptAt"`
	NextSweepAt time.Time  `json:"nextSweepAt"`
	// Decision is "out", "in" or "hold"; Rule says why in words, RuleCode
	// is the same as a stable code.
	Decision    string   `json:"decision"`
	Rule        string   `json:"rule"`
	RuleCode    string   `json:"ruleCode"`
	From        int      `json:"from"`
	To          int      `json:"to"`
	Acted       bool     `json:"acted"`
	ActionError string   `json:"actionError,omitempty"`
	Demand      float64  `json:"demand"`
	Capacity    float64  `json:"capacity"`
	Utilization *float64 `json:"utilization"`

	HighWatermark     float64    `json:"highWatermark"`
	LowWatermark      float64    `json:"lowWatermark"`
	OutStreak         Streak     `json:"outStreak"`
	InStreak          Streak     `json:"inStreak"`
	OutCooldownLeft   int        `json:"outCooldownLeftSec"`
	InCooldownLeft    int        `json:"inCooldownLeftSec"`
	Failures          int        `json:"failures"`
	BackoffSweepsLeft int        `json:"backoffSweepsLeft"`
	LastAction        *time.Time `json:"lastAction"`
	LastResume        *time.Time `json:"lastResume"`
	UnroutableReaders int        `json:"unroutableReaders"`
}

// SetRoutableRequest is the body of POST /api/pool/nodes/setRoutable.
type SetRoutableRequest struct {
	PoolRef
	Role     string `json:"role"`
	Index    *int   `json:"index"`
	Routable *bool  `json:"routable"`
}
