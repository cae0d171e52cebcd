package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/qodengine"
	"github.com/qodaperio/autoscale/internal/qodload"
	"github.com/qodaperio/autoscale/internal/store"
)

// ActorAutoscale is the audit actor of the sweep's actions.
const ActorAutoscale = "autoscale"

// ActorWake is the audit actor of a resume caused by a statement arriving
// for a suspended pool.
const ActorWake = "autoscale-wake"

// LoadRetentionMinutes is how long load rows are kept.
const LoadRetentionMinutes = 60

// SweepReport is what one sweep did.
type SweepReport struct {
	At       time.Time
	Flushed  int // bucket rows written
	Pools    int // banded pools decided on
	Actions  int // scale actions that took effect
	Failures int // scale actions that failed
	Skipped  int // actions not taken because the pool changed meanwhile
	Duration time.Duration
	Err      error
}

// swept is what the last sweep saw and decided for one pool.
type swept struct {
	At          time.Time
	Decision    qodengine.Decision
	Unroutable  int
	Acted       bool
	ActionError string
	Size        int
}

// sweeper keeps the last sweep's decisions for the status endpoint and the
// metrics. The map is replaced whole at the end of a sweep, under a lock held
// only for the swap.
type sweeper struct {
	mu     sync.Mutex
	last   map[pool.Key]*swept
	lastAt time.Time
	run    sync.Mutex // one sweep at a time
}

func newSweeper() *sweeper { return &sweeper{last: map[pool.Key]*swept{}} }

func (w *sweeper) get(k pool.Key) (*swept, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[k], w.lastAt
}

func (w *sweeper) forget(k pool.Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, k)
}

func (w *sweeper) snapshot() map[pool.Key]*swept {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// nextSweep is the first sweep time after now: sweeps run at whole multiples
// of the period since the epoch, so replicas agree on them.
func nextSweep(now time.Time, period time.Duration) time.Time {
	return now.Truncate(period).Add(period)
}

// RunSweeps runs the sweep every sweepSeconds until ctx ends.
func (s *Server) RunSweeps(ctx context.Context) error {
	period := time.Duration(s.autoscale.SweepSeconds) * time.Second
	for {
		now := s.clock.Now()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case at := <-s.clock.After(nextSweep(now, period).Sub(now)):
			s.Sweep(ctx, at)
		}
	}
}

// FlushLoad writes the recorder's closed minutes to the store. A failed flush
// hands the buckets back for the next one.
func (s *Server) FlushLoad(ctx context.Context, now time.Time) (int, error) {
	var rows []store.LoadRow
	err := s.load.Drain(now, func(k pool.Key, closed []qodload.Bucket) error {
		for _, b := range closed {
			rows = append(rows, store.LoadRow{Key: k, Minute: b.Minute, StatementMs: b.StatementMs, Statements: b.Statements})
		}
		return nil
	})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	if err := s.store.FlushLoad(ctx, rows); err != nil {
		// Give them back: nothing recorded is lost to a failed flush.
		for _, r := range rows {
			s.load.Return(r.Key, []qodload.Bucket{{Minute: r.Minute, StatementMs: r.StatementMs, Statements: r.Statements}})
		}
		return 0, err
	}
	return len(rows), nil
}

