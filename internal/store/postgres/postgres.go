// Package postgres is the store for several API server replicas on one
// PostgreSQL (pgx, pooled). It keeps the same tables as the SQLite store,
// with the migrations written for PostgreSQL, and passes the same
// conformance suite.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/store"
)

// Store is the PostgreSQL implementation of store.Store.
type Store struct {
	pool *pgxpool.Pool
}

var _ store.Store = (*Store)(nil)

// migrationLock is the advisory lock that serializes migrations when several
// replicas start at once.
const migrationLock = 0x716f645f6d6967 // "qod_mig"

// migrations mirror the SQLite store's, version for version. Append only.
var migrations = []string{
	// 1: keys, tenants, pools, audit.
	`CREATE TABLE api_keys (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL,
		key_hash TEXT NOT NULL UNIQUE,
		org TEXT NOT NULL,
		kind TEXT NOT NULL,
		expires_at BIGINT,
		allowed_ips TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		revoked_at BIGINT
	);
	CREATE TABLE tenants (
		name TEXT PRIMARY KEY,
		node_quota INTEGER NOT NULL
	);
	CREATE TABLE pools (
		tenant TEXT NOT NULL,
		tenant_db TEXT NOT NULL,
		pool TEXT NOT NULL,
		writeonly INTEGER NOT NULL,
		readonly INTEGER NOT NULL,
		dual INTEGER NOT NULL,
		suspended BOOLEAN NOT NULL,
		max_concurrent_per_node INTEGER NOT NULL,
		min_nodes INTEGER,
		max_nodes INTEGER,
		cohorts TEXT NOT NULL,
		version BIGINT NOT NULL,
		created_at BIGINT NOT NULL,
		updated_at BIGINT NOT NULL,
		PRIMARY KEY (tenant, tenant_db, pool)
	);
	CREATE TABLE audit (
		id BIGSERIAL PRIMARY KEY,
		at BIGINT NOT NULL,
		actor TEXT NOT NULL,
		action TEXT NOT NULL,
		tenant TEXT NOT NULL,
		target TEXT NOT NULL,
		detail TEXT NOT NULL
	);
	CREATE INDEX audit_tenant ON audit (tenant, id);`,
	// 2: the QoD load signal and the autoscale engine's state per pool.
	`CREATE TABLE qodstate_pool_load (
		tenant TEXT NOT NULL,
		tenant_db TEXT NOT NULL,
		pool TEXT NOT NULL,
		minute BIGINT NOT NULL,
		statement_ms BIGINT NOT NULL,
		statements BIGINT NOT NULL,
		PRIMARY KEY (minute, tenant, tenant_db, pool)
	);
	CREATE TABLE qodstate_autoscale (
		tenant TEXT NOT NULL,
		tenant_db TEXT NOT NULL,
		pool TEXT NOT NULL,
		out_streak INTEGER NOT NULL,
		in_streak INTEGER NOT NULL,
		failures INTEGER NOT NULL,
		backoff_left INTEGER NOT NULL,
		last_action BIGINT,
		last_resume BIGINT,
		version BIGINT NOT NULL,
		PRIMARY KEY (tenant, tenant_db, pool)
	);`,
	// 3: Aperio scaling records and the keys that armed them.
	`CREATE TABLE scaling_records (
		id TEXT PRIMARY KEY,
		org TEXT NOT NULL,
		hostname TEXT NOT NULL UNIQUE,
		declaration TEXT NOT NULL,
		secret_enc BYTEA,
		source TEXT NOT NULL,
		state TEXT NOT NULL,
		announced_at BIGINT NOT NULL,
		created_at BIGINT NOT NULL,
		updated_at BIGINT NOT NULL,
		version BIGINT NOT NULL
	);
	CREATE INDEX scaling_records_org ON scaling_records (org, hostname);
	CREATE TABLE scaling_record_keys (
		record_id TEXT NOT NULL REFERENCES scaling_records (id) ON DELETE CASCADE,
		key_id TEXT NOT NULL,
		PRIMARY KEY (record_id, key_id)
	);`,
}

