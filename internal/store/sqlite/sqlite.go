// Package sqlite is the embedded store: one SQLite file (pure Go driver, no
// cgo) in WAL mode with synchronous=FULL, so an answered write survives a
// crash of the process or the machine.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/store"
)

// Store is the SQLite implementation of store.Store.
type Store struct {
	db *sql.DB // the one writer connection; also used inside Mutate
	ro *sql.DB // read-only connections: WAL lets readers run beside the writer

	// Prepared statements by query text, one map per *sql.DB. Parsing SQL
	// was a fifth of a request's CPU before statements were kept.
	rwStmts, roStmts sync.Map
	// Writer queries first seen inside a transaction, prepared after it.
	warm sync.Map
}

// prepared runs queries on db (or inside tx) through kept prepared
// statements. It satisfies querier, so the query helpers take either.
type prepared struct {
	s  *Store
	db *sql.DB
	tx *sql.Tx
}

func (p prepared) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	cache := &p.s.roStmts
	if p.db == p.s.db {
		cache = &p.s.rwStmts
	}
	var st *sql.Stmt
	if v, ok := cache.Load(query); ok {
		st = v.(*sql.Stmt)
	} else if p.tx != nil {
		// The writer's only connection is this transaction's: preparing
		// on the DB would wait for it forever. Prepare in the transaction
		// now and keep a statement once the connection is free again.
		p.s.warm.Store(query, struct{}{})
		return p.tx.PrepareContext(ctx, query)
	} else {
		fresh, err := p.db.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		if v, loaded := cache.LoadOrStore(query, fresh); loaded {
			fresh.Close()
			st = v.(*sql.Stmt)
		} else {
			st = fresh
		}
	}
	if p.tx != nil {
		st = p.tx.StmtContext(ctx, st) // closed with the transaction
	}
	return st, nil
}

// fallback is where a query goes when it cannot be prepared: running it
// unprepared reports the same error through the usual return values.
func (p prepared) fallback() querier {
	if p.tx != nil {
		return p.tx
	}
	return p.db
}

func (p prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return p.fallback().QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (p prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (p prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (s *Store) reader() querier { return prepared{s: s, db: s.ro} }
func (s *Store) writer() querier { return prepared{s: s, db: s.db} }

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database file at path and applies any
// migration it lacks.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	dsn := func(readOnly bool) string {
		q := url.Values{}
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
		q.Add("_pragma", "busy_timeout(10000)")
		q.Add("_pragma", "foreign_keys(1)")
		if readOnly {
			q.Add("_pragma", "query_only(1)")
		} else {
			q.Set("_txlock", "immediate")
		}
		return "file:" + path + "?" + q.Encode()
	}
	db, err := sql.Open("sqlite", dsn(false))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// One writer connection: SQLite has one writer anyway, and a single
	// connection makes every write transaction strictly serial with no
	// SQLITE_BUSY to handle.
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if s.ro, err = sql.Open("sqlite", dsn(true)); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s read-only: %w", path, err)
	}
	s.ro.SetMaxOpenConns(4)
	s.ro.SetMaxIdleConns(4)
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error {
	for _, m := range []*sync.Map{&s.roStmts, &s.rwStmts} {
		m.Range(func(_, v any) bool { v.(*sql.Stmt).Close(); return true })
	}
	return errors.Join(s.ro.Close(), s.db.Close())
}

// migrations are applied in order, each once, recorded in schema_migrations.
// Append only: never edit one that has shipped.
var migrations = []string{
	// 1: keys, tenants, pools, audit.
	`CREATE TABLE api_keys (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL,
		key_hash TEXT NOT NULL UNIQUE,
		org TEXT NOT NULL,
		kind TEXT NOT NULL,
		expires_at INTEGER,
		allowed_ips TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		revoked_at INTEGER
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
		suspended INTEGER NOT NULL,
		max_concurrent_per_node INTEGER NOT NULL,
		min_nodes INTEGER,
		max_nodes INTEGER,
		cohorts TEXT NOT NULL,
		version INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		PRIMARY KEY (tenant, tenant_db, pool)
	);
	CREATE TABLE audit (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		at INTEGER NOT NULL,
		actor TEXT NOT NULL,
		action TEXT NOT NULL,
		tenant TEXT NOT NULL,
		target TEXT NOT NULL,
		detail TEXT NOT NULL
	);
	CREATE INDEX audit_tenant ON audit (tenant, id);`,
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: create schema_migrations: %w", err)
	}
	var have int
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("sqlite: read schema version: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("sqlite: database schema version %d is newer than this server knows (%d); upgrade the server", have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite: migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v, time.Now().UnixMilli()); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sqlite: migration %d: %w", v, err)
		}
	}
	return nil
}

