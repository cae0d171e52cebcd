// Package store is the persistence boundary of the API server. The Store
// interface is all the server knows; SQLite (the embedded default) and
// PostgreSQL sit behind it.
package store

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/hook"
	"github.com/qodaperio/autoscale/internal/hookengine"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/qodengine"
)

var (
	// ErrNotFound is returned when the named row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when a row already exists or changed under a
	// conditional update.
	ErrConflict = errors.New("conflict")
)

// Key is a stored API key. Only the hash of its secret is kept.
type Key struct {
	ID         string
	Name       string
	Hash       string
	Org        string // "" is the operator scope
	Kind       string // "admin" or "client"
	ExpiresAt  *time.Time
	AllowedIPs []string
	CreatedAt  time.Time
	RevokedAt  *time.Time
}

// AuditRow is one audit log entry.
type AuditRow struct {
	ID     int64
	At     time.Time
	Actor  string
	Action string
	Tenant string
	Target string
	Detail map[string]any
}

// Store is what the server needs from a database.
type Store interface {
	CountKeys(ctx context.Context) (int, error)
	CreateKey(ctx context.Context, k *Key) error
	KeyByHash(ctx context.Context, hash string) (*Key, error)
	ListKeys(ctx context.Context) ([]Key, error)
	RevokeKey(ctx context.Context, id string, at time.Time) error

	GetPool(ctx context.Context, k pool.Key) (*pool.Pool, error)
	// ListPools lists every pool, or one tenant's when tenant is not empty,
	// ordered by id.
	ListPools(ctx context.Context, tenant string) ([]pool.Pool, error)
	// TenantQuota returns the tenant's node quota (0: none) and the nodes its
	// pools run.
	TenantQuota(ctx context.Context, tenant string) (quota, nodes int, err error)
	ListAudit(ctx context.Context, tenant string, limit int) ([]AuditRow, error)

	// FlushLoad adds closed one-minute buckets to qodstate_pool_load in one
	// transaction. Adding, not replacing: every replica flushes its own
	// share of a minute.
	FlushLoad(ctx context.Context, rows []LoadRow) error
	// PurgeLoad deletes load rows of minutes before minute.
	PurgeLoad(ctx context.Context, before int64) (int64, error)
	// PoolLoad sums one pool's load over minutes first..last.
	PoolLoad(ctx context.Context, k pool.Key, first, last int64) (statementMs int64, err error)
	// SweepView reads, in one pass, every pool with a band, its autoscale
	// state and its statement time over minutes first..last.
	SweepView(ctx context.Context, first, last int64) ([]SweepRow, error)
	// SaveAutoscaleStates writes states the sweep changed, each only if its
	// row still has the version the sweep read; it returns how many were
	// skipped because a person changed the pool meanwhile.
	SaveAutoscaleStates(ctx context.Context, states []StateRow) (skipped int, err error)
	// AutoscaleState is one pool's state (zero when never swept).
	AutoscaleState(ctx context.Context, k pool.Key) (StateRow, error)

	// Mutate runs fn in one transaction: reads see a consistent state and
	// writes, the quota check and the audit row land together or not at
	// all. This is the mutation gate every pool change goes through.
	Mutate(ctx context.Context, fn func(tx Tx) error) error

	ScalingStore

	// Ready reports whether the store answers and has every migration
	// this server needs.
	Ready(ctx context.Context) error

	Close() error
}

// Tx is the view of the store inside Mutate.
type Tx interface {
	GetPool(k pool.Key) (*pool.Pool, error)
	// TenantNodes counts the nodes that the tenant's pools other than except run.
	TenantNodes(tenant string, except pool.Key) (int, error)
	TenantQuota(tenant string) (int, error)
	SetTenantQuota(tenant string, quota int) error
	// InsertPool stores a new pool at version 1; ErrConflict if it exists.
	InsertPool(p *pool.Pool, now time.Time) error
	// UpdatePool writes p if its stored version is still p.Version, then
	// bumps p.Version; ErrConflict otherwise.
	UpdatePool(p *pool.Pool, now time.Time) error
	// DeletePool deletes the pool with its autoscale state and load rows.
	DeletePool(k pool.Key) error
	Audit(a AuditRow) error
	// AutoscaleState and SetAutoscaleState read and write the pool's engine
	// state in the transaction; SetAutoscaleState bumps its version.
	AutoscaleState(k pool.Key) (StateRow, error)
	SetAutoscaleState(s StateRow) error
}

