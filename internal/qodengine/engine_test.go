package qodengine

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/config"
)

// t0 is time 0 of the fake clock; sweeps run at t0 + k*sweepSeconds.
var t0 = time.Unix(0, 0).UTC()

func settings() *Settings {
	s := config.DefaultAutoscale()
	return &s
}

// biPool is the reference page's BI pool: one writer, one reader, band [2, 6],
// 4 concurrent statements per node.
func biPool() Observation {
	return Observation{Band: band.Band{Min: 2, Max: 6}, Writeonly: 1, Readonly: 1, MaxConcurrentPerNode: 4}
}

// withUtil sets the demand so utilization is u.
func withUtil(o Observation, u float64) Observation {
	o.Demand = u * float64(o.MaxConcurrentPerNode*(o.Readonly+o.Dual-o.UnroutableReaders))
	return o
}

// sweep runs k sweeps at utilization u from sweep number from, applying
// each action as a success, and returns the decisions.
type run struct {
	s  *Settings
	st State
	o  Observation
	k  int // sweeps so far
}

func newRun(_ *testing.T, o Observation) *run { return &run{s: settings(), o: o} }

func (r *run) now() time.Time { return t0.Add(time.Duration(r.k*r.s.SweepSeconds) * time.Second) }

func (r *run) sweep(u float64) Decision {
	r.k++
	now := r.now()
	d, st := Decide(r.s, r.st, withUtil(r.o, u), now)
	if d.Acts() {
		t := Target(r.o, d)
		r.o.Writeonly, r.o.Readonly, r.o.Dual = t.Writeonly, t.Readonly, t.Dual
		st = Succeeded(st, now)
	}
	r.st = st
	return d
}

func (r *run) sweeps(n int, u float64) []Decision {
	var out []Decision
	for range n {
		out = append(out, r.sweep(u))
	}
	return out
}

func actions(ds []Decision) (n int) {
	for _, d := range ds {
		if d.Acts() {
			n++
		}
	}
	return
}

func TestTwoBusySweepsThenOut(t *testing.T) {
	r := newRun(t, biPool())
	if d := r.sweep(0.85); d.Acts() || d.Rule() != "busy: out streak 1/2" {
		t.Fatalf("first busy sweep acted: %+v", d)
	}
	d := r.sweep(0.85)
	if d.Direction != Out || d.From != 2 || d.To != 3 || r.o.Readonly != 2 || r.o.Writeonly != 1 {
		t.Fatalf("second busy sweep: %+v, pool %+v", d, r.o)
	}
	if math.Abs(d.Utilization-0.85) > 1e-9 {
		t.Fatalf("utilization %v", d.Utilization)
	}
}

func TestAtHighWatermarkCounts(t *testing.T) {
	r := newRun(t, biPool())
	r.sweep(0.8)
	if d := r.sweep(0.8); d.Direction != Out {
		t.Fatalf("u == highWatermark did not count: %+v", d)
	}
}

func TestMiddleSampleResetsTheStreak(t *testing.T) {
	r := newRun(t, biPool())
	r.sweep(0.9)
	if d := r.sweep(0.5); d.Acts() || !strings.HasPrefix(d.Rule(), "between watermarks") || r.st.OutStreak != 0 {
		t.Fatalf("0.5 sample: %+v %+v", d, r.st)
	}
	if d := r.sweep(0.9); d.Acts() {
		t.Fatal("streak survived a 0.5 sample")
	}
	if d := r.sweep(0.9); d.Direction != Out {
		t.Fatalf("two fresh busy sweeps: %+v", d)
	}
}

func TestTenQuietSweepsThenIn(t *testing.T) {
	o := biPool()
	o.Readonly = 3 // size 4
	r := newRun(t, o)
	ds := r.sweeps(9, 0.2)
	if actions(ds) != 0 || ds[8].Rule() != "quiet: in streak 9/10" {
		t.Fatalf("acted before 10 quiet sweeps: %+v", ds[8])
	}
	d := r.sweep(0.2)
	if d.Direction != In || d.From != 4 || d.To != 3 || r.o.Readonly != 2 {
		t.Fatalf("tenth quiet sweep: %+v", d)
	}
	if at := r.sweep(0.3); at.Acts() || r.st.InStreak != 1 {
		t.Fatal("u == lowWatermark did not count as quiet")
	}
}

func TestNeverBelowMinNodes(t *testing.T) {
	r := newRun(t, biPool()) // size 2 == minNodes
	ds := r.sweeps(30, 0)
	if actions(ds) != 0 || ds[29].Rule() != "at minNodes 2" {
		t.Fatalf("scaled below minNodes: %+v", ds[29])
	}
}

func TestNeverAboveMaxNodes(t *testing.T) {
	r := newRun(t, biPool())
	r.s.ScaleOutCooldownSec = 0
	r.sweeps(100, 5)
	if r.o.Size() != 6 {
		t.Fatalf("size %d, want maxNodes 6", r.o.Size())
	}
	if d := r.sweep(5); d.Acts() || d.Rule() != "at maxNodes 6" {
		t.Fatalf("at max: %+v", d)
	}
}

func TestNeverTheLastReader(t *testing.T) {
	// Band floor 1 would allow it, but the one reader stays.
	o := Observation{Band: band.Band{Min: 1, Max: 4}, Writeonly: 1, Readonly: 1, MaxConcurrentPerNode: 4}
	r := newRun(t, o)
	ds := r.sweeps(20, 0)
	if actions(ds) != 0 || ds[19].Rule() != "last reader: the last read-capable node is never removed" {
		t.Fatalf("last reader: %+v", ds[19])
	}
	// A dual node is a reader too: with one dual and one readonly the
	// readonly may go.
	o = Observation{Band: band.Band{Min: 1, Max: 4}, Readonly: 1, Dual: 1, MaxConcurrentPerNode: 4}
	r = newRun(t, o)
	if actions(r.sweeps(10, 0)) != 1 || r.o.Readonly != 0 || r.o.Dual != 1 {
		t.Fatalf("readonly beside a dual not removed: %+v", r.o)
	}
}

func TestOnlyReadonlyNodesMove(t *testing.T) {
	// Dual and writeonly are never removed even when the band allows.
	o := Observation{Band: band.Band{Min: 3, Max: 8}, Writeonly: 2, Dual: 2, Readonly: 0, MaxConcurrentPerNode: 4}
	r := newRun(t, o)
	ds := r.sweeps(20, 0)
	if actions(ds) != 0 || ds[19].Rule() != "no readonly node to remove" {
		t.Fatalf("%+v", ds[19])
	}
	r.s.ScaleOutCooldownSec = 0
	r.sweeps(10, 1)
	if r.o.Writeonly != 2 || r.o.Dual != 2 || r.o.Readonly != 4 {
		t.Fatalf("scale out touched writers: %+v", r.o)
	}
}

func TestOutCooldown(t *testing.T) {
	r := newRun(t, biPool()) // 60 s sweeps, 180 s out cooldown
	r.sweeps(2, 0.9)         // out at t=120
	d := r.sweep(0.9)        // t=180, streak 1
	d = r.sweep(0.9)         // t=240: streak 2 but only 120 s since the action
	if d.Acts() || d.Rule() != "in out cooldown: 60 s left" || d.OutCooldownLeft != 60*time.Second {
		t.Fatalf("inside the out cooldown: %+v", d)
	}
	if d = r.sweep(0.9); d.Direction != Out { // t=300: 180 s since
		t.Fatalf("after the cooldown: %+v", d)
	}
}

func TestInCooldownAfterAnyAction(t *testing.T) {
	o := biPool()
	o.Readonly = 4
	r := newRun(t, o)
	r.s.InStreak = 1
	if d := r.sweep(0); d.Direction != In { // t=60
		t.Fatalf("%+v", d)
	}
	ds := r.sweeps(9, 0) // t=120..600: 540 s < 600 s
	if actions(ds) != 0 || !strings.HasPrefix(ds[8].Rule(), "in in cooldown: 60 s left") {
		t.Fatalf("inside the in cooldown: %+v", ds[8])
	}
	if d := r.sweep(0); d.Direction != In { // t=660
		t.Fatalf("after the in cooldown: %+v", d)
	}
}

func TestResumeStartsTheOutCooldown(t *testing.T) {
	r := newRun(t, biPool())
	r.st = Resumed(r.st, t0) // resumed at 0
	ds := r.sweeps(2, 0.95)  // t=60, 120: streak met, cooldown not
	if actions(ds) != 0 || ds[1].Rule() != "in out cooldown: 60 s left" {
		t.Fatalf("out inside the resume cooldown: %+v", ds[1])
	}
	if d := r.sweep(0.95); d.Direction != Out { // t=180: exactly the cooldown
		t.Fatalf("at the end of the resume cooldown: %+v", d)
	}
	r2 := newRun(t, biPool())
	r2.st = Resumed(r2.st, t0.Add(100*time.Second))
	r2.k = 2 // next sweep at 180
	if d := r2.sweep(0.95); d.Acts() {
		t.Fatal("acted")
	}
	if d := r2.sweep(0.95); d.Acts() || d.Rule() != "in out cooldown: 40 s left" {
		t.Fatalf("resume cooldown: %+v", d)
	}
	// A resume does not hold scale-in.
	o := biPool()
	o.Readonly = 3
	r3 := newRun(t, o)
	r3.s.InStreak = 1
	r3.st = Resumed(r3.st, t0)
	if d := r3.sweep(0); d.Direction != In {
		t.Fatalf("resume held scale-in: %+v", d)
	}
}

func TestThreeFailuresThenFiveSkippedSweeps(t *testing.T) {
	s := settings()
	o := withUtil(biPool(), 0.9)
	var st State
	now := t0
	next := func() (Decision, State) { now = now.Add(time.Minute); return Decide(s, st, o, now) }
	var d Decision
	d, st = next() // streak 1
	for i := 1; i <= 3; i++ {
		d, st = next()
		if d.Direction != Out {
			t.Fatalf("retry %d did not act: %+v", i, d)
		}
		var backoff bool
		st, backoff = Failed(s, st)
		if backoff != (i == 3) {
			t.Fatalf("failure %d: backoff %v", i, backoff)
		}
	}
	for i := 4; i >= 0; i-- {
		d, st = next()
		if d.Acts() || !strings.HasPrefix(d.Rule(), "failure backoff") || st.BackoffLeft != i || st.OutStreak != 0 {
			t.Fatalf("backoff sweep: %+v %+v", d, st)
		}
	}
	d, st = next()
	if d.Acts() || st.OutStreak != 1 {
		t.Fatalf("after backoff the streak starts afresh: %+v %+v", d, st)
	}
	if d, _ = next(); d.Direction != Out {
		t.Fatalf("after backoff: %+v", d)
	}
}

func TestSuccessResetsFailures(t *testing.T) {
	s := settings()
	st, _ := Failed(s, State{})
	st, _ = Failed(s, st)
	st = Succeeded(st, t0)
	if st.Failures != 0 {
		t.Fatal("success kept the failures")
	}
	if st, backoff := Failed(s, st); backoff || st.Failures != 1 {
		t.Fatal("count restarted wrong")
	}
}

func TestCapacityZeroDecidesNothing(t *testing.T) {
	o := biPool()
	o.UnroutableReaders = 1
	o.Demand = 100
	st := State{OutStreak: 5, InStreak: 0}
	d, st := Decide(settings(), st, o, t0.Add(time.Hour))
	if d.Acts() || !math.IsNaN(d.Utilization) || st.OutStreak != 0 || d.Rule() != "capacity unknown: no routable read-capable node" {
		t.Fatalf("%+v %+v", d, st)
	}
}

func TestAssumedConcurrency(t *testing.T) {
	o := biPool()
	o.MaxConcurrentPerNode = 0
	o.Readonly, o.Dual = 2, 1
	if c := Capacity(settings(), &o); c != 12 { // 4 assumed * 3 readers
		t.Fatalf("capacity %v", c)
	}
}

func TestSuspendedSkipsAndResets(t *testing.T) {
	o := biPool()
	o.Suspended = true
	d, st := Decide(settings(), State{OutStreak: 1, InStreak: 3}, o, t0)
	if d.Acts() || d.Rule() != "suspended" || st.OutStreak+st.InStreak != 0 || d.From != 0 {
		t.Fatalf("%+v %+v", d, st)
	}
}

func TestManualScaleResetsStreaksStartsNoCooldown(t *testing.T) {
	r := newRun(t, biPool())
	r.sweep(0.9)
	r.st = ManuallyScaled(r.st)
	if r.st.OutStreak != 0 || !r.st.LastAction.IsZero() {
		t.Fatalf("%+v", r.st)
	}
	r.sweep(0.9)
	if d := r.sweep(0.9); d.Direction != Out {
		t.Fatalf("no cooldown after a manual scale: %+v", d)
	}
}

func TestWindowAndDemand(t *testing.T) {
	// At t=630 s, M=10: the window is minutes 5..9.
	first, last := Window(t0.Add(630*time.Second), 5)
	if first != 5 || last != 9 {
		t.Fatalf("window %d..%d", first, last)
	}
	// Ten minutes of statement time in five minutes: two in flight.
	if d := Demand(600_000, 5); d != 2 {
		t.Fatalf("demand %v", d)
	}
}
