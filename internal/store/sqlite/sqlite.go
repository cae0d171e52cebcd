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
	// 2: the QoD load signal and the autoscale engine's state per pool.
	`CREATE TABLE qodstate_pool_load (
		tenant TEXT NOT NULL,
		tenant_db TEXT NOT NULL,
		pool TEXT NOT NULL,
		minute INTEGER NOT NULL,
		statement_ms INTEGER NOT NULL,
		statements INTEGER NOT NULL,
		PRIMARY KEY (minute, tenant, tenant_db, pool)
	) WITHOUT ROWID;
	CREATE TABLE qodstate_autoscale (
		tenant TEXT NOT NULL,
		tenant_db TEXT NOT NULL,
		pool TEXT NOT NULL,
		out_streak INTEGER NOT NULL,
		in_streak INTEGER NOT NULL,
		failures INTEGER NOT NULL,
		backoff_left INTEGER NOT NULL,
		last_action INTEGER,
		last_resume INTEGER,
		version INTEGER NOT NULL,
		PRIMARY KEY (tenant, tenant_db, pool)
	) WITHOUT ROWID;`,
	// 3: Aperio scaling records and the keys that armed them.
	`CREATE TABLE scaling_records (
		id TEXT PRIMARY KEY,
		org TEXT NOT NULL,
		hostname TEXT NOT NULL UNIQUE,
		declaration TEXT NOT NULL,
		secret_enc BLOB,
		source TEXT NOT NULL,
		state TEXT NOT NULL,
		announced_at INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		version INTEGER NOT NULL
	);
	CREATE INDEX scaling_records_org ON scaling_records (org, hostname);
	CREATE TABLE scaling_record_keys (
		record_id TEXT NOT NULL REFERENCES scaling_records (id) ON DELETE CASCADE,
		key_id TEXT NOT NULL,
		PRIMARY KEY (record_id, key_id)
	);`,
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

