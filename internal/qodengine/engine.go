// Package qodengine is the QoD autoscale decision, as a pure function: the
// pool's autoscale state, what the sweep observed and the time go in; the
// decision and the next state come out. No clocks, goroutines or I/O live
// here, so the server's sweep loop, the simulator and the tests all drive
// the very same code.
package qodengine

import (
	"fmt"
	"math"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/pool"
)

// Settings are the manager-wide autoscale settings.
type Settings = api.AutoscaleConfig

// FailuresBeforeBackoff is how many failed actions in a row send a pool into
// failure backoff.
const FailuresBeforeBackoff = 3

// State is what the engine remembers about one pool between sweeps. The
// zero value is a pool never acted on: LastAction and LastResume at minus
// infinity.
type State struct {
	OutStreak   int       `json:"outStreak"`
	InStreak    int       `json:"inStreak"`
	Failures    int       `json:"failures"`
	BackoffLeft int       `json:"backoffSweepsLeft"`
	LastAction  time.Time `json:"lastAction"`
	LastResume  time.Time `json:"lastResume"`
}

// Observation is what a sweep sees of one banded pool: its desired role
// distribution (not a live census), its band, and the demand over the window.
type Observation struct {
	Band                 band.Band
	Suspended            bool
	Writeonly            int
	Readonly             int
	Dual                 int
	MaxConcurrentPerNode int
	// UnroutableReaders are read-capable nodes the node backend reports as
	// not routable (crashed, draining); they carry no capacity.
	UnroutableReaders int
	// Demand is the average concurrency over the window: statement time in
	// the window divided by the window's full length.
	Demand float64
}

// Size is the pool's node count; 0 when suspended.
func (o Observation) Size() int {
	if o.Suspended {
		return 0
	}
	return o.Writeonly + o.Readonly + o.Dual
}

// Direction of an action.
type Direction string

const (
	None Direction = ""
	Out  Direction = "out"
	In   Direction = "in"
)

// Decision is what one sweep decided for one pool, and why.
type Decision struct {
	Direction Direction `json:"direction,omitempty"`
	From      int       `json:"from"`
	To        int       `json:"to"`
	Demand    float64   `json:"demand"`
	Capacity  float64   `json:"capacity"`
	// Utilization is demand / capacity; NaN when capacity is unknown.
	Utilization float64 `json:"-"`
	// Rule is the rule that decided: why the pool moved, or what held it.
	Rule string `json:"rule"`
	// Cooldown left in each direction at the time of the sweep.
	OutCooldownLeft time.Duration `json:"-"`
	InCooldownLeft  time.Duration `json:"-"`
}

// Acts reports whether the decision is a scale action.
func (d Decision) Acts() bool { return d.Direction != None }

// Capacity is perNode * routable read-capable nodes; <= 0 means unknown.
func Capacity(s *Settings, o *Observation) float64 {
	perNode := o.MaxConcurrentPerNode
	if perNode <= 0 {
		perNode = s.AssumedConcurrencyPerNode
	}
	return float64(perNode) * float64(o.Readonly+o.Dual-o.UnroutableReaders)
}

// cooldownLeft is how much of d remains since since; 0 when none (a zero
// since is minus infinity).
func cooldownLeft(now, since time.Time, d time.Duration) time.Duration {
	if since.IsZero() {
		return 0
	}
	if left := since.Add(d).Sub(now); left > 0 {
		return left
	}
	return 0
}

func secs(d time.Duration) string { return fmt.Sprintf("%d s", int(math.Ceil(d.Seconds()))) }