// Open connects to the database at url (postgres://...) and applies any
// migration it lacks.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: QOD_DATABASE_URL is not a valid PostgreSQL URL: %v", redact(err))
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{pool: p}
	if err := s.migrate(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return s, nil
}

// redact keeps a password in a URL out of an error.
func redact(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "://"); i >= 0 {
		if at := strings.Index(msg[i:], "@"); at >= 0 {
			return msg[:i+3] + "***" + msg[i+at:]
		}
	}
	return msg
}

// Pool is the connection pool, for the leader election's own connection.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

func (s *Store) Close() error { s.pool.Close(); return nil }

func (s *Store) migrate(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("postgres: migration lock: %w", err)
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, migrationLock)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("postgres: create schema_migrations: %w", err)
	}
	var have int
	if err := conn.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("postgres: read schema version: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("postgres: database schema version %d is newer than this server knows (%d); upgrade the server", have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v, time.Now().UnixMilli())
			return err
		})
		if err != nil {
			return fmt.Errorf("postgres: migration %d: %w", v, err)
		}
	}
	return nil
}

// SchemaVersion is the newest migration applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// Ready reports whether the database answers and every migration this
// server knows is applied.
func (s *Store) Ready(ctx context.Context) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if v != len(migrations) {
		return fmt.Errorf("schema at version %d, this server needs %d", v, len(migrations))
	}
	return nil
}

func ms(t time.Time) int64     { return t.UnixMilli() }
func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }
func nullMs(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	v := t.UnixMilli()
	return &v
}
func ptrMs(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := fromMs(*v)
	return &t
}
func nullTime(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.UnixMilli()
	return &v
}
func timeOf(v *int64) time.Time {
	if v == nil {
		return time.Time{}
	}
	return fromMs(*v)
}

func isUnique(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// --- keys ---

func (s *Store) CountKeys(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM api_keys`).Scan(&n)
	return n, err
}

func (s *Store) CreateKey(ctx context.Context, k *store.Key) error {
	ips, _ := json.Marshal(nonNil(k.AllowedIPs))
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (id, name, key_hash, org, kind, expires_at, allowed_ips, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		k.ID, k.Name, k.Hash, k.Org, k.Kind, nullMs(k.ExpiresAt), string(ips), ms(k.CreatedAt))
	if isUnique(err) {
		return store.ErrConflict
	}
	return err
}

const keyCols = `id, name, key_hash, org, kind, expires_at, allowed_ips, created_at, revoked_at`

func scanKey(sc pgx.Row) (*store.Key, error) {
	var k store.Key
	var exp, rev *int64
	var ips string
	var created int64
	if err := sc.Scan(&k.ID, &k.Name, &k.Hash, &k.Org, &k.Kind, &exp, &ips, &created, &rev); err != nil {
		return nil, err
	}
	k.ExpiresAt, k.RevokedAt, k.CreatedAt = ptrMs(exp), ptrMs(rev), fromMs(created)
	if err := json.Unmarshal([]byte(ips), &k.AllowedIPs); err != nil {
		return nil, fmt.Errorf("postgres: key %s: allowed_ips: %w", k.ID, err)
	}
	return &k, nil
}

func (s *Store) KeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE key_hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return k, err
}

func (s *Store) ListKeys(ctx context.Context) ([]store.Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyCols+` FROM api_keys WHERE revoked_at IS NULL ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *k)
	}
	return out, rows.Err()
}

func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, ms(at), id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

// --- pools ---

const poolCols = `tenant, tenant_db, pool, writeonly, readonly, dual, suspended, max_concurrent_per_node, min_nodes, max_nodes, cohorts, version, created_at, updated_at`

