// Package hookengine is the Aperio hook loop's decision, as a pure function:
// a record's state, one sample of its hostname's pool, and the time go in;
// the call to make (if any) and the next state come out. The server's ticker,
// the simulator and the tests drive the same code.
package hookengine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/qodaperio/autoscale/internal/hook"
)

// Reason of a call.
type Reason string

const (
	ColdStart Reason = "cold_start"
	ScaleOut  Reason = "scale_out"
	ScaleIn   Reason = "scale_in"
)

// BreakerFailures is the consecutive failures that disarm a record.
const BreakerFailures = 5

// State is what the loop remembers about one record (one bind).
type State struct {
	Armed bool `json:"armed"`
	// AboveSince and IdleSince start the clocks; zero: not running.
	AboveSince time.Time `json:"aboveSince"`
	IdleSince  time.Time `json:"idleSince"`
	// NextAllowed is the earliest time of the next call (cooldown or
	// backoff).
	NextAllowed time.Time `json:"nextAllowed"`
	Failures    int       `json:"failures"`
	InFlight    bool      `json:"inFlight"`
	// Generation counts successful calls; it keeps an Idempotency-Key
	// the same across retries of one decision and new for the next.
	Generation int64 `json:"generation"`
}

// Sample is one tick's view of the hostname's pool.
type Sample struct {
	// Current is the routable primary clients (priority 0, not draining,
	// not disabled, probe passing).
	Current int
	// Capacity is the sum of their max_concurrent; 0 means unknown.
	Capacity int
	// Inflight is the permits in use on them.
	Inflight int
	// RoutableAnyTier counts routable clients of every tier, standby
	// included: a cold start is only for a hostname with none.
	RoutableAnyTier int
	// Waiting is the requests held for this hostname.
	Waiting int
}

// Call is a decision to call the hook.
type Call struct {
	Reason  Reason `json:"reason"`
	Current int    `json:"current"`
	Desired int    `json:"desired"`
}

// Decision is what one tick decided, and why nothing happened when nothing
// did.
type Decision struct {
	Call        *Call
	Utilization float64 // -1 when capacity is unknown
	Why         string
}

// Decide runs one tick for one record at now. When it returns a call, the
// state has InFlight set; the outcome comes back through Succeeded or Failed.
func Decide(h *hook.Hook, st State, s Sample, now time.Time) (Decision, State) {
	d := Decision{Utilization: -1}
	if !st.Armed {
		d.Why = "disarmed"
		return d, st
	}
	// Cold start: someone is waiting and nothing of any tier can serve.
	var call *Call
	if s.Waiting > 0 && s.RoutableAnyTier == 0 {
		call = &Call{Reason: ColdStart, Current: 0, Desired: max(1, h.Min)}
	}
	if s.Capacity <= 0 {
		st.AboveSince, st.IdleSince = time.Time{}, time.Time{}
		if call == nil {
			d.Why = "capacity unknown"
			return d, st
		}
	} else {
		u := float64(s.Inflight) / float64(s.Capacity)
		d.Utilization = u
		if u >= h.TargetUtilization {
			if st.AboveSince.IsZero() {
				st.AboveSince = now
			}
		} else {
			st.AboveSince = time.Time{}
		}
		if u < h.TargetUtilization/2 {
			if st.IdleSince.IsZero() {
				st.IdleSince = now
			}
		} else {
			st.IdleSince = time.Time{}
		}
		switch {
		case call != nil:
		case !st.AboveSince.IsZero() && now.Sub(st.AboveSince) >= h.Window && s.Current < h.Max:
			call = &Call{Reason: ScaleOut, Current: s.Current, Desired: s.Current + 1}
		case !st.IdleSince.IsZero() && now.Sub(st.IdleSince) >= 4*h.Window && s.Current > h.Min && s.Current > 1:
			call = &Call{Reason: ScaleIn, Current: s.Current, Desired: max(s.Current-1, h.Min, 1)}
		}
	}
	switch {
	case call == nil:
		d.Why = "steady"
		return d, st
	case st.InFlight:
		d.Why = "a call is in flight"
		return d, st
	case now.Before(st.NextAllowed):
		d.Why = fmt.Sprintf("cooling down: %s left", st.NextAllowed.Sub(now).Round(time.Second))
		return d, st
	}
	st.InFlight = true
	d.Call, d.Why = call, string(call.Reason)
	return d, st
}

// Succeeded records an accepted call at now: the cooldown starts and both
// clocks clear, so the next call needs a full window of fresh evidence.
func Succeeded(h *hook.Hook, st State, now time.Time) State {
	st.InFlight = false
	st.Failures = 0
	st.NextAllowed = now.Add(h.Cooldown)
	st.AboveSince, st.IdleSince = time.Time{}, time.Time{}
	st.Generation++
	return st
}

// Failed records a failed call at now: exponential backoff, capped at the
// cooldown (60 s when the cooldown is 0); the fifth failure in a row
// disarms the record. It reports whether the breaker tripped.
func Failed(h *hook.Hook, st State, now time.Time) (State, bool) {
	st.InFlight = false
	st.Failures++
	limit := h.Cooldown
	if limit <= 0 {
		limit = 60 * time.Second
	}
	backoff := time.Second << min(st.Failures-1, 30)
	st.NextAllowed = now.Add(min(backoff, limit))
	if st.Failures >= BreakerFailures {
		st.Armed = false
		return st, true
	}
	return st, false
}

// Rearmed is a record re-announced or edited: armed, with a clean slate.
func Rearmed(st State) State {
	st.Armed = true
	st.Failures = 0
	st.NextAllowed = time.Time{}
	return st
}

// IdempotencyKey is the same for the same (record, reason, desired)
// decision across retries, and new once a call of it has succeeded.
func IdempotencyKey(recordID string, st State, c Call) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s|%s|%d|%d", recordID, c.Reason, c.Desired, st.Generation)))
	return hex.EncodeToString(sum[:16])
}