// Decide runs one sweep's rules for one pool. It returns the decision and the
// state to keep; for an action, the state still has to learn its outcome
// through Succeeded or Failed.
func Decide(s *Settings, st State, o Observation, now time.Time) (Decision, State) {
	size := o.Size()
	d := Decision{From: size, To: size, Demand: o.Demand, Utilization: math.NaN()}
	outCooldown := time.Duration(s.ScaleOutCooldownSec) * time.Second
	inCooldown := time.Duration(s.ScaleInCooldownSec) * time.Second
	d.OutCooldownLeft = max(cooldownLeft(now, st.LastAction, outCooldown), cooldownLeft(now, st.LastResume, outCooldown))
	d.InCooldownLeft = cooldownLeft(now, st.LastAction, inCooldown)

	// 1. Suspended: autoscaling never touches the zero boundary.
	if o.Suspended {
		st.OutStreak, st.InStreak = 0, 0
		d.Rule = "suspended"
		return d, st
	}
	// 2. Failure backoff: sit this sweep out.
	if st.BackoffLeft > 0 {
		st.BackoffLeft--
		st.OutStreak, st.InStreak = 0, 0
		d.Rule = fmt.Sprintf("failure backoff: %d sweep(s) left after this one", st.BackoffLeft)
		return d, st
	}
	// 3. Unknown utilization.
	d.Capacity = Capacity(s, &o)
	if d.Capacity <= 0 {
		st.OutStreak, st.InStreak = 0, 0
		d.Rule = "capacity unknown: no routable read-capable node"
		return d, st
	}
	u := o.Demand / d.Capacity
	d.Utilization = u
	// 4. Streaks.
	switch {
	case u >= s.HighWatermark:
		st.OutStreak++
		st.InStreak = 0
	case u <= s.LowWatermark:
		st.InStreak++
		st.OutStreak = 0
	default:
		st.OutStreak, st.InStreak = 0, 0
		d.Rule = fmt.Sprintf("between watermarks (%.2f < %.2f < %.2f)", s.LowWatermark, u, s.HighWatermark)
		return d, st
	}
	// 5. Scale out.
	if st.OutStreak > 0 {
		switch {
		case st.OutStreak < s.OutStreak:
			d.Rule = fmt.Sprintf("busy: out streak %d/%d", st.OutStreak, s.OutStreak)
		case size >= o.Band.Max:
			d.Rule = fmt.Sprintf("at maxNodes %d", o.Band.Max)
		case d.OutCooldownLeft > 0:
			d.Rule = "in out cooldown: " + secs(d.OutCooldownLeft) + " left"
		default:
			d.Direction, d.To = Out, size+1
			d.Rule = fmt.Sprintf("utilization %.2f >= %.2f for %d sweeps", u, s.HighWatermark, st.OutStreak)
		}
		return d, st
	}
	// 6. Scale in.
	switch {
	case st.InStreak < s.InStreak:
		d.Rule = fmt.Sprintf("quiet: in streak %d/%d", st.InStreak, s.InStreak)
	case size <= o.Band.Min:
		d.Rule = fmt.Sprintf("at minNodes %d", o.Band.Min)
	case o.Readonly < 1:
		d.Rule = "no readonly node to remove"
	case o.Readonly+o.Dual < 2:
		d.Rule = "last reader: the last read-capable node is never removed"
	case d.InCooldownLeft > 0:
		d.Rule = "in in cooldown: " + secs(d.InCooldownLeft) + " left"
	default:
		d.Direction, d.To = In, size-1
		d.Rule = fmt.Sprintf("utilization %.2f <= %.2f for %d sweeps", u, s.LowWatermark, st.InStreak)
	}
	return d, st
}

// Succeeded records an action that took effect at now: the cooldowns start,
// the streaks and the failure count reset.
func Succeeded(st State, now time.Time) State {
	st.LastAction = now
	st.OutStreak, st.InStreak, st.Failures = 0, 0, 0
	return st
}

// Failed records an action that did not take effect. The streaks are kept so
// the next sweep retries; the third failure in a row starts failure backoff.
// It reports whether backoff started.
func Failed(s *Settings, st State) (State, bool) {
	st.Failures++
	if st.Failures >= FailuresBeforeBackoff {
		st.Failures = 0
		st.BackoffLeft = s.FailureBackoffSweeps
		return st, true
	}
	return st, false
}

// Resumed records a resume at now: the burst after a wake is not evidence of
// sustained demand, so the out cooldown starts.
func Resumed(st State, now time.Time) State {
	st.LastResume = now
	return st
}

// ManuallyScaled records a scale by a person: both streaks reset, no
// cooldown starts.
func ManuallyScaled(st State) State {
	st.OutStreak, st.InStreak = 0, 0
	return st
}

// Window is the range of whole minutes [first, last] a sweep at now reads:
// the windowMinutes closed minutes before the current one, counting minutes
// from the epoch.
func Window(now time.Time, windowMinutes int) (first, last int64) {
	m := now.Unix() / 60
	return m - int64(windowMinutes), m - 1
}

// Demand is the average concurrency that statementMs milliseconds of work
// imply over the full window, even when fewer minutes hold data.
func Demand(statementMs int64, windowMinutes int) float64 {
	return float64(statementMs) / 1000 / float64(windowMinutes*60)
}

// Target is the role distribution an action asks for: one readonly node more
// or less, writers untouched.
func Target(o Observation, d Decision) pool.Roles {
	r := pool.Roles{Writeonly: o.Writeonly, Readonly: o.Readonly, Dual: o.Dual}
	switch d.Direction {
	case Out:
		r.Readonly++
	case In:
		r.Readonly--
	}
	return r
}