// LoadRow is one pool's statements in one minute (minutes since the epoch).
type LoadRow struct {
	Key         pool.Key
	Minute      int64
	StatementMs int64
	Statements  int64
}

// StateRow is one pool's autoscale engine state and the version of its row
// (0: no row yet).
type StateRow struct {
	Key     pool.Key
	State   qodengine.State
	Version int64
}

// SweepRow is what the sweep needs of one banded pool, and no more: a sweep
// holds one per pool, and the decision pass reads them all.
type SweepRow struct {
	Key                  pool.Key
	Roles                pool.Roles
	Suspended            bool
	MaxConcurrentPerNode int
	Band                 band.Band
	Version              int64 // the pool's
	State                qodengine.State
	StateVersion         int64 // the state row's; 0 when it has none yet
	StatementMs          int64 // in the window
}

// StateRow is the row's state as SaveAutoscaleStates takes it.
func (r *SweepRow) StateRow() StateRow {
	return StateRow{Key: r.Key, State: r.State, Version: r.StateVersion}
}

// SortLoadRows returns a copy of rows in the load table's key order (minute,
// tenant, tenantDb, pool) with rows for the same pool and minute merged.
func SortLoadRows(rows []LoadRow) []LoadRow {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b LoadRow) int {
		return cmp.Or(cmp.Compare(a.Minute, b.Minute), cmp.Compare(a.Key.Tenant, b.Key.Tenant),
			cmp.Compare(a.Key.TenantDB, b.Key.TenantDB), cmp.Compare(a.Key.Pool, b.Key.Pool))
	})
	out := rows[:0]
	for _, r := range rows {
		if n := len(out); n > 0 && out[n-1].Minute == r.Minute && out[n-1].Key == r.Key {
			out[n-1].StatementMs += r.StatementMs
			out[n-1].Statements += r.Statements
			continue
		}
		out = append(out, r)
	}
	return out
}

// BeforeCommit, when set, is called just before a store commits a
// transaction, with "mutate" or "flush". Crash tests set it (through the
// server's QOD_FAILPOINT) to kill the process with the transaction open.
var BeforeCommit func(op string)

// Failpoint calls BeforeCommit if it is set.
func Failpoint(op string) {
	if BeforeCommit != nil {
		BeforeCommit(op)
	}
}

// ScalingRecord is an Aperio scaling hook declared for a hostname.
type ScalingRecord struct {
	ID          string
	Org         string // the organization of the keys that armed it; "" for the operator
	Hostname    string
	Declaration hook.Declaration
	// SecretEnc is the hook's secret, encrypted with the server key; nil
	// when none is set. The store never sees it in clear.
	SecretEnc []byte
	// Source is "api" (declared with PUT) or "heartbeat" (announced by a
	// client); heartbeat records expire when nothing re-announces them.
	Source      string
	State       hookengine.State
	AnnouncedAt time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// KeyIDs are the keys that armed it; when none of them is live any
	// more, the record goes.
	KeyIDs  []string
	Version int64
}

// ScalingStore keeps the scaling records.
type ScalingStore interface {
	// PutScaling declares or re-announces the record for r.Hostname on
	// behalf of key keyID: it is created, or its declaration (and, when
	// setSecret, its secret) replaced; it is re-armed and keyID joins its
	// arming keys. A hostname held by another organization is ErrConflict.
	// It returns the stored record and whether it was created.
	PutScaling(ctx context.Context, r *ScalingRecord, keyID string, setSecret bool) (*ScalingRecord, bool, error)
	// GetScaling finds a record by id or by hostname.
	GetScaling(ctx context.Context, idOrHostname string) (*ScalingRecord, error)
	// ListScaling lists one organization's records, or every record when
	// all is true, ordered by hostname.
	ListScaling(ctx context.Context, org string, all bool) ([]ScalingRecord, error)
	DeleteScaling(ctx context.Context, id string) error
	// SaveScalingState writes a record's loop state if its version is
	// still version; ErrConflict otherwise.
	SaveScalingState(ctx context.Context, id string, st hookengine.State, version int64) error
	// PruneScaling deletes records none of whose arming keys is live at
	// now, and heartbeat records not announced since now-ttl. It returns
	// the hostnames it deleted.
	PruneScaling(ctx context.Context, now time.Time, ttl time.Duration) ([]string, error)
}
