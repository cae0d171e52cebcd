package apiserver

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
	Flushed  int  // bucket rows written
	Pools    int  // banded pools decided on
	Actions  int  // scale actions that took effect
	Failures int  // scale actions that failed
	Skipped  int  // actions not taken: the pool changed meanwhile, or leadership was lost
	Leader   bool // this replica decided
	Duration time.Duration
	Err      error
}

// swept is what the last sweep saw and decided for one pool. It holds no
// pointer, so a sweep's 100k of them cost the garbage collector nothing.
type swept struct {
	Decision   qodengine.Decision
	Unroutable int32
	Size       int32
	Acted      bool
}

// sweepResult is one sweep's decisions, kept for the status endpoint and the
// metrics until the next sweep replaces it: pools[i] is the decision for
// view[i]. The index by key is built on first use, so a sweep that nobody
// asks about builds none.
type sweepResult struct {
	at     time.Time
	view   []store.SweepRow
	pools  []swept
	errors map[int]string // why an action failed, by position
	once   sync.Once
	index  map[pool.Key]int
}

func (r *sweepResult) find(k pool.Key) (*swept, string) {
	r.once.Do(func() {
		r.index = make(map[pool.Key]int, len(r.view))
		for i := range r.view {
			r.index[r.view[i].Key] = i
		}
	})
	if i, ok := r.index[k]; ok {
		return &r.pools[i], r.errors[i]
	}
	return nil, ""
}

// sweeper holds the last sweep's result; it is replaced whole at the end of a
// sweep, under a lock held only for the swap.
type sweeper struct {
	mu   sync.Mutex
	last *sweepResult
	run  sync.Mutex // one sweep at a time
}

func newSweeper() *sweeper { return &sweeper{last: &sweepResult{}} }

func (w *sweeper) result() *sweepResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// get returns the pool's last decision (nil: not in the last sweep), why
// its action failed if it did, and when the last sweep ran.
func (w *sweeper) get(k pool.Key) (*swept, string, time.Time) {
	r := w.result()
	sw, actionErr := r.find(k)
	return sw, actionErr, r.at
}

// nextSweep is the first sweep time after now: sweeps run at whole multiples
// of the period since the epoch, so replicas agree on them.
func nextSweep(now time.Time, period time.Duration) time.Time {
	return now.Truncate(period).Add(period)
}

// Leader says whether this replica makes the sweep's decisions. Several
// replicas on one database all flush their load; only the leader decides.
type Leader interface {
	// Leading is asked before every decision pass and every action. It
	// must answer false as soon as leadership may have been lost.
	Leading(ctx context.Context) bool
}

// DefaultFlushGrace is how long a leader waits after a sweep instant before
// it reads the window, so that every replica's flush of the minute that
// just closed has landed.
const DefaultFlushGrace = 5 * time.Second

