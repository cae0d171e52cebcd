package hookengine

import (
	"strings"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/hook"
)

var t0 = time.Unix(1_800_000_000, 0)

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func refHook() *hook.Hook {
	return &hook.Hook{Hostname: "app.example.com", Min: 0, Max: 8, TargetUtilization: 0.8,
		Window: 15 * time.Second, Cooldown: 60 * time.Second, ColdStart: 45 * time.Second}
}

// run ticks every second from `from` to `to` with the same sample and
// returns the calls made; each call succeeds at once.
func run(h *hook.Hook, st *State, s Sample, from, to int) []*Call {
	var calls []*Call
	for t := from; t <= to; t++ {
		d, next := Decide(h, *st, s, sec(t))
		*st = next
		if d.Call != nil {
			calls = append(calls, d.Call)
			*st = Succeeded(h, *st, sec(t))
		}
	}
	return calls
}

// Four instances of max_concurrent 10 are saturated at 32 in flight: after
// a full window at or above 0.8, one call asks for one more.
func TestScaleOutAfterAFullWindow(t *testing.T) {
	h, st := refHook(), State{Armed: true}
	busy := Sample{Current: 4, Capacity: 40, Inflight: 32, RoutableAnyTier: 4}
	if calls := run(h, &st, busy, 0, 14); len(calls) != 0 {
		t.Fatalf("called before the window: %+v", calls[0])
	}
	calls := run(h, &st, busy, 15, 15)
	if len(calls) != 1 || *calls[0] != (Call{Reason: ScaleOut, Current: 4, Desired: 5}) {
		t.Fatalf("at 15 s: %+v", calls)
	}
}

func TestOneSampleBelowResetsTheAboveClock(t *testing.T) {
	h, st := refHook(), State{Armed: true}
	busy := Sample{Current: 4, Capacity: 40, Inflight: 32, RoutableAnyTier: 4}
	run(h, &st, busy, 0, 10)
	run(h, &st, Sample{Current: 4, Capacity: 40, Inflight: 31, RoutableAnyTier: 4}, 11, 11)
	if calls := run(h, &st, busy, 12, 26); len(calls) != 0 {
		t.Fatalf("the window did not restart: %+v", calls)
	}
	if calls := run(h, &st, busy, 27, 27); len(calls) != 1 {
		t.Fatal("no call a full window after the reset")
	}
}

func TestNotAboveMax(t *testing.T) {
	h, st := refHook(), State{Armed: true}
	if calls := run(h, &st, Sample{Current: 8, Capacity: 80, Inflight: 80, RoutableAnyTier: 8}, 0, 100); len(calls) != 0 {
		t.Fatalf("asked past max: %+v", calls)
	}
}

// Scale in needs utilization below half the target for four windows, and
// never goes below min or one.
func TestScaleInAfterFourWindowsBelowHalf(t *testing.T) {
	h, st := refHook(), State{Armed: true}
	idle := Sample{Current: 3, Capacity: 30, Inflight: 11, RoutableAnyTier: 3} // 0.367 < 0.4
	if calls := run(h, &st, idle, 0, 59); len(calls) != 0 {
		t.Fatal("scaled in before four windows")
	}
	calls := run(h, &st, idle, 60, 60)
	if len(calls) != 1 || *calls[0] != (Call{Reason: ScaleIn, Current: 3, Desired: 2}) {
		t.Fatalf("at 60 s: %+v", calls)
	}
	// Between half the target and the target: neither clock runs.
	st = State{Armed: true}
	if calls := run(h, &st, Sample{Current: 3, Capacity: 30, Inflight: 12, RoutableAnyTier: 3}, 0, 600); len(calls) != 0 {
		t.Fatalf("hysteresis band moved the pool: %+v", calls)
	}
	// At one instance, or at min, nothing to give back.
	st = State{Armed: true}
	if calls := run(h, &st, Sample{Current: 1, Capacity: 10, Inflight: 0, RoutableAnyTier: 1}, 0, 600); len(calls) != 0 {
		t.Fatalf("asked for the last instance to go: %+v", calls)
	}
	h2 := refHook()
	h2.Min = 2
	st = State{Armed: true}
	if calls := run(h2, &st, Sample{Current: 2, Capacity: 20, Inflight: 0, RoutableAnyTier: 2}, 0, 600); len(calls) != 0 {
		t.Fatalf("went below min: %+v", calls)
	}
}

// A burst against a sleeping hostname makes one call; standby clients do
// not count as capacity, but they do serve, so no cold start with one.
func TestColdStartOneCallPerBurst(t *testing.T) {
	h, st := refHook(), State{Armed: true}
	d, st := Decide(h, st, Sample{Waiting: 200}, sec(0))
	if d.Call == nil || *d.Call != (Call{Reason: ColdStart, Current: 0, Desired: 1}) {
		t.Fatalf("first waiting request: %+v", d)
	}
	for i := 1; i < 10; i++ {
		if d, st = Decide(h, st, Sample{Waiting: 200}, sec(i)); d.Call != nil || d.Why != "a call is in flight" {
			t.Fatalf("second call while one is in flight: %+v", d)
		}
	}
	st = Succeeded(h, st, sec(10))
	if d, _ := Decide(h, st, Sample{Waiting: 5}, sec(20)); d.Call != nil || !strings.HasPrefix(d.Why, "cooling down") {
		t.Fatalf("inside the cooldown: %+v", d)
	}
	h.Min = 2
	if d, _ := Decide(h, State{Armed: true}, Sample{Waiting: 1}, sec(0)); d.Call.Desired != 2 {
		t.Fatalf("cold start desired with min 2: %+v", d.Call)
	}
	if d, _ := Decide(h, State{Armed: true}, Sample{Waiting: 1, RoutableAnyTier: 1}, sec(0)); d.Call != nil {
		t.Fatalf("cold start with a standby client routable: %+v", d.Call)
	}
}

func TestUnknownCapacityDecidesNothingAndResetsTheClocks(t *testing.T) {
	h, st := refHook(), State{Armed: true}
	busy := Sample{Current: 4, Capacity: 40, Inflight: 40, RoutableAnyTier: 4}
	run(h, &st, busy, 0, 10)
	d, st := Decide(h, st, Sample{Current: 4, Capacity: 0, Inflight: 40, RoutableAnyTier: 4}, sec(11))
	if d.Call != nil || d.Why != "capacity unknown" || !st.AboveSince.IsZero() {
		t.Fatalf("%+v %+v", d, st)
	}
}

// Failures back off 1, 2, 4, 8 s (capped at the cooldown); the fifth in a
// row disarms; a re-announcement re-arms.
func TestBackoffAndBreaker(t *testing.T) {
	h, st := refHook(), State{Armed: true}
	wants := []time.Duration{1, 2, 4, 8, 16}
	for i, w := range wants {
		var tripped bool
		st.InFlight = true
		st, tripped = Failed(h, st, sec(100))
		if st.NextAllowed != sec(100).Add(w*time.Second) || tripped != (i == 4) {
			t.Fatalf("failure %d: next %v, tripped %v", i+1, st.NextAllowed.Sub(sec(100)), tripped)
		}
	}
	if st.Armed {
		t.Fatal("five failures did not disarm")
	}
	if d, _ := Decide(h, st, Sample{Waiting: 1}, sec(1000)); d.Call != nil || d.Why != "disarmed" {
		t.Fatalf("a disarmed record called: %+v", d)
	}
	st = Rearmed(st)
	if d, _ := Decide(h, st, Sample{Waiting: 1}, sec(1000)); d.Call == nil {
		t.Fatal("a re-armed record did not call")
	}
	h.Cooldown = 5 * time.Second
	st = State{Armed: true, Failures: 9}
	if st, _ = Failed(h, st, sec(0)); st.NextAllowed != sec(5) {
		t.Fatalf("backoff not capped at the cooldown: %v", st.NextAllowed.Sub(sec(0)))
	}
	h.Cooldown = 0
	st = State{Armed: true, Failures: 9}
	if st, _ = Failed(h, st, sec(0)); st.NextAllowed != sec(60) {
		t.Fatalf("backoff with no cooldown not capped at 60 s: %v", st.NextAllowed.Sub(sec(0)))
	}
}

func TestIdempotencyKey(t *testing.T) {
	st := State{Armed: true}
	c := Call{Reason: ScaleOut, Current: 4, Desired: 5}
	a, b := IdempotencyKey("r1", st, c), IdempotencyKey("r1", st, c)
	if a != b || len(a) != 32 {
		t.Fatalf("keys %q %q", a, b)
	}
	if IdempotencyKey("r1", st, Call{Reason: ScaleOut, Desired: 6}) == a || IdempotencyKey("r2", st, c) == a {
		t.Fatal("a different decision shares the key")
	}
	st.Generation++
	if IdempotencyKey("r1", st, c) == a {
		t.Fatal("the next decision after a success reuses the key")
	}
}
