package qodsim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/qodengine"
)

func parse(t *testing.T, js string) (*Scenario, *Settings) {
	t.Helper()
	sc, s, err := Parse(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return sc, s
}

type Settings = qodengine.Settings

func collect(sc *Scenario, s *Settings) []Line {
	var out []Line
	Run(sc, s, func(l Line) { out = append(out, l) })
	return out
}

func flat(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func loadJSON(parts ...[]float64) string {
	var all []float64
	for _, p := range parts {
		all = append(all, p...)
	}
	b, _ := json.Marshal(all)
	return string(b)
}

// TestUpToMaxAndBackToMin: busy for an hour, then quiet for two: the pool
// walks 2 -> 3 -> ... -> 6, one node per action, then back down to 2.
func TestUpToMaxAndBackToMin(t *testing.T) {
	// 8 nodes' worth of 4-concurrency at full tilt: 40 statement-seconds a
	// second is far above any size's high watermark.
	sc, s := parse(t, `{"pool":{"name":"acme/acme_sales/bi","roleDistribution":{"writeonly":1,"readonly":1,"dual":0},
		"minNodes":2,"maxNodes":6,"maxConcurrentPerNode":4},
		"load":`+loadJSON(flat(60, 40*60), flat(180, 0))+`}`)
	var sizes []int
	for _, l := range collect(sc, s) {
		if l.Direction != "" {
			if l.OK == nil || !*l.OK || l.To-l.From != map[string]int{"out": 1, "in": -1}[l.Direction] || l.Writeonly != 1 {
				t.Fatalf("bad action line %+v", l)
			}
			sizes = append(sizes, l.To)
		}
	}
	if got := fmt.Sprint(sizes); got != "[3 4 5 6 5 4 3 2]" {
		t.Fatalf("sizes after each action: %s", got)
	}
}

func TestWakeAndResumeCooldown(t *testing.T) {
	sc, s := parse(t, `{"pool":{"name":"p","roleDistribution":{"writeonly":0,"readonly":1,"dual":1},"minNodes":2,"maxNodes":4},
		"load":`+loadJSON(flat(10, 0), flat(20, 600))+`,
		"events":[{"at":60,"type":"suspend"}]}`)
	lines := collect(sc, s)
	var wake, firstOut int
	for _, l := range lines {
		if l.Event == "wake" && wake == 0 {
			wake = l.T
			if l.To != 2 {
				t.Fatalf("woke at size %d, want minNodes", l.To)
			}
		}
		if l.Direction == "out" && firstOut == 0 {
			firstOut = l.T
		}
	}
	if wake != 600 {
		t.Fatalf("woke at %d, want 600 (the first loaded minute)", wake)
	}
	if firstOut < wake+180 {
		t.Fatalf("scaled out at %d, inside the resume cooldown that started at %d", firstOut, wake)
	}
}

func TestInjectedFailuresBackOff(t *testing.T) {
	sc, s := parse(t, `{"pool":{"name":"p","roleDistribution":{"writeonly":1,"readonly":1,"dual":0},"minNodes":2,"maxNodes":6,"maxConcurrentPerNode":1},
		"load":`+loadJSON(flat(30, 600))+`,"events":[{"at":0,"type":"fail","count":3}]}`)
	var fails, skipped int
	for _, l := range collect(sc, s) {
		if l.OK != nil && !*l.OK {
			fails++
		}
		if strings.HasPrefix(l.Rule, "failure backoff") {
			skipped++
		}
	}
	if fails != 3 || skipped != 5 {
		t.Fatalf("%d failures, %d skipped sweeps; want 3 and 5", fails, skipped)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		`{"pool":{"roleDistribution":{"readonly":2},"minNodes":1,"maxNodes":20},"load":[1]}`:                                "rule 2",
		`{"pool":{"roleDistribution":{"readonly":2},"minNodes":1,"maxNodes":2},"load":[-1]}`:                                "load[0] is -1",
		`{"pool":{"roleDistribution":{"readonly":2},"minNodes":1,"maxNodes":2},"load":[1],"events":[{"at":5,"type":"x"}]}`:  `events[0].type "x"`,
		`{"pool":{"roleDistribution":{"readonly":2},"minNodes":1,"maxNodes":2},"load":[1],"settings":{"hardLimit":3}}`:      `unknown field "hardLimit"`,
		`{"pool":{"roleDistribution":{"readonly":2},"minNodes":1,"maxNodes":2},"load":[1],"settings":{"lowWatermark":0.9}}`: "must be below highWatermark",
		`{"pool":{},"load":[1],"extra":1}`: `unknown field "extra"`,
	}
	for in, want := range cases {
		if _, _, err := Parse(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", in, err, want)
		}
	}
}

// TestInvariantsOverRandomScenarios replays thousands of random scenarios and
// checks what must always hold: the size stays within the band while the
// pool runs, writers never change through autoscaling, an action moves one
// node, and no action falls inside its cooldown.
func TestInvariantsOverRandomScenarios(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		sc, s := randomScenario(rng)
		var lastAction, lastResume = -1 << 40, -1 << 40
		var writers [2]int
		writers[0] = sc.Pool.RoleDistribution.Writeonly
		writers[1] = sc.Pool.RoleDistribution.Dual
		Run(sc, s, func(l Line) {
			fail := func(format string, args ...any) {
				t.Fatalf("scenario %d at t=%d: %s\n%+v\nsettings %+v\nscenario %+v", i, l.T, fmt.Sprintf(format, args...), l, *s, *sc)
			}
			if l.Event == "resume" || l.Event == "wake" {
				lastResume = l.T
			}
			if l.Event == "scale" && l.Error == "" {
				writers = [2]int{l.Writeonly, l.Dual} // a person may change them
			}
			if l.Direction == "" {
				return
			}
			if l.To-l.From != 1 && l.To-l.From != -1 {
				fail("moved %d nodes", l.To-l.From)
			}
			if l.Direction == "out" && (l.T-lastAction < s.ScaleOutCooldownSec || l.T-lastResume < s.ScaleOutCooldownSec) {
				fail("scaled out inside the out cooldown (last action %d, last resume %d)", lastAction, lastResume)
			}
			if l.Direction == "in" && l.T-lastAction < s.ScaleInCooldownSec {
				fail("scaled in inside the in cooldown (last action %d)", lastAction)
			}
			if l.To < sc.Pool.MinNodes || l.To > sc.Pool.MaxNodes {
				fail("size %d left the band [%d, %d]", l.To, sc.Pool.MinNodes, sc.Pool.MaxNodes)
			}
			if [2]int{l.Writeonly, l.Dual} != writers {
				fail("writers changed from %v", writers)
			}
			if l.Readonly+l.Dual < 1 {
				fail("no reader left")
			}
			if *l.OK {
				lastAction = l.T
			}
		})
	}
}

func randomScenario(rng *rand.Rand) (*Scenario, *Settings) {
	wo, dual := rng.IntN(3), rng.IntN(3)
	if wo+dual == 0 {
		dual = 1
	}
	minN := wo + dual + rng.IntN(3)
	maxN := minN + rng.IntN(6)
	size := minN + rng.IntN(maxN-minN+1)
	ro := size - wo - dual
	minutes := 30 + rng.IntN(150)
	load := make([]float64, minutes)
	level := rng.Float64() * 60 * 20
	for m := range load {
		if rng.IntN(10) == 0 {
			level = rng.Float64() * 60 * 20
		}
		load[m] = level * rng.Float64()
	}
	var events []Event
	for range rng.IntN(6) {
		e := Event{At: rng.IntN(minutes * 60)}
		switch rng.IntN(5) {
		case 0:
			e.Type = EventSuspend
		case 1:
			e.Type = EventResume
		case 2:
			e.Type, e.TargetSize = EventScale, rng.IntN(maxN+2)
		case 3:
			e.Type, e.Count = EventFail, 1+rng.IntN(4)
		case 4:
			e.Type, e.Readers = EventUnroutable, rng.IntN(2)
		}
		events = append(events, e)
	}
	settings := fmt.Sprintf(`{"sweepSeconds":%d,"outStreak":%d,"inStreak":%d,"scaleOutCooldownSec":%d,"scaleInCooldownSec":%d,"windowMinutes":%d,"failureBackoffSweeps":%d}`,
		30*(1+rng.IntN(3)), 1+rng.IntN(3), 1+rng.IntN(10), rng.IntN(400), rng.IntN(900), 1+rng.IntN(6), rng.IntN(6))
	sc := &Scenario{
		Settings: json.RawMessage(settings),
		Pool: Pool{RoleDistribution: pool.Roles{Writeonly: wo, Readonly: ro, Dual: dual}, MinNodes: minN, MaxNodes: maxN,
			MaxConcurrentPerNode: rng.IntN(8)},
		Load:   load,
		Events: events,
	}
	b, _ := json.Marshal(sc)
	parsed, s, err := Parse(strings.NewReader(string(b)))
	if err != nil {
		panic(fmt.Sprintf("random scenario refused: %v\n%s", err, b))
	}
	return parsed, s
}
