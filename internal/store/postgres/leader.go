package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// SweepLock is the advisory lock key the QoD sweep's leader holds.
const SweepLock int64 = 0x716f645f7377 // "qod_sw"

// Leader holds an advisory lock on a connection of its own, outside the
// pool: PostgreSQL releases the lock the moment that connection ends, so a
// replica that dies or is cut off frees leadership for the next one.
type Leader struct {
	s    *Store
	key  int64
	mu   sync.Mutex
	conn *pgx.Conn // non-nil while this replica holds the lock
}

// NewLeader returns a leader election on key, idle until first asked.
func (s *Store) NewLeader(key int64) *Leader { return &Leader{s: s, key: key} }

// checkTimeout bounds each leadership check: a leader that cannot confirm
// its connection within it stops leading.
const checkTimeout = 2 * time.Second

// Leading reports whether this replica holds the lock now. A holder checks
// its connection first and gives up leadership on any error, before another
// replica can have taken the lock; a non-holder tries to take it.
func (l *Leader) Leading(ctx context.Context) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if l.conn != nil {
		var held bool
		err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
			AND pid = pg_backend_pid() AND objid = ($1::bigint & 4294967295)::oid AND granted)`, l.key).Scan(&held)
		if err == nil && held {
			return true
		}
		l.drop()
		return false
	}
	conn, err := pgx.ConnectConfig(ctx, l.s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, l.key).Scan(&got); err != nil || !got {
		conn.Close(context.Background())
		return false
	}
	l.conn = conn
	return true
}

func (l *Leader) drop() {
	if l.conn != nil {
		l.conn.Close(context.Background())
		l.conn = nil
	}
}

// PID is the server process behind the leader's connection (0 when not
// leading), so that tests and operators can find it in pg_stat_activity.
func (l *Leader) PID() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return 0
	}
	return l.conn.PgConn().PID()
}

// Close gives up leadership.
func (l *Leader) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop()
}
