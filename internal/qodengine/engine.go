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

// Direction of an action. A small integer, not a string, so that a sweep's
// decisions hold no pointers for the garbage collector to scan.
type Direction uint8

const (
	None Direction = iota
	Out
	In
)

// String is "out", "in", or "" for no action.
func (d Direction) String() string {
	switch d {
	case Out:
		return "out"
	case In:
		return "in"
	}
	return ""
}

// Decision is what one sweep decided for one pool, and why.
type Decision struct {
	Direction Direction
	From      int
	To        int
	Demand    float64
	Capacity  float64
	// Utilization is demand / capacity; NaN when capacity is unknown.
	Utilization float64
	// Why names the rule that decided: why the pool moved, or what held it.
	// Rule renders it with its numbers; the sweep keeps only these fields so
	// that a pass over many pools formats nothing.
	Why Why
	// Streak and Need are the streak that counted and its target; Bound is
	// the band edge that held the pool; Low and High are the watermarks.
	Streak, Need, Bound int
	Low, High           float64
	BackoffLeft         int
	// Cooldown left in each direction at the time of the sweep.
	OutCooldownLeft time.Duration
	InCooldownLeft  time.Duration
}

// Why is the rule behind a decision.
type Why uint8

// The rules, in the order the engine tries them.
const (
	WhyNone Why = iota
	WhySuspended
	WhyBackoff
	WhyCapacityUnknown
	WhyBetweenWatermarks
	WhyOutStreak
	WhyAtMax
	WhyOutCooldown
	WhyScaleOut
	WhyInStreak
	WhyAtMin
	WhyNoReadonly
	WhyLastReader
	WhyInCooldown
	WhyScaleIn
	// WhyDisabled is set by the sweep, not the engine: the kill switch is off.
	WhyDisabled
)

var whyCodes = [...]string{"", "suspended", "failure_backoff", "capacity_unknown", "between_watermarks",
	"out_streak", "at_max_nodes", "out_cooldown", "scale_out", "in_streak", "at_min_nodes",
	"no_readonly", "last_reader", "in_cooldown", "scale_in", "disabled"}

// String is the rule's stable code, for metrics labels and JSON.
func (w Why) String() string {
	if int(w) < len(whyCodes) {
		return whyCodes[w]
	}
	return "unknown"
}

// Rule says in words why the pool moved or held still.
func (d Decision) Rule() string {
	switch d.Why {
	case WhySuspended:
		return "suspended"
	case WhyBackoff:
		return fmt.Sprintf("failure backoff: %d sweep(s) left after this one", d.BackoffLeft)
	case WhyCapacityUnknown:
		return "capacity unknown: no routable read-capable node"
	case WhyBetweenWatermarks:
		return fmt.Sprintf("between watermarks (%.2f < %.2f < %.2f)", d.Low, d.Utilization, d.High)
	case WhyOutStreak:
		return fmt.Sprintf("busy: out streak %d/%d", d.Streak, d.Need)
	case WhyAtMax:
		return fmt.Sprintf("at maxNodes %d", d.Bound)
	case WhyOutCooldown:
		return "in out cooldown: " + secs(d.OutCooldownLeft) + " left"
	case WhyScaleOut:
		return fmt.Sprintf("utilization %.2f >= %.2f for %d sweeps", d.Utilization, d.High, d.Streak)
	case WhyInStreak:
		return fmt.Sprintf("quiet: in streak %d/%d", d.Streak, d.Need)
	case WhyAtMin:
		return fmt.Sprintf("at minNodes %d", d.Bound)
	case WhyNoReadonly:
		return "no readonly node to remove"
	case WhyLastReader:
		return "last reader: the last read-capable node is never removed"
	case WhyInCooldown:
		return "in in cooldown: " + secs(d.InCooldownLeft) + " left"
	case WhyScaleIn:
		return fmt.Sprintf("utilization %.2f <= %.2f for %d sweeps", d.Utilization, d.Low, d.Streak)
	case WhyDisabled:
		return "autoscale disabled (enabled: false)"
	}
	return "not swept yet"
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

// CooldownsLeft is how long each direction's cooldown still runs at now:
// the out cooldown from the last action and from the last resume, the in
// cooldown from the last action.
func CooldownsLeft(s *Settings, st *State, now time.Time) (out, in time.Duration) {
	outCooldown := time.Duration(s.ScaleOutCooldownSec) * time.Second
	inCooldown := time.Duration(s.ScaleInCooldownSec) * time.Second
	out = max(cooldownLeft(now, st.LastAction, outCooldown), cooldownLeft(now, st.LastResume, outCooldown))
	return out, cooldownLeft(now, st.LastAction, inCooldown)
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
	d := Step(s, &st, &o, now)
	return d, st
}

// Step is Decide for a sweep over many pools: it updates st in place and
// copies neither the state nor the observation.
func Step(s *Settings, st *State, o *Observation, now time.Time) Decision {
	size := o.Size()
	d := Decision{From: size, To: size, Demand: o.Demand, Utilization: math.NaN(), Low: s.LowWatermark, High: s.HighWatermark}
	d.OutCooldownLeft, d.InCooldownLeft = CooldownsLeft(s, st, now)

	// 1. Suspended: autoscaling never touches the zero boundary.
	if o.Suspended {
		st.OutStreak, st.InStreak = 0, 0
		d.Why = WhySuspended
		return d
	}
	// 2. Failure backoff: sit this sweep out.
	if st.BackoffLeft > 0 {
		st.BackoffLeft--
		st.OutStreak, st.InStreak = 0, 0
		d.Why, d.BackoffLeft = WhyBackoff, st.BackoffLeft
		return d
	}
	// 3. Unknown utilization.
	d.Capacity = Capacity(s, o)
	if d.Capacity <= 0 {
		st.OutStreak, st.InStreak = 0, 0
		d.Why = WhyCapacityUnknown
		return d
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
		d.Why = WhyBetweenWatermarks
		return d
	}
	// 5. Scale out.
	if st.OutStreak > 0 {
		switch {
		case st.OutStreak < s.OutStreak:
			d.Why, d.Streak, d.Need = WhyOutStreak, st.OutStreak, s.OutStreak
		case size >= o.Band.Max:
			d.Why, d.Bound = WhyAtMax, o.Band.Max
		case d.OutCooldownLeft > 0:
			d.Why = WhyOutCooldown
		default:
			d.Direction, d.To = Out, size+1
			d.Why, d.Streak = WhyScaleOut, st.OutStreak
		}
		return d
	}
	// 6. Scale in.
	switch {
	case st.InStreak < s.InStreak:
		d.Why, d.Streak, d.Need = WhyInStreak, st.InStreak, s.InStreak
	case size <= o.Band.Min:
		d.Why, d.Bound = WhyAtMin, o.Band.Min
	case o.Readonly < 1:
		d.Why = WhyNoReadonly
	case o.Readonly+o.Dual < 2:
		d.Why = WhyLastReader
	case d.InCooldownLeft > 0:
		d.Why = WhyInCooldown
	default:
		d.Direction, d.To = In, size-1
		d.Why, d.Streak = WhyScaleIn, st.InStreak
	}
	return d
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
