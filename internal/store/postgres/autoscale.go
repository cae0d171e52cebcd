package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/store"
)

const stateCols = `out_streak, in_streak, failures, backoff_left, last_action, last_resume, version`

func autoscaleState(ctx context.Context, q querier, k pool.Key) (store.StateRow, error) {
	r := store.StateRow{Key: k}
	var la, lr *int64
	st := &r.State
	err := q.QueryRow(ctx, `SELECT `+stateCols+` FROM qodstate_autoscale WHERE tenant = $1 AND tenant_db = $2 AND pool = $3`,
		k.Tenant, k.TenantDB, k.Pool).Scan(&st.OutStreak, &st.InStreak, &st.Failures, &st.BackoffLeft, &la, &lr, &r.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil
	}
	st.LastAction, st.LastResume = timeOf(la), timeOf(lr)
	return r, err
}

func (s *Store) AutoscaleState(ctx context.Context, k pool.Key) (store.StateRow, error) {
	return autoscaleState(ctx, s.pool, k)
}

func (t *tx) AutoscaleState(k pool.Key) (store.StateRow, error) {
	return autoscaleState(t.ctx, t.tx, k)
}

func stateValues(r store.StateRow) []any {
	st := r.State
	return []any{r.Key.Tenant, r.Key.TenantDB, r.Key.Pool, st.OutStreak, st.InStreak, st.Failures, st.BackoffLeft,
		nullTime(st.LastAction), nullTime(st.LastResume)}
}

func (t *tx) SetAutoscaleState(r store.StateRow) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO qodstate_autoscale (tenant, tenant_db, pool, `+stateCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1)
		ON CONFLICT (tenant, tenant_db, pool) DO UPDATE SET out_streak = excluded.out_streak,
			in_streak = excluded.in_streak, failures = excluded.failures, backoff_left = excluded.backoff_left,
			last_action = excluded.last_action, last_resume = excluded.last_resume, version = qodstate_autoscale.version + 1`,
		stateValues(r)...)
	return err
}

// SaveAutoscaleStates copies the states into a temporary table, then applies
// them with one UPDATE ... FROM (rows at the version the sweep read) and one
// INSERT ... SELECT (pools with no row yet).
func (s *Store) SaveAutoscaleStates(ctx context.Context, rows []store.StateRow) (int, error) {
	if len(rows) == 0 {
		return 0, nil
	}
	var applied int64
	err := pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		if _, err := t.Exec(ctx, `CREATE TEMP TABLE sweep_states (
			tenant TEXT, tenant_db TEXT, pool TEXT, out_streak INTEGER, in_streak INTEGER, failures INTEGER,
			backoff_left INTEGER, last_action BIGINT, last_resume BIGINT, version BIGINT) ON COMMIT DROP`); err != nil {
			return err
		}
		_, err := t.CopyFrom(ctx, pgx.Identifier{"sweep_states"},
			[]string{"tenant", "tenant_db", "pool", "out_streak", "in_streak", "failures", "backoff_left", "last_action", "last_resume", "version"},
			pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
				return append(stateValues(rows[i]), rows[i].Version), nil
			}))
		if err != nil {
			return err
		}
		tag, err := t.Exec(ctx, `UPDATE qodstate_autoscale AS a SET out_streak = s.out_streak,
				in_streak = s.in_streak, failures = s.failures, backoff_left = s.backoff_left,
				last_action = s.last_action, last_resume = s.last_resume, version = a.version + 1
			FROM sweep_states AS s
			WHERE s.version > 0 AND a.tenant = s.tenant AND a.tenant_db = s.tenant_db AND a.pool = s.pool AND a.version = s.version`)
		if err != nil {
			return err
		}
		applied = tag.RowsAffected()
		tag, err = t.Exec(ctx, `INSERT INTO qodstate_autoscale (tenant, tenant_db, pool, `+stateCols+`)
			SELECT tenant, tenant_db, pool, out_streak, in_streak, failures, backoff_left, last_action, last_resume, 1
			FROM sweep_states WHERE version = 0
			ON CONFLICT DO NOTHING`)
		if err != nil {
			return err
		}
		applied += tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, err
	}
	return len(rows) - int(applied), nil
}