// Sweep runs one sweep at now: flush, purge, then (when enabled) decide for
// every banded pool and act through the mutation gate.
func (s *Server) Sweep(ctx context.Context, now time.Time) SweepReport {
	s.sweeper.run.Lock()
	defer s.sweeper.run.Unlock()
	start := time.Now()
	rep := SweepReport{At: now}
	defer func() {
		rep.Duration = time.Since(start)
		s.metrics.sweepDone(rep)
		if s.onSweep != nil {
			s.onSweep(rep)
		}
	}()

	n, err := s.FlushLoad(ctx, now)
	rep.Flushed = n
	if err != nil {
		s.log.Warn("autoscale: load flush failed; the buckets are kept for the next sweep", "err", err)
		rep.Err = err
	}
	if _, err := s.store.PurgeLoad(ctx, now.Unix()/60-LoadRetentionMinutes); err != nil {
		s.log.Warn("autoscale: purging old load rows failed", "err", err)
	}
	if !s.autoscale.Enabled {
		return rep
	}
	first, last := qodengine.Window(now, s.autoscale.WindowMinutes)
	view, err := s.store.SweepView(ctx, first, last)
	if err != nil {
		s.log.Error("autoscale: reading pools for the sweep failed; no pool decided this sweep", "err", err)
		rep.Err = err
		return rep
	}
	rep.Pools = len(view)
	settings := s.autoscale
	decided := make(map[pool.Key]*swept, len(view))
	var changed []store.StateRow
	for i := range view {
		row := &view[i]
		p := &row.Pool
		obs := qodengine.Observation{Band: *p.Band, Suspended: p.Suspended,
			Writeonly: p.Roles.Writeonly, Readonly: p.Roles.Readonly, Dual: p.Roles.Dual,
			MaxConcurrentPerNode: p.MaxConcurrentPerNode, UnroutableReaders: s.nodes.UnroutableReaders(p.Key),
			Demand: qodengine.Demand(row.StatementMs, settings.WindowMinutes)}
		st := row.State.State
		d := qodengine.Step(&settings, &st, &obs, now)
		rec := &swept{At: now, Decision: d, Unroutable: obs.UnroutableReaders, Size: obs.Size()}
		decided[p.Key] = rec
		if d.Acts() {
			s.act(ctx, row, &obs, d, st, rec, &rep, &changed)
			continue
		}
		if st != row.State.State {
			changed = append(changed, store.StateRow{Key: p.Key, State: st, Version: row.State.Version})
		}
	}
	if skipped, err := s.store.SaveAutoscaleStates(ctx, changed); err != nil {
		s.log.Error("autoscale: saving pool states failed; streaks of this sweep are lost", "err", err)
		rep.Err = err
	} else if skipped > 0 {
		s.log.Debug("autoscale: states changed by a person during the sweep were kept", "pools", skipped)
	}
	s.sweeper.mu.Lock()
	s.sweeper.last, s.sweeper.lastAt = decided, now
	s.sweeper.mu.Unlock()
	return rep
}

// act takes one scale action through the same gate as a manual scale.
func (s *Server) act(ctx context.Context, row *store.SweepRow, obs *qodengine.Observation, d qodengine.Decision,
	st qodengine.State, rec *swept, rep *SweepReport, changed *[]store.StateRow) {
	k := row.Pool.Key
	target := qodengine.Target(*obs, d)
	util := d.Utilization
	rule := d.Rule()
	_, err := s.mutate(ctx, k, mutation{
		actor: ActorAutoscale, action: "pool.scale", version: row.Pool.Version, reason: rule,
		change: func(p *pool.Pool) (map[string]any, error) {
			p.Roles = target
			return map[string]any{"direction": string(d.Direction), "targetSize": d.To,
				"utilization": round2(util), "rule": rule}, nil
		},
		engine: func(_ qodengine.State, now time.Time) qodengine.State { return qodengine.Succeeded(st, now) },
	})
	switch {
	case err == nil:
		rec.Acted, rec.Size = true, d.To
		rep.Actions++
		s.metrics.action(d.Direction)
		s.log.Info(fmt.Sprintf("autoscale: %s %s %d -> %d util=%.2f", k, d.Direction, d.From, d.To, util))
	case errors.Is(err, errPoolMoved):
		// A person or another replica changed the pool after the sweep
		// read it; the next sweep decides on the new state.
		rec.ActionError = errPoolMoved.Error()
		rep.Skipped++
	default:
		next, backoff := qodengine.Failed(&s.autoscale, st)
		*changed = append(*changed, store.StateRow{Key: k, State: next, Version: row.State.Version})
		rec.ActionError = errorText(err)
		rep.Failures++
		s.metrics.failure(d.Direction)
		decision := fmt.Sprintf("failure %d of %d; the next sweep retries", next.Failures, qodengine.FailuresBeforeBackoff)
		if backoff {
			decision = fmt.Sprintf("%d failures in a row: skipping the pool for %d sweeps", qodengine.FailuresBeforeBackoff, next.BackoffLeft)
		}
		s.log.Warn(fmt.Sprintf("autoscale: %s %s %d -> %d failed: %s; %s", k, d.Direction, d.From, d.To, rec.ActionError, decision))
	}
}

func errorText(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Error()
	}
	return err.Error()
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }
