// Package qodsim replays a QoD load scenario through the autoscale engine on
// a virtual clock: the same engine and the same pool mutations the server
// uses, so an operator can see what a band would have done on yesterday's
// load before declaring it.
package qodsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/qodengine"
)

// MaxDuration bounds a scenario's length (a week of virtual time).
const MaxDuration = 7 * 24 * 3600

// Scenario is the simulator's input.
type Scenario struct {
	// Settings override the defaults key by key (keys as in
	// GET /api/autoscale/config).
	Settings json.RawMessage `json:"settings,omitempty"`
	Pool     Pool            `json:"pool"`
	// Load is statement-seconds completed in each minute, from minute 0.
	Load []float64 `json:"load"`
	// Events happen at a second; one at the same instant as a sweep
	// applies before it.
	Events []Event `json:"events,omitempty"`
	// DurationSeconds is how long to run; default: the length of Load.
	DurationSeconds int `json:"durationSeconds,omitempty"`
}

// Pool is the simulated pool.
type Pool struct {
	Name                 string     `json:"name"`
	RoleDistribution     pool.Roles `json:"roleDistribution"`
	MinNodes             int        `json:"minNodes"`
	MaxNodes             int        `json:"maxNodes"`
	MaxConcurrentPerNode int        `json:"maxConcurrentPerNode"`
}

// Event kinds.
const (
	EventSuspend    = "suspend"
	EventResume     = "resume"
	EventScale      = "scale"
	EventFail       = "fail"       // the next Count actions fail
	EventUnroutable = "unroutable" // Readers read-capable nodes stop (or, at 0, resume) routing
)

// Event is something that happens to the pool at a second.
type Event struct {
	At         int    `json:"at"`
	Type       string `json:"type"`
	TargetSize int    `json:"targetSize,omitempty"`
	Count      int    `json:"count,omitempty"`
	Readers    int    `json:"readers,omitempty"`
}

// Line is one line of output: a sweep's decision, or an event.
type Line struct {
	T           int      `json:"t"`
	Event       string   `json:"event,omitempty"`
	Direction   string   `json:"direction,omitempty"`
	From        int      `json:"from"`
	To          int      `json:"to"`
	Utilization *float64 `json:"utilization,omitempty"` // absent when capacity is unknown
	Demand      float64  `json:"demand,omitempty"`
	Capacity    float64  `json:"capacity,omitempty"`
	Rule        string   `json:"rule,omitempty"`
	OK          *bool    `json:"ok,omitempty"`
	Error       string   `json:"error,omitempty"`
	// Roles after the line, so a reader sees which nodes moved.
	Writeonly int `json:"writeonly"`
	Readonly  int `json:"readonly"`
	Dual      int `json:"dual"`
}

// Parse reads and checks a scenario, with errors that name the field.
func Parse(r io.Reader) (*Scenario, *qodengine.Settings, error) {
	data, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return nil, nil, err
	}
	var sc Scenario
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		return nil, nil, fmt.Errorf("scenario: %w", err)
	}
	s := config.DefaultAutoscale()
	if len(sc.Settings) > 0 {
		sd := json.NewDecoder(bytes.NewReader(sc.Settings))
		sd.DisallowUnknownFields()
		if err := sd.Decode(&s); err != nil {
			return nil, nil, fmt.Errorf("scenario settings: %w", err)
		}
	}
	if err := config.CheckAutoscale(&s); err != nil {
		return nil, nil, fmt.Errorf("scenario settings: %w", err)
	}
	if err := sc.check(&s); err != nil {
		return nil, nil, err
	}
	return &sc, &s, nil
}

func (sc *Scenario) check(s *qodengine.Settings) error {
	p := sc.Pool
	if err := p.RoleDistribution.Validate(); err != nil {
		return fmt.Errorf("scenario pool: %v", err)
	}
	size := p.RoleDistribution.Total()
	if size < 1 {
		return fmt.Errorf("scenario pool.roleDistribution: the pool needs at least one node")
	}
	if p.MaxConcurrentPerNode < 0 {
		return fmt.Errorf("scenario pool.maxConcurrentPerNode is %d; accepted: 0 (assume %d) or more", p.MaxConcurrentPerNode, s.AssumedConcurrencyPerNode)
	}
	b := band.Band{Min: p.MinNodes, Max: p.MaxNodes}
	if err := band.Validate(b, s.HardCap, band.Pool{Size: size, Writeonly: p.RoleDistribution.Writeonly, Dual: p.RoleDistribution.Dual}); err != nil {
		return fmt.Errorf("scenario pool band: %v", err)
	}
	for i, v := range sc.Load {
		if math.IsNaN(v) || v < 0 || v > 1e9 {
			return fmt.Errorf("scenario load[%d] is %v; accepted: statement-seconds from 0 to 1e9", i, v)
		}
	}
	if sc.DurationSeconds == 0 {
		sc.DurationSeconds = len(sc.Load) * 60
	}
	if sc.DurationSeconds < 0 || sc.DurationSeconds > MaxDuration {
		return fmt.Errorf("scenario durationSeconds is %d; accepted: 1 to %d", sc.DurationSeconds, MaxDuration)
	}
	for i, e := range sc.Events {
		if e.At < 0 || e.At > sc.DurationSeconds {
			return fmt.Errorf("scenario events[%d].at is %d; accepted: 0 to durationSeconds %d", i, e.At, sc.DurationSeconds)
		}
		switch e.Type {
		case EventSuspend, EventResume, EventScale:
		case EventFail:
			if e.Count < 1 || e.Count > 1000 {
				return fmt.Errorf("scenario events[%d].count is %d; accepted: 1 to 1000", i, e.Count)
			}
		case EventUnroutable:
			if e.Readers < 0 || e.Readers > pool.MaxSize {
				return fmt.Errorf("scenario events[%d].readers is %d; accepted: 0 to %d", i, e.Readers, pool.MaxSize)
			}
		default:
			return fmt.Errorf("scenario events[%d].type %q; accepted: suspend, resume, scale, fail, unroutable", i, e.Type)
		}
	}
	sort.SliceStable(sc.Events, func(i, j int) bool { return sc.Events[i].At < sc.Events[j].At })
	return nil
}

