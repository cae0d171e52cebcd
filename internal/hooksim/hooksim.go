// Package hooksim replays an Aperio hook scenario through the hook loop's
// engine on a virtual clock, one tick a second: the same decisions the
// server makes, so an operator can see which calls a declaration would have
// made on a recorded day before declaring it.
package hooksim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/hook"
	"github.com/qodaperio/autoscale/internal/hookengine"
)

// MaxDuration bounds a scenario (a day of one-second ticks).
const MaxDuration = 24 * 3600

// Scenario is the input.
type Scenario struct {
	// Hook is the declaration, as for PUT /api/scaling/{hostname}.
	Hook hook.Declaration `json:"hook"`
	// Samples describe the hostname's pool from their second on, until
	// the next sample.
	Samples []Sample `json:"samples"`
	// Failures make calls fail: the next Count calls made at or after At.
	Failures []Failure `json:"failures,omitempty"`
	// DurationSeconds is how long to run; default: the last sample + 60.
	DurationSeconds int `json:"duration_seconds,omitempty"`
}

// Sample is the pool from second At on.
type Sample struct {
	At int `json:"at"`
	// Clients are routable primary clients, each announcing MaxConcurrent.
	Clients       int `json:"clients"`
	MaxConcurrent int `json:"max_concurrent"`
	// Inflight is the requests in flight on them.
	Inflight int `json:"inflight"`
	// Standby clients serve but are never capacity.
	Standby int `json:"standby,omitempty"`
	// Waiting is requests held for the hostname.
	Waiting int `json:"waiting,omitempty"`
}

// Failure makes the next Count calls at or after At fail.
type Failure struct {
	At    int `json:"at"`
	Count int `json:"count"`
}

// Line is one call the loop would make, or the breaker tripping.
type Line struct {
	T           int      `json:"t"`
	Reason      string   `json:"reason,omitempty"`
	Current     int      `json:"current"`
	Desired     int      `json:"desired"`
	Utilization *float64 `json:"utilization,omitempty"`
	OK          bool     `json:"ok"`
	Event       string   `json:"event,omitempty"`
}

// Parse reads a scenario strictly and checks it, naming the bad field.
func Parse(r io.Reader) (*Scenario, *hook.Hook, error) {
	data, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sc Scenario
	if err := dec.Decode(&sc); err != nil {
		return nil, nil, fmt.Errorf("scenario: %v", err)
	}
	h, err := sc.Hook.Validate()
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return nil, nil, fmt.Errorf("scenario: hook: %s", ae.Message)
		}
		return nil, nil, fmt.Errorf("scenario: hook: %v", err)
	}
	if len(sc.Samples) == 0 {
		return nil, nil, fmt.Errorf("scenario: samples is empty; accepted: at least one {\"at\": seconds, \"clients\": n, \"max_concurrent\": n, \"inflight\": n}")
	}
	for i, s := range sc.Samples {
		switch {
		case s.At < 0 || s.At > MaxDuration:
			return nil, nil, fmt.Errorf("scenario: samples[%d].at is %d; accepted: 0 to %d", i, s.At, MaxDuration)
		case s.Clients < 0 || s.MaxConcurrent < 0 || s.Inflight < 0 || s.Standby < 0 || s.Waiting < 0:
			return nil, nil, fmt.Errorf("scenario: samples[%d] has a negative count; accepted: 0 or more", i)
		}
	}
	for i, f := range sc.Failures {
		if f.At < 0 || f.Count < 1 || f.Count > 1000 {
			return nil, nil, fmt.Errorf("scenario: failures[%d] is {at %d, count %d}; accepted: at >= 0, count 1 to 1000", i, f.At, f.Count)
		}
	}
	sort.SliceStable(sc.Samples, func(a, b int) bool { return sc.Samples[a].At < sc.Samples[b].At })
	if sc.DurationSeconds == 0 {
		sc.DurationSeconds = sc.Samples[len(sc.Samples)-1].At + 60
	}
	if sc.DurationSeconds < 1 || sc.DurationSeconds > MaxDuration {
		return nil, nil, fmt.Errorf("scenario: duration_seconds is %d; accepted: 1 to %d", sc.DurationSeconds, MaxDuration)
	}
	return &sc, &h, nil
}

// Run ticks once a second and calls emit for every call and breaker trip.
// Calls complete within their tick.
func Run(sc *Scenario, h *hook.Hook, emit func(Line)) {
	start := time.Unix(0, 0)
	st := hookengine.State{Armed: true}
	failing, nextFailure := 0, 0
	failures := append([]Failure(nil), sc.Failures...)
	sort.SliceStable(failures, func(a, b int) bool { return failures[a].At < failures[b].At })
	si := 0
	for t := 0; t <= sc.DurationSeconds; t++ {
		for si+1 < len(sc.Samples) && sc.Samples[si+1].At <= t {
			si++
		}
		for nextFailure < len(failures) && failures[nextFailure].At <= t {
			failing += failures[nextFailure].Count
			nextFailure++
		}
		cur := sc.Samples[si]
		if cur.At > t {
			cur = Sample{}
		}
		sample := hookengine.Sample{Current: cur.Clients, Capacity: cur.Clients * cur.MaxConcurrent, Inflight: cur.Inflight,
			RoutableAnyTier: cur.Clients + cur.Standby, Waiting: cur.Waiting}
		now := start.Add(time.Duration(t) * time.Second)
		d, next := hookengine.Decide(h, st, sample, now)
		st = next
		if d.Call == nil {
			continue
		}
		l := Line{T: t, Reason: string(d.Call.Reason), Current: d.Call.Current, Desired: d.Call.Desired, OK: failing == 0}
		if d.Utilization >= 0 {
			u := float64(int(d.Utilization*1000+0.5)) / 1000
			l.Utilization = &u
		}
		emit(l)
		if failing > 0 {
			failing--
			var tripped bool
			if st, tripped = hookengine.Failed(h, st, now); tripped {
				emit(Line{T: t, Event: "scaling_disarmed", Current: d.Call.Current, Desired: d.Call.Desired})
			}
			continue
		}
		st = hookengine.Succeeded(h, st, now)
	}
}
