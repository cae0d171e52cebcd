package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qodaperio/autoscale/internal/hookengine"
	"github.com/qodaperio/autoscale/internal/store"
)

const scalingCols = `id, org, hostname, declaration, secret_enc, source, state, announced_at, created_at, updated_at, version`

func scanScaling(sc pgx.Row) (*store.ScalingRecord, error) {
	var r store.ScalingRecord
	var decl, state string
	var announced, created, updated int64
	if err := sc.Scan(&r.ID, &r.Org, &r.Hostname, &decl, &r.SecretEnc, &r.Source, &state, &announced, &created, &updated, &r.Version); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(decl), &r.Declaration); err != nil {
		return nil, fmt.Errorf("postgres: scaling record %s: declaration: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(state), &r.State); err != nil {
		return nil, fmt.Errorf("postgres: scaling record %s: state: %w", r.ID, err)
	}
	r.AnnouncedAt, r.CreatedAt, r.UpdatedAt = fromMs(announced), fromMs(created), fromMs(updated)
	return &r, nil
}

func scalingKeys(ctx context.Context, q querier, r *store.ScalingRecord) error {
	rows, err := q.Query(ctx, `SELECT key_id FROM scaling_record_keys WHERE record_id = $1 ORDER BY key_id`, r.ID)
	if err != nil {
		return err
	}
	defer rows.Close()
	r.KeyIDs = []string{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		r.KeyIDs = append(r.KeyIDs, k)
	}
	return rows.Err()
}

func getScaling(ctx context.Context, q querier, idOrHostname string, lock bool) (*store.ScalingRecord, error) {
	query := `SELECT ` + scalingCols + ` FROM scaling_records WHERE id = $1 OR hostname = $2`
	if lock {
		query += ` FOR UPDATE`
	}
	r, err := scanScaling(q.QueryRow(ctx, query, idOrHostname, idOrHostname))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return r, scalingKeys(ctx, q, r)
}

func (s *Store) GetScaling(ctx context.Context, idOrHostname string) (*store.ScalingRecord, error) {
	return getScaling(ctx, s.pool, idOrHostname, false)
}

func (s *Store) PutScaling(ctx context.Context, r *store.ScalingRecord, keyID string, setSecret bool) (*store.ScalingRecord, bool, error) {
	var out *store.ScalingRecord
	created := false
	err := pgx.BeginFunc(ctx, s.pool, func(t pgx.Tx) error {
		// One declaration per hostname at a time, even a new one.
		if _, err := t.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, r.Hostname); err != nil {
			return err
		}
		decl, err := json.Marshal(r.Declaration)
		if err != nil {
			return err
		}
		now := ms(r.AnnouncedAt)
		old, err := getScaling(ctx, t, r.Hostname, true)
		switch {
		case errors.Is(err, store.ErrNotFound):
			old = nil
			st := r.State
			st.Armed = true
			state, _ := json.Marshal(st)
			if _, err := t.Exec(ctx, `INSERT INTO scaling_records (`+scalingCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 1)`,
				r.ID, r.Org, r.Hostname, string(decl), r.SecretEnc, r.Source, string(state), now, now, now); err != nil {
				return err
			}
			created = true
		case err != nil:
			return err
		case old.Org != r.Org:
			return store.ErrConflict
		default:
			state, _ := json.Marshal(hookengine.Rearmed(old.State))
			secret := old.SecretEnc
			if setSecret {
				secret = r.SecretEnc
			}
			if _, err := t.Exec(ctx, `UPDATE scaling_records SET declaration = $1, secret_enc = $2, source = $3, state = $4,
				announced_at = $5, updated_at = $6, version = version + 1 WHERE id = $7`,
				string(decl), secret, r.Source, string(state), now, now, old.ID); err != nil {
				return err
			}
		}
		id := r.ID
		if old != nil {
			id = old.ID
		}
		if _, err := t.Exec(ctx, `INSERT INTO scaling_record_keys (record_id, key_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, id, keyID); err != nil {
			return err
		}
		out, err = getScaling(ctx, t, id, false)
		return err
	})
	return out, created, err
}

func (s *Store) ListScaling(ctx context.Context, org string, all bool) ([]store.ScalingRecord, error) {
	query, args := `SELECT `+scalingCols+` FROM scaling_records`, []any{}
	if !all {
		query += ` WHERE org = $1`
		args = append(args, org)
	}
	rows, err := s.pool.Query(ctx, query+` ORDER BY hostname`, args...)
	if err != nil {
		return nil, err
	}
	out := []store.ScalingRecord{}
	for rows.Next() {
		r, err := scanScaling(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, *r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		if err := scalingKeys(ctx, s.pool, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) DeleteScaling(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM scaling_records WHERE id = $1`, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

func (s *Store) SaveScalingState(ctx context.Context, id string, st hookengine.State, version int64) error {
	state, _ := json.Marshal(st)
	tag, err := s.pool.Exec(ctx, `UPDATE scaling_records SET state = $1, version = version + 1 WHERE id = $2 AND version = $3`, string(state), id, version)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrConflict
	}
	return nil
}

func (s *Store) PruneScaling(ctx context.Context, now time.Time, ttl time.Duration) ([]string, error) {
	rows, err := s.pool.Query(ctx, `DELETE FROM scaling_records r
		WHERE NOT EXISTS (SELECT 1 FROM scaling_record_keys rk JOIN api_keys k ON k.id = rk.key_id
			WHERE rk.record_id = r.id AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > $1))
		OR (r.source = 'heartbeat' AND r.announced_at < $2)
		RETURNING hostname`, ms(now), ms(now.Add(-ttl)))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