// FlushLoad copies the rows into a temporary table and adds them to
// qodstate_pool_load with one INSERT ... SELECT ... ON CONFLICT: several
// times faster than batches of row inserts. The rows are sorted in key order
// first (the table is written page by page) and rows for the same minute and
// pool merged, since one statement may not update a row twice.
func (s *Store) FlushLoad(ctx context.Context, rows []store.LoadRow) error {
	if len(rows) == 0 {
		return nil
	}
	rows = store.SortLoadRows(rows)
	return pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		if _, err := t.Exec(ctx, `CREATE TEMP TABLE load_flush (tenant TEXT, tenant_db TEXT, pool TEXT,
			minute BIGINT, statement_ms BIGINT, statements BIGINT) ON COMMIT DROP`); err != nil {
			return err
		}
		_, err := t.CopyFrom(ctx, pgx.Identifier{"load_flush"},
			[]string{"tenant", "tenant_db", "pool", "minute", "statement_ms", "statements"},
			pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
				r := &rows[i]
				return []any{r.Key.Tenant, r.Key.TenantDB, r.Key.Pool, r.Minute, r.StatementMs, r.Statements}, nil
			}))
		if err != nil {
			return fmt.Errorf("postgres: flush load: %w", err)
		}
		_, err = t.Exec(ctx, `INSERT INTO qodstate_pool_load AS l (tenant, tenant_db, pool, minute, statement_ms, statements)
			SELECT tenant, tenant_db, pool, minute, statement_ms, statements FROM load_flush
			ON CONFLICT (minute, tenant, tenant_db, pool) DO UPDATE SET
				statement_ms = l.statement_ms + excluded.statement_ms, statements = l.statements + excluded.statements`)
		if err != nil {
			return fmt.Errorf("postgres: flush load: %w", err)
		}
		store.Failpoint("flush")
		return nil
	})
}

func (s *Store) PurgeLoad(ctx context.Context, before int64) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM qodstate_pool_load WHERE minute < $1`, before)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (s *Store) PoolLoad(ctx context.Context, k pool.Key, first, last int64) (int64, error) {
	var sum int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(statement_ms), 0)::BIGINT FROM qodstate_pool_load
		WHERE minute BETWEEN $4 AND $5 AND tenant = $1 AND tenant_db = $2 AND pool = $3`,
		k.Tenant, k.TenantDB, k.Pool, first, last).Scan(&sum)
	return sum, err
}

// SweepView is one query: the banded pools, their state, and the window's
// sums from one range scan of the load table's key, joined by PostgreSQL.
func (s *Store) SweepView(ctx context.Context, first, last int64) ([]store.SweepRow, error) {
	rows, err := s.pool.Query(ctx, `WITH w AS (
			SELECT tenant, tenant_db, pool, SUM(statement_ms)::BIGINT AS ms FROM qodstate_pool_load
			WHERE minute BETWEEN $1 AND $2 GROUP BY tenant, tenant_db, pool)
		SELECT p.tenant, p.tenant_db, p.pool, p.writeonly, p.readonly, p.dual,
			p.suspended, p.max_concurrent_per_node, p.min_nodes, p.max_nodes, p.version,
			COALESCE(a.out_streak, 0), COALESCE(a.in_streak, 0), COALESCE(a.failures, 0), COALESCE(a.backoff_left, 0),
			a.last_action, a.last_resume, COALESCE(a.version, 0), COALESCE(w.ms, 0)
		FROM pools p
		LEFT JOIN qodstate_autoscale a USING (tenant, tenant_db, pool)
		LEFT JOIN w USING (tenant, tenant_db, pool)
		WHERE p.min_nodes IS NOT NULL AND p.max_nodes IS NOT NULL`, first, last)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.SweepRow
	for rows.Next() {
		var r store.SweepRow
		var la, lr *int64
		st := &r.State
		if err := rows.Scan(&r.Key.Tenant, &r.Key.TenantDB, &r.Key.Pool, &r.Roles.Writeonly, &r.Roles.Readonly, &r.Roles.Dual,
			&r.Suspended, &r.MaxConcurrentPerNode, &r.Band.Min, &r.Band.Max, &r.Version,
			&st.OutStreak, &st.InStreak, &st.Failures, &st.BackoffLeft, &la, &lr, &r.StateVersion, &r.StatementMs); err != nil {
			return nil, err
		}
		st.LastAction, st.LastResume = timeOf(la), timeOf(lr)
		out = append(out, r)
	}
	return out, rows.Err()
}