func scanPool(sc pgx.Row) (*pool.Pool, error) {
	var p pool.Pool
	var minN, maxN *int
	var cohorts string
	var created, updated int64
	err := sc.Scan(&p.Tenant, &p.TenantDB, &p.Pool, &p.Roles.Writeonly, &p.Roles.Readonly, &p.Roles.Dual,
		&p.Suspended, &p.MaxConcurrentPerNode, &minN, &maxN, &cohorts, &p.Version, &created, &updated)
	if err != nil {
		return nil, err
	}
	if minN != nil && maxN != nil {
		p.Band = &band.Band{Min: *minN, Max: *maxN}
	}
	if err := json.Unmarshal([]byte(cohorts), &p.Cohorts); err != nil {
		return nil, fmt.Errorf("postgres: pool %s: cohorts: %w", p.Key, err)
	}
	p.CreatedAt, p.UpdatedAt = fromMs(created), fromMs(updated)
	return &p, nil
}

func getPool(ctx context.Context, q querier, k pool.Key, lock bool) (*pool.Pool, error) {
	query := `SELECT ` + poolCols + ` FROM pools WHERE tenant = $1 AND tenant_db = $2 AND pool = $3`
	if lock {
		// Inside the gate: hold the row so a concurrent replica's change
		// to the same pool waits instead of racing the version check.
		query += ` FOR UPDATE`
	}
	p, err := scanPool(q.QueryRow(ctx, query, k.Tenant, k.TenantDB, k.Pool))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return p, err
}

func (s *Store) GetPool(ctx context.Context, k pool.Key) (*pool.Pool, error) {
	return getPool(ctx, s.pool, k, false)
}

func (s *Store) ListPools(ctx context.Context, tenant string) ([]pool.Pool, error) {
	query := `SELECT ` + poolCols + ` FROM pools`
	var args []any
	if tenant != "" {
		query += ` WHERE tenant = $1`
		args = append(args, tenant)
	}
	query += ` ORDER BY tenant, tenant_db, pool`
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []pool.Pool{}
	for rows.Next() {
		p, err := scanPool(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *p)
	}
	return out, rows.Err()
}

func tenantQuota(ctx context.Context, q querier, tenant string) (int, error) {
	var quota int
	err := q.QueryRow(ctx, `SELECT node_quota FROM tenants WHERE name = $1`, tenant).Scan(&quota)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return quota, err
}

func tenantNodes(ctx context.Context, q querier, tenant string, except pool.Key) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT COALESCE(SUM(writeonly + readonly + dual), 0) FROM pools
		WHERE tenant = $1 AND NOT suspended AND NOT (tenant_db = $2 AND pool = $3)`, tenant, except.TenantDB, except.Pool).Scan(&n)
	return n, err
}

func (s *Store) TenantQuota(ctx context.Context, tenant string) (int, int, error) {
	quota, err := tenantQuota(ctx, s.pool, tenant)
	if err != nil {
		return 0, 0, err
	}
	nodes, err := tenantNodes(ctx, s.pool, tenant, pool.Key{})
	return quota, nodes, err
}

func (s *Store) ListAudit(ctx context.Context, tenant string, limit int) ([]store.AuditRow, error) {
	query := `SELECT id, at, actor, action, tenant, target, detail FROM audit`
	args := []any{}
	if tenant != "" {
		query += ` WHERE tenant = $1`
		args = append(args, tenant)
	}
	args = append(args, limit)
	query += fmt.Sprintf(` ORDER BY id DESC LIMIT $%d`, len(args))
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.AuditRow{}
	for rows.Next() {
		var a store.AuditRow
		var at int64
		var detail string
		if err := rows.Scan(&a.ID, &at, &a.Actor, &a.Action, &a.Tenant, &a.Target, &detail); err != nil {
			return nil, err
		}
		a.At = fromMs(at)
		if err := json.Unmarshal([]byte(detail), &a.Detail); err != nil {
			return nil, fmt.Errorf("postgres: audit %d: detail: %w", a.ID, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// --- the mutation gate ---

func (s *Store) Mutate(ctx context.Context, fn func(store.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		if err := fn(&tx{ctx: ctx, tx: t}); err != nil {
			return err
		}
		store.Failpoint("mutate")
		return nil
	})
}

type tx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t *tx) GetPool(k pool.Key) (*pool.Pool, error) { return getPool(t.ctx, t.tx, k, true) }

func (t *tx) TenantNodes(tenant string, except pool.Key) (int, error) {
	return tenantNodes(t.ctx, t.tx, tenant, except)
}

func (t *tx) TenantQuota(tenant string) (int, error) { return tenantQuota(t.ctx, t.tx, tenant) }

func (t *tx) SetTenantQuota(tenant string, quota int) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO tenants (name, node_quota) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET node_quota = excluded.node_quota`, tenant, quota)
	return err
}