// SchemaVersion is the newest migration applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

func nullMs(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

func ptrMs(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMs(v.Int64)
	return &t
}

// --- keys ---

func (s *Store) CountKeys(ctx context.Context) (int, error) {
	var n int
	err := s.reader().QueryRowContext(ctx, `SELECT COUNT(*) FROM api_keys`).Scan(&n)
	return n, err
}

func (s *Store) CreateKey(ctx context.Context, k *store.Key) error {
	ips, _ := json.Marshal(nonNil(k.AllowedIPs))
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (id, name, key_hash, org, kind, expires_at, allowed_ips, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Hash, k.Org, k.Kind, nullMs(k.ExpiresAt), string(ips), ms(k.CreatedAt))
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return store.ErrConflict
	}
	return err
}

const keyCols = `id, name, key_hash, org, kind, expires_at, allowed_ips, created_at, revoked_at`

func scanKey(sc interface{ Scan(...any) error }) (*store.Key, error) {
	var k store.Key
	var exp, rev sql.NullInt64
	var ips string
	var created int64
	if err := sc.Scan(&k.ID, &k.Name, &k.Hash, &k.Org, &k.Kind, &exp, &ips, &created, &rev); err != nil {
		return nil, err
	}
	k.ExpiresAt, k.RevokedAt, k.CreatedAt = ptrMs(exp), ptrMs(rev), fromMs(created)
	if err := json.Unmarshal([]byte(ips), &k.AllowedIPs); err != nil {
		return nil, fmt.Errorf("sqlite: key %s: allowed_ips: %w", k.ID, err)
	}
	return &k, nil
}

func (s *Store) KeyByHash(ctx context.Context, hash string) (*store.Key, error) {
	k, err := scanKey(s.reader().QueryRowContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE key_hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return k, err
}

func (s *Store) ListKeys(ctx context.Context) ([]store.Key, error) {
	rows, err := s.reader().QueryContext(ctx, `SELECT `+keyCols+` FROM api_keys WHERE revoked_at IS NULL ORDER BY created_at, id`)
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
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, ms(at), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// --- pools ---

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

const poolCols = `tenant, tenant_db, pool, writeonly, readonly, dual, suspended, max_concurrent_per_node, min_nodes, max_nodes, cohorts, version, created_at, updated_at`

func scanPool(sc interface{ Scan(...any) error }) (*pool.Pool, error) {
	var p pool.Pool
	var minN, maxN sql.NullInt64
	var cohorts string
	var created, updated int64
	err := sc.Scan(&p.Tenant, &p.TenantDB, &p.Pool, &p.Roles.Writeonly, &p.Roles.Readonly, &p.Roles.Dual,
		&p.Suspended, &p.MaxConcurrentPerNode, &minN, &maxN, &cohorts, &p.Version, &created, &updated)
	if err != nil {
		return nil, err
	}
	if minN.Valid && maxN.Valid {
		p.Band = &band.Band{Min: int(minN.Int64), Max: int(maxN.Int64)}
	}
	if err := json.Unmarshal([]byte(cohorts), &p.Cohorts); err != nil {
		return nil, fmt.Errorf("sqlite: pool %s: cohorts: %w", p.Key, err)
	}
	p.CreatedAt, p.UpdatedAt = fromMs(created), fromMs(updated)
	return &p, nil
}

func getPool(ctx context.Context, q querier, k pool.Key) (*pool.Pool, error) {
	p, err := scanPool(q.QueryRowContext(ctx, `SELECT `+poolCols+` FROM pools WHERE tenant = ? AND tenant_db = ? AND pool = ?`, k.Tenant, k.TenantDB, k.Pool))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return p, err
}

func (s *Store) GetPool(ctx context.Context, k pool.Key) (*pool.Pool, error) {
	return getPool(ctx, s.reader(), k)
}

func (s *Store) ListPools(ctx context.Context, tenant string) ([]pool.Pool, error) {
	query := `SELECT ` + poolCols + ` FROM pools`
	var args []any
	if tenant != "" {
		query += ` WHERE tenant = ?`
		args = append(args, tenant)
	}
	query += ` ORDER BY tenant, tenant_db, pool`
	rows, err := s.reader().QueryContext(ctx, query, args...)
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
	err := q.QueryRowContext(ctx, `SELECT node_quota FROM tenants WHERE name = ?`, tenant).Scan(&quota)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return quota, err
}

func tenantNodes(ctx context.Context, q querier, tenant string, except pool.Key) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, `SELECT COALESCE(SUM(writeonly + readonly + dual), 0) FROM pools
		WHERE tenant = ? AND suspended = 0 AND NOT (tenant_db = ? AND pool = ?)`, tenant, except.TenantDB, except.Pool).Scan(&n)
	return n, err
}

func (s *Store) TenantQuota(ctx context.Context, tenant string) (int, int, error) {
	quota, err := tenantQuota(ctx, s.reader(), tenant)
	if err != nil {
		return 0, 0, err
	}
	nodes, err := tenantNodes(ctx, s.reader(), tenant, pool.Key{})
	return quota, nodes, err
}

func (s *Store) ListAudit(ctx context.Context, tenant string, limit int) ([]store.AuditRow, error) {
	query := `SELECT id, at, actor, action, tenant, target, detail FROM audit`
	var args []any
	if tenant != "" {
		query += ` WHERE tenant = ?`
		args = append(args, tenant)
	}
	query += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.reader().QueryContext(ctx, query, args...)
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
			return nil, fmt.Errorf("sqlite: audit %d: detail: %w", a.ID, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// --- the mutation gate ---

func (s *Store) Mutate(ctx context.Context, fn func(store.Tx) error) error {
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	err = fn(&tx{ctx: ctx, tx: sqlTx, q: prepared{s: s, db: s.db, tx: sqlTx}})
	if err != nil {
		sqlTx.Rollback()
	} else {
		err = sqlTx.Commit()
	}
	s.warm.Range(func(q, _ any) bool {
		s.warm.Delete(q)
		_, _ = prepared{s: s, db: s.db}.stmt(ctx, q.(string))
		return true
	})
	return err
}

type tx struct {
	ctx context.Context
	tx  *sql.Tx
	q   querier // tx through prepared statements
}

func (t *tx) GetPool(k pool.Key) (*pool.Pool, error) { return getPool(t.ctx, t.q, k) }

func (t *tx) TenantNodes(tenant string, except pool.Key) (int, error) {
	return tenantNodes(t.ctx, t.q, tenant, except)
}

func (t *tx) TenantQuota(tenant string) (int, error) { return tenantQuota(t.ctx, t.q, tenant) }

func (t *tx) SetTenantQuota(tenant string, quota int) error {
	_, err := t.q.ExecContext(t.ctx, `INSERT INTO tenants (name, node_quota) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET node_quota = excluded.node_quota`, tenant, quota)
	return err
}

func bandArgs(b *band.Band) (any, any) {
	if b == nil {
		return nil, nil
	}
	return b.Min, b.Max
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (t *tx) InsertPool(p *pool.Pool, now time.Time) error {
	cohorts, _ := json.Marshal(nonNil(p.Cohorts))
	minN, maxN := bandArgs(p.Band)
	_, err := t.q.ExecContext(t.ctx, `INSERT INTO pools (`+poolCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`,
		p.Tenant, p.TenantDB, p.Pool, p.Roles.Writeonly, p.Roles.Readonly, p.Roles.Dual, p.Suspended,
		p.MaxConcurrentPerNode, minN, maxN, string(cohorts), ms(now), ms(now))
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return store.ErrConflict
		}
		return err
	}
	p.Version, p.CreatedAt, p.UpdatedAt = 1, fromMs(ms(now)), fromMs(ms(now))
	return nil
}

func (t *tx) UpdatePool(p *pool.Pool, now time.Time) error {
	cohorts, _ := json.Marshal(nonNil(p.Cohorts))
	minN, maxN := bandArgs(p.Band)
	res, err := t.q.ExecContext(t.ctx, `UPDATE pools SET writeonly = ?, readonly = ?, dual = ?, suspended = ?,
		max_concurrent_per_node = ?, min_nodes = ?, max_nodes = ?, cohorts = ?, version = version + 1, updated_at = ?
		WHERE tenant = ? AND tenant_db = ? AND pool = ? AND version = ?`,
		p.Roles.Writeonly, p.Roles.Readonly, p.Roles.Dual, p.Suspended, p.MaxConcurrentPerNode, minN, maxN,
		string(cohorts), ms(now), p.Tenant, p.TenantDB, p.Pool, p.Version)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrConflict
	}
	p.Version++
	p.UpdatedAt = fromMs(ms(now))
	return nil
}

func (t *tx) DeletePool(k pool.Key) error {
	res, err := t.q.ExecContext(t.ctx, `DELETE FROM pools WHERE tenant = ? AND tenant_db = ? AND pool = ?`, k.Tenant, k.TenantDB, k.Pool)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrNotFound
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
	_, err = t.q.ExecContext(t.ctx, `INSERT INTO audit (at, actor, action, tenant, target, detail) VALUES (?, ?, ?, ?, ?, ?)`,
		ms(a.At), a.Actor, a.Action, a.Tenant, a.Target, string(detail))
	return err
}