// Ready reports whether the file answers and has every migration.
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
		store.Failpoint(failpointOf(ctx))
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
	for _, table := range []string{"qodstate_autoscale", "qodstate_pool_load"} {
		if _, err := t.q.ExecContext(t.ctx, `DELETE FROM `+table+` WHERE tenant = ? AND tenant_db = ? AND pool = ?`, k.Tenant, k.TenantDB, k.Pool); err != nil {
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
	_, err = t.q.ExecContext(t.ctx, `INSERT INTO audit (at, actor, action, tenant, target, detail) VALUES (?, ?, ?, ?, ?, ?)`,
		ms(a.At), a.Actor, a.Action, a.Tenant, a.Target, string(detail))
	return err
}

// --- autoscale state and the load signal ---

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

func timeOf(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMs(v.Int64)
}

const stateCols = `out_streak, in_streak, failures, backoff_left, last_action, last_resume, version`

func autoscaleState(ctx context.Context, q querier, k pool.Key) (store.StateRow, error) {
	r := store.StateRow{Key: k}
	var la, lr sql.NullInt64
	st := &r.State
	err := q.QueryRowContext(ctx, `SELECT `+stateCols+` FROM qodstate_autoscale WHERE tenant = ? AND tenant_db = ? AND pool = ?`,
		k.Tenant, k.TenantDB, k.Pool).Scan(&st.OutStreak, &st.InStreak, &st.Failures, &st.BackoffLeft, &la, &lr, &r.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return r, nil
	}
	st.LastAction, st.LastResume = timeOf(la), timeOf(lr)
	return r, err
}

func (s *Store) AutoscaleState(ctx context.Context, k pool.Key) (store.StateRow, error) {
	return autoscaleState(ctx, s.reader(), k)
}

func (t *tx) AutoscaleState(k pool.Key) (store.StateRow, error) { return autoscaleState(t.ctx, t.q, k) }

const upsertState = `INSERT INTO qodstate_autoscale (tenant, tenant_db, pool, ` + stateCols + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
	ON CONFLICT (tenant, tenant_db, pool) DO UPDATE SET out_streak = excluded.out_streak,
		in_streak = excluded.in_streak, failures = excluded.failures, backoff_left = excluded.backoff_left,
		last_action = excluded.last_action, last_resume = excluded.last_resume, version = qodstate_autoscale.version + 1`

func stateArgs(r store.StateRow) []any {
	st := r.State
	return []any{r.Key.Tenant, r.Key.TenantDB, r.Key.Pool, st.OutStreak, st.InStreak, st.Failures, st.BackoffLeft,
		nullTime(st.LastAction), nullTime(st.LastResume)}
}

func (t *tx) SetAutoscaleState(r store.StateRow) error {
	_, err := t.q.ExecContext(t.ctx, upsertState, stateArgs(r)...)
	return err
}

// SaveAutoscaleStates writes each state only if its row is still at the
// version the sweep read (an absent row is version 0). The states go into a
// temporary table with multi-row inserts; one UPDATE ... FROM and one
// INSERT ... SELECT then apply them: 100k conditional updates one by one
// took seconds.
func (s *Store) SaveAutoscaleStates(ctx context.Context, rows []store.StateRow) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	total, applied := len(rows), int64(0)
	err := s.Mutate(ctx, func(stx store.Tx) error {
		t := stx.(*tx)
		// No key on the temporary table: rows are appended, and the
		// statements below probe the real table's key for each of them.
		if _, err := t.tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS sweep_states (
			tenant TEXT NOT NULL, tenant_db TEXT NOT NULL, pool TEXT NOT NULL,
			out_streak INTEGER NOT NULL, in_streak INTEGER NOT NULL, failures INTEGER NOT NULL,
			backoff_left INTEGER NOT NULL, last_action INTEGER, last_resume INTEGER, version INTEGER NOT NULL)`); err != nil {
			return err
		}
		if _, err := t.tx.ExecContext(ctx, `DELETE FROM temp.sweep_states`); err != nil {
			return err
		}
		const cols = 10
		args := make([]any, 0, cols*stateBatch)
		for len(rows) > 0 {
			n := min(len(rows), stateBatch)
			args = args[:0]
			for _, r := range rows[:n] {
				args = append(append(args, stateArgs(r)...), r.Version)
			}
			query := insertSweepStatesFull
			if n < stateBatch {
				query = valuesInsert(`INSERT INTO temp.sweep_states VALUES `, cols, n)
			}
			if _, err := t.q.ExecContext(ctx, query, args...); err != nil {
				return err
			}
			rows = rows[n:]
		}
		res, err := t.tx.ExecContext(ctx, `UPDATE qodstate_autoscale AS a SET out_streak = s.out_streak,
				in_streak = s.in_streak, failures = s.failures, backoff_left = s.backoff_left,
				last_action = s.last_action, last_resume = s.last_resume, version = a.version + 1
			FROM temp.sweep_states AS s
			WHERE s.version > 0 AND a.tenant = s.tenant AND a.tenant_db = s.tenant_db AND a.pool = s.pool AND a.version = s.version`)
		if err != nil {
			return err
		}
		updated, _ := res.RowsAffected()
		res, err = t.tx.ExecContext(ctx, `INSERT INTO qodstate_autoscale (tenant, tenant_db, pool, `+stateCols+`)
			SELECT tenant, tenant_db, pool, out_streak, in_streak, failures, backoff_left, last_action, last_resume, 1
			FROM temp.sweep_states WHERE version = 0
			ON CONFLICT DO NOTHING`)
		if err != nil {
			return err
		}
		inserted, _ := res.RowsAffected()
		applied = updated + inserted
		return nil
	})
	if err != nil {
		return 0, err
	}
	return total - int(applied), nil
}

// stateBatch is how many states one insert into the temporary table carries.
const stateBatch = 100

var insertSweepStatesFull = valuesInsert(`INSERT INTO temp.sweep_states VALUES `, 10, stateBatch)

// valuesInsert is prefix followed by n tuples of cols placeholders.
func valuesInsert(prefix string, cols, n int) string {
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", cols), ", ") + ")"
	var b strings.Builder
	b.WriteString(prefix)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tuple)
	}
	return b.String()
}

// loadBatch is how many rows one upsert statement carries: one statement
// call per row cost more in the driver than SQLite spent on the row.
const loadBatch = 200

func upsertLoad(rows int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO qodstate_pool_load (tenant, tenant_db, pool, minute, statement_ms, statements) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`(?, ?, ?, ?, ?, ?)`)
	}
	b.WriteString(` ON CONFLICT (minute, tenant, tenant_db, pool) DO UPDATE SET
		statement_ms = statement_ms + excluded.statement_ms, statements = statements + excluded.statements`)
	return b.String()
}

var upsertLoadFull = upsertLoad(loadBatch)