func bandArgs(b *band.Band) (*int, *int) {
	if b == nil {
		return nil, nil
	}
	return &b.Min, &b.Max
}

func (t *tx) InsertPool(p *pool.Pool, now time.Time) error {
	cohorts, _ := json.Marshal(nonNil(p.Cohorts))
	minN, maxN := bandArgs(p.Band)
	// ON CONFLICT DO NOTHING rather than a unique violation, which would
	// abort the whole transaction: no row back means the pool exists.
	var v int64
	err := t.tx.QueryRow(t.ctx, `INSERT INTO pools (`+poolCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1, $12, $13)
		ON CONFLICT DO NOTHING RETURNING version`,
		p.Tenant, p.TenantDB, p.Pool, p.Roles.Writeonly, p.Roles.Readonly, p.Roles.Dual, p.Suspended,
		p.MaxConcurrentPerNode, minN, maxN, string(cohorts), ms(now), ms(now)).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrConflict
	}
	if err != nil {
		return err
	}
	p.Version, p.CreatedAt, p.UpdatedAt = 1, fromMs(ms(now)), fromMs(ms(now))
	return nil
}

func (t *tx) UpdatePool(p *pool.Pool, now time.Time) error {
	cohorts, _ := json.Marshal(nonNil(p.Cohorts))
	minN, maxN := bandArgs(p.Band)
	tag, err := t.tx.Exec(t.ctx, `UPDATE pools SET writeonly = $1, readonly = $2, dual = $3, suspended = $4,
		max_concurrent_per_node = $5, min_nodes = $6, max_nodes = $7, cohorts = $8, version = version + 1, updated_at = $9
		WHERE tenant = $10 AND tenant_db = $11 AND pool = $12 AND version = $13`,
		p.Roles.Writeonly, p.Roles.Readonly, p.Roles.Dual, p.Suspended, p.MaxConcurrentPerNode, minN, maxN,
		string(cohorts), ms(now), p.Tenant, p.TenantDB, p.Pool, p.Version)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrConflict
	}
	p.Version++
	p.UpdatedAt = fromMs(ms(now))
	return nil
}

func (t *tx) DeletePool(k pool.Key) error {
	tag, err := t.tx.Exec(t.ctx, `DELETE FROM pools WHERE tenant = $1 AND tenant_db = $2 AND pool = $3`, k.Tenant, k.TenantDB, k.Pool)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	for _, table := range []string{"qodstate_autoscale", "qodstate_pool_load"} {
		if _, err := t.tx.Exec(t.ctx, `DELETE FROM `+table+` WHERE tenant = $1 AND tenant_db = $2 AND pool = $3`, k.Tenant, k.TenantDB, k.Pool); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) Audit(a store.AuditRow) error {
	detail, err := json.Marshal(a.Detail)
	if err != nil {
		return fmt.Errorf("audit detail: %w", err)
	}
	if a.Detail == nil {
		detail = []byte("{}")
	}
	_, err = t.tx.Exec(t.ctx, `INSERT INTO audit (at, actor, action, tenant, target, detail) VALUES ($1, $2, $3, $4, $5, $6)`,
		ms(a.At), a.Actor, a.Action, a.Tenant, a.Target, string(detail))
	return err
}