// Run replays the scenario and calls emit for every sweep and event, in time
// order. Time 0 is the Unix epoch, so minute m is [60m, 60m+60).
func Run(sc *Scenario, s *qodengine.Settings, emit func(Line)) {
	b := band.Band{Min: sc.Pool.MinNodes, Max: sc.Pool.MaxNodes}
	p := &pool.Pool{Roles: sc.Pool.RoleDistribution, Band: &b, MaxConcurrentPerNode: sc.Pool.MaxConcurrentPerNode}
	var st qodengine.State
	failNext, unroutable, suspendedAt := 0, 0, 0
	at := func(sec int) time.Time { return time.Unix(int64(sec), 0).UTC() }
	line := func(sec int) Line {
		return Line{T: sec, From: p.Size(), To: p.Size(), Writeonly: p.Roles.Writeonly, Readonly: p.Roles.Readonly, Dual: p.Roles.Dual}
	}
	finish := func(l Line) Line {
		l.To, l.Writeonly, l.Readonly, l.Dual = p.Size(), p.Roles.Writeonly, p.Roles.Readonly, p.Roles.Dual
		return l
	}
	resume := func(sec int, why string) {
		l := line(sec)
		l.Event = why
		p.Resume()
		st = qodengine.Resumed(st, at(sec))
		emit(finish(l))
	}
	apply := func(e Event) {
		l := line(e.At)
		l.Event = e.Type
		switch e.Type {
		case EventSuspend:
			if !p.Suspended {
				suspendedAt = e.At
			}
			p.Suspend()
		case EventResume:
			resume(e.At, EventResume)
			return
		case EventScale:
			wasSuspended := p.Suspended
			if err := p.Scale(e.TargetSize, nil, s.HardCap); err != nil {
				l.Error = err.Error()
			} else {
				if p.Suspended && !wasSuspended {
					suspendedAt = e.At
				}
				st = qodengine.ManuallyScaled(st)
			}
		case EventFail:
			failNext += e.Count
		case EventUnroutable:
			unroutable = e.Readers
		}
		emit(finish(l))
	}
	window := func(sec int) float64 {
		first, last := qodengine.Window(at(sec), s.WindowMinutes)
		var total float64
		for m := max(first, 0); m <= last && m < int64(len(sc.Load)); m++ {
			total += sc.Load[m]
		}
		return total / float64(s.WindowMinutes*60)
	}

	ev := 0
	for sec := s.SweepSeconds; sec <= sc.DurationSeconds; sec += s.SweepSeconds {
		// Events up to and including this instant, and wakes: a statement
		// for a suspended pool resumes it at the start of its minute.
		for {
			nextEvent := math.MaxInt
			if ev < len(sc.Events) {
				nextEvent = sc.Events[ev].At
			}
			nextWake := math.MaxInt
			if p.Suspended {
				// The first minute starting at or after the suspend
				// that carries load wakes the pool at its start.
				for m := (suspendedAt + 59) / 60; m*60 <= sec && m < len(sc.Load); m++ {
					if sc.Load[m] > 0 {
						nextWake = m * 60
						break
					}
				}
			}
			if nextEvent > sec && nextWake > sec {
				break
			}
			if nextWake < nextEvent {
				resume(nextWake, "wake")
				continue
			}
			apply(sc.Events[ev])
			ev++
		}
		if !s.Enabled {
			continue
		}
		o := qodengine.Observation{Band: b, Suspended: p.Suspended, Writeonly: p.Roles.Writeonly, Readonly: p.Roles.Readonly,
			Dual: p.Roles.Dual, MaxConcurrentPerNode: p.MaxConcurrentPerNode, UnroutableReaders: unroutable, Demand: window(sec)}
		d, next := qodengine.Decide(s, st, o, at(sec))
		l := line(sec)
		l.Direction, l.Rule, l.Demand, l.Capacity = d.Direction.String(), d.Rule(), round(d.Demand), d.Capacity
		if !math.IsNaN(d.Utilization) {
			u := round(d.Utilization)
			l.Utilization = &u
		}
		if d.Acts() {
			ok := failNext == 0
			if ok {
				r := qodengine.Target(o, d)
				if err := p.Scale(d.To, &r, s.HardCap); err != nil {
					ok, l.Error = false, err.Error()
				}
			} else {
				failNext--
				l.Error = "injected failure"
			}
			if ok {
				next = qodengine.Succeeded(next, at(sec))
			} else {
				var backoff bool
				next, backoff = qodengine.Failed(s, next)
				if backoff {
					l.Error += fmt.Sprintf("; third failure in a row: skipping the next %d sweeps", s.FailureBackoffSweeps)
				}
			}
			l.OK = &ok
		}
		st = next
		l = finish(l)
		if d.Acts() {
			l.To = d.To // the target, reached or not: ok says which
		}
		emit(l)
	}
}

func round(v float64) float64 { return math.Round(v*1000) / 1000 }