// FlushLoad adds rows through prepared multi-row upserts in one transaction.
func (s *Store) FlushLoad(ctx context.Context, rows []store.LoadRow) error {
	if len(rows) == 0 {
		return nil
	}
	// In key order, so that the b-tree is written page by page.
	rows = store.SortLoadRows(rows)
	ctx = context.WithValue(ctx, opKey{}, "flush")
	return s.Mutate(ctx, func(stx store.Tx) error {
		t := stx.(*tx)
		args := make([]any, 0, 6*loadBatch)
		for len(rows) > 0 {
			n := min(len(rows), loadBatch)
			query := upsertLoadFull
			if n < loadBatch {
				query = upsertLoad(n)
			}
			args = args[:0]
			for _, r := range rows[:n] {
				args = append(args, r.Key.Tenant, r.Key.TenantDB, r.Key.Pool, r.Minute, r.StatementMs, r.Statements)
			}
			if _, err := t.q.ExecContext(ctx, query, args...); err != nil {
				return fmt.Errorf("sqlite: flush load from %s minute %d: %w", rows[0].Key, rows[0].Minute, err)
			}
			rows = rows[n:]
		}
		return nil
	})
}

type opKey struct{}

// failpointOf names the transaction for store.Failpoint: SQLite's flush
// runs through Mutate.
func failpointOf(ctx context.Context) string {
	if op, ok := ctx.Value(opKey{}).(string); ok {
		return op
	}
	return "mutate"
}

func (s *Store) PurgeLoad(ctx context.Context, before int64) (int64, error) {
	res, err := s.writer().ExecContext(ctx, `DELETE FROM qodstate_pool_load WHERE minute < ?`, before)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s *Store) PoolLoad(ctx context.Context, k pool.Key, first, last int64) (int64, error) {
	if last < first {
		return 0, nil
	}
	// The key leads with the minute: an IN list turns the window into one
	// point lookup per minute instead of a scan of every pool's minutes.
	var in strings.Builder
	args := []any{k.Tenant, k.TenantDB, k.Pool}
	for m := first; m <= last && m-first < 24*60; m++ {
		if m > first {
			in.WriteByte(',')
		}
		in.WriteByte('?')
		args = append(args, m)
	}
	var sum int64
	err := s.reader().QueryRowContext(ctx, `SELECT COALESCE(SUM(statement_ms), 0) FROM qodstate_pool_load
		WHERE tenant = ? AND tenant_db = ? AND pool = ? AND minute IN (`+in.String()+`)`, args...).Scan(&sum)
	return sum, err
}

// SweepView reads the banded pools with their state, then adds the
// window's sums from one range scan of the load table's key (it leads with
// the minute). Summing here rather than in a GROUP BY spares SQLite a sort
// of every row in the window.
func (s *Store) SweepView(ctx context.Context, first, last int64) ([]store.SweepRow, error) {
	q := s.reader()
	rows, err := q.QueryContext(ctx, `SELECT p.tenant, p.tenant_db, p.pool, p.writeonly, p.readonly, p.dual,
			p.suspended, p.max_concurrent_per_node, p.min_nodes, p.max_nodes, p.version,
			COALESCE(a.out_streak, 0), COALESCE(a.in_streak, 0), COALESCE(a.failures, 0), COALESCE(a.backoff_left, 0),
			a.last_action, a.last_resume, COALESCE(a.version, 0)
		FROM pools p
		LEFT JOIN qodstate_autoscale a ON a.tenant = p.tenant AND a.tenant_db = p.tenant_db AND a.pool = p.pool
		WHERE p.min_nodes IS NOT NULL AND p.max_nodes IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.SweepRow
	for rows.Next() {
		var r store.SweepRow
		var la, lr sql.NullInt64
		st := &r.State
		if err := rows.Scan(&r.Key.Tenant, &r.Key.TenantDB, &r.Key.Pool, &r.Roles.Writeonly, &r.Roles.Readonly, &r.Roles.Dual,
			&r.Suspended, &r.MaxConcurrentPerNode, &r.Band.Min, &r.Band.Max, &r.Version,
			&st.OutStreak, &st.InStreak, &st.Failures, &st.BackoffLeft, &la, &lr, &r.StateVersion); err != nil {
			return nil, err
		}
		st.LastAction, st.LastResume = timeOf(la), timeOf(lr)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()

	index := make(map[string]int, len(out))
	for i := range out {
		index[out[i].Key.String()] = i
	}
	load, err := q.QueryContext(ctx, `SELECT tenant || '/' || tenant_db || '/' || pool, statement_ms
		FROM qodstate_pool_load WHERE minute BETWEEN ? AND ?`, first, last)
	if err != nil {
		return nil, err
	}
	defer load.Close()
	var id sql.RawBytes
	var ms int64
	for load.Next() {
		if err := load.Scan(&id, &ms); err != nil {
			return nil, err
		}
		if i, ok := index[string(id)]; ok {
			out[i].StatementMs += ms
		}
	}
	return out, load.Err()
}