// RunSweeps runs the sweep every sweepSeconds until ctx ends. With a Leader,
// every replica flushes at the sweep instant, and the leader decides
// FlushGrace later.
func (s *Server) RunSweeps(ctx context.Context) error {
	period := time.Duration(s.autoscale.SweepSeconds) * time.Second
	for {
		now := s.clock.Now()
		var at time.Time
		select {
		case <-ctx.Done():
			return ctx.Err()
		case at = <-s.clock.After(nextSweep(now, period).Sub(now)):
		}
		if s.leader == nil {
			s.Sweep(ctx, at)
			continue
		}
		s.sweeper.run.Lock()
		rep := SweepReport{At: at}
		start := time.Now()
		s.flushPhase(ctx, at, &rep)
		select {
		case <-ctx.Done():
			s.sweeper.run.Unlock()
			return ctx.Err()
		case <-s.clock.After(s.flushGrace):
		}
		rep.Leader = s.leader.Leading(ctx)
		s.leading.Store(rep.Leader)
		if rep.Leader {
			s.decidePhase(ctx, at, &rep)
		}
		s.sweepDone(&rep, start)
		s.sweeper.run.Unlock()
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

// Sweep runs one sweep at now as a single replica: flush, purge, then (when
// enabled) decide for every banded pool and act through the mutation gate.
func (s *Server) Sweep(ctx context.Context, now time.Time) SweepReport {
	s.sweeper.run.Lock()
	defer s.sweeper.run.Unlock()
	start := time.Now()
	rep := SweepReport{At: now, Leader: true}
	s.flushPhase(ctx, now, &rep)
	s.decidePhase(ctx, now, &rep)
	s.sweepDone(&rep, start)
	return rep
}

func (s *Server) sweepDone(rep *SweepReport, start time.Time) {
	rep.Duration = time.Since(start)
	s.metrics.sweepDone(*rep)
	if s.onSweep != nil {
		s.onSweep(*rep)
	}
}

// flushPhase writes this replica's closed minutes and purges old rows.
func (s *Server) flushPhase(ctx context.Context, now time.Time, rep *SweepReport) {
	n, err := s.FlushLoad(ctx, now)
	rep.Flushed = n
	if err != nil {
		s.log.Warn("autoscale: load flush failed; the buckets are kept for the next sweep", "err", err)
		rep.Err = err
	}
	if _, err := s.store.PurgeLoad(ctx, now.Unix()/60-LoadRetentionMinutes); err != nil {
		s.log.Warn("autoscale: purging old load rows failed", "err", err)
	}
}

// decidePhase decides for every banded pool and acts.
func (s *Server) decidePhase(ctx context.Context, now time.Time, rep *SweepReport) {
	if !s.autoscale.Enabled {
		return
	}
	first, last := qodengine.Window(now, s.autoscale.WindowMinutes)
	view, err := s.store.SweepView(ctx, first, last)
	if err != nil {
		s.log.Error("autoscale: reading pools for the sweep failed; no pool decided this sweep", "err", err)
		rep.Err = err
		return
	}
	rep.Pools = len(view)
	settings := s.autoscale
	result := &sweepResult{at: now, view: view, errors: map[int]string{}}
	var moved []int
	result.pools, moved = decide(&settings, view, s.nodes.Unroutable(), now)
	var changed []store.StateRow
	for _, i := range moved {
		rec, row := &result.pools[i], &view[i]
		if !rec.Decision.Acts() {
			changed = append(changed, row.StateRow())
			continue
		}
		if s.leader != nil && !s.leader.Leading(ctx) {
			// Leadership lost mid-sweep: another replica may act now.
			result.errors[i] = "leadership lost before acting"
			rep.Skipped++
			continue
		}
		if failed := s.act(ctx, now, row, rec, rep); failed != "" {
			result.errors[i] = failed
			if failed != errPoolMoved.Error() {
				changed = append(changed, row.StateRow())
			}
		}
	}
	if skipped, err := s.store.SaveAutoscaleStates(ctx, changed); err != nil {
		s.log.Error("autoscale: saving pool states failed; streaks of this sweep are lost", "err", err)
		rep.Err = err
	} else if skipped > 0 {
		s.log.Debug("autoscale: states changed by a person during the sweep were kept", "pools", skipped)
	}
	s.sweeper.mu.Lock()
	s.sweeper.last = result
	s.sweeper.mu.Unlock()
}

// decide is the sweep's decision pass: the engine over every banded pool of
// the view, split over the available cores, with no lock held. Each pool's
// new state is written into its view row; moved lists, in order, the pools
// whose state changed or that are to act.
func decide(settings *qodengine.Settings, view []store.SweepRow, unroutable map[pool.Key]int, now time.Time) (out []swept, moved []int) {
	out = make([]swept, len(view))
	parts := min(runtime.GOMAXPROCS(0), max(1, len(view)/decideChunk))
	if parts == 1 {
		return out, decideRange(settings, view, out, 0, len(view), unroutable, now, nil)
	}
	movedBy := make([][]int, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := len(view)*p/parts, len(view)*(p+1)/parts
		wg.Go(func() { movedBy[p] = decideRange(settings, view, out, lo, hi, unroutable, now, nil) })
	}
	wg.Wait()
	for _, m := range movedBy {
		moved = append(moved, m...)
	}
	return out, moved
}

// decideChunk is the fewest pools worth a goroutine of their own.
const decideChunk = 4096

func decideRange(settings *qodengine.Settings, view []store.SweepRow, out []swept, lo, hi int,
	unroutable map[pool.Key]int, now time.Time, moved []int) []int {
	for i := lo; i < hi; i++ {
		row := &view[i]
		obs := qodengine.Observation{Band: row.Band, Suspended: row.Suspended,
			Writeonly: row.Roles.Writeonly, Readonly: row.Roles.Readonly, Dual: row.Roles.Dual,
			MaxConcurrentPerNode: row.MaxConcurrentPerNode,
			Demand:               qodengine.Demand(row.StatementMs, settings.WindowMinutes)}
		if len(unroutable) > 0 {
			obs.UnroutableReaders = unroutable[row.Key]
		}
		before := row.State
		d := qodengine.Step(settings, &row.State, &obs, now)
		out[i] = swept{Decision: d, Unroutable: int32(obs.UnroutableReaders), Size: int32(obs.Size())}
		if d.Acts() || row.State != before {
			moved = append(moved, i)
		}
	}
	return moved
}

// act takes one scale action through the same gate as a manual scale. It
// returns why the action did not take effect ("" when it did), and leaves in
// row.State the state to save for a failure.
func (s *Server) act(ctx context.Context, now time.Time, row *store.SweepRow, rec *swept, rep *SweepReport) string {
	k := row.Key
	d := rec.Decision
	st := row.State
	target := qodengine.Target(qodengine.Observation{Writeonly: row.Roles.Writeonly, Readonly: row.Roles.Readonly, Dual: row.Roles.Dual}, d)
	util := d.Utilization
	rule := d.Rule()
	_, err := s.mutate(ctx, k, mutation{
		actor: ActorAutoscale, action: "pool.scale", version: row.Version, reason: rule,
		change: func(p *pool.Pool) (map[string]any, error) {
			p.Roles = target
			return map[string]any{"direction": d.Direction.String(), "targetSize": d.To,
				"utilization": round2(util), "rule": rule}, nil
		},
		// The cooldowns run from the sweep instant the action was decided
		// at, not from when a leader got round to it.
		engine: func(qodengine.State, time.Time) qodengine.State { return qodengine.Succeeded(st, now) },
	})
	switch {
	case err == nil:
		rec.Acted, rec.Size = true, int32(d.To)
		rep.Actions++
		s.metrics.action(d.Direction)
		s.log.Info(fmt.Sprintf("autoscale: %s %s %d -> %d util=%.2f", k, d.Direction, d.From, d.To, util))
		return ""
	case errors.Is(err, errPoolMoved):
		// A person or another replica changed the pool after the sweep
		// read it; the next sweep decides on the new state.
		rep.Skipped++
		return errPoolMoved.Error()
	}
	next, backoff := qodengine.Failed(&s.autoscale, st)
	row.State = next
	reason := errorText(err)
	rep.Failures++
	s.metrics.failure(d.Direction)
	decision := fmt.Sprintf("failure %d of %d; the next sweep retries", next.Failures, qodengine.FailuresBeforeBackoff)
	if backoff {
		decision = fmt.Sprintf("%d failures in a row: skipping the pool for %d sweeps", qodengine.FailuresBeforeBackoff, next.BackoffLeft)
	}
	s.log.Warn(fmt.Sprintf("autoscale: %s %s %d -> %d failed: %s; %s", k, d.Direction, d.From, d.To, reason, decision))
	return reason
}

func errorText(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Error()
	}
	return err.Error()
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }
