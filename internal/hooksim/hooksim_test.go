package hooksim

import (
	"fmt"
	"strings"
	"testing"
)

func run(t *testing.T, text string) []Line {
	t.Helper()
	sc, h, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var out []Line
	Run(sc, h, func(l Line) { out = append(out, l) })
	return out
}

func TestColdStartThenScaleOutThenIn(t *testing.T) {
	lines := run(t, `{"hook":{"hostname":"app.example.com","url":"https://hooks.example.com/scale","min":0,"max":8,"window":"15s","cooldown":"60s"},
		"samples":[
			{"at":0,"clients":0,"waiting":30},
			{"at":40,"clients":4,"max_concurrent":10,"inflight":32},
			{"at":200,"clients":5,"max_concurrent":10,"inflight":5}],
		"duration_seconds":400}`)
	var got []string
	for _, l := range lines {
		got = append(got, fmt.Sprintf("%d %s %d->%d %v", l.T, l.Reason, l.Current, l.Desired, l.OK))
	}
	// The samples drive the pool: it stays at four saturated clients until
	// 200, so the loop asks again after every cooldown.
	want := []string{
		"0 cold_start 0->1 true",
		"60 scale_out 4->5 true", // above since 40 for a window, but the cooldown from t=0 ends at 60
		"120 scale_out 4->5 true",
		"180 scale_out 4->5 true",
		"260 scale_in 5->4 true", // idle since 200 for four windows
		"321 scale_in 5->4 true", // a fresh four windows from the tick after the last call
		"382 scale_in 5->4 true",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestFailuresBackOffAndTripTheBreaker(t *testing.T) {
	lines := run(t, `{"hook":{"hostname":"app.example.com","url":"https://hooks.example.com/scale","max":2,"cooldown":"60s"},
		"samples":[{"at":0,"waiting":1}],"failures":[{"at":0,"count":5}],"duration_seconds":100}`)
	var ts []int
	for _, l := range lines {
		if l.Event == "scaling_disarmed" {
			ts = append(ts, -l.T)
			continue
		}
		if l.OK {
			t.Fatalf("a call succeeded: %+v", l)
		}
		ts = append(ts, l.T)
	}
	// 1, 2, 4, 8 s of backoff, then the breaker at the fifth.
	if fmt.Sprint(ts) != "[0 1 3 7 15 -15]" {
		t.Fatalf("calls at %v", ts)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for text, want := range map[string]string{
		`{"hook":{"hostname":"a.example.com","url":"https://x.example/","max":0},"samples":[{"at":0}]}`:                                 "hook: max is 0; accepted: 1 to 10000",
		`{"hook":{"hostname":"a.example.com","url":"https://x.example/","max":2},"samples":[]}`:                                         "samples is empty",
		`{"hook":{"hostname":"a.example.com","url":"https://x.example/","max":2},"samples":[{"at":-1}]}`:                                "samples[0].at is -1",
		`{"hook":{"hostname":"a.example.com","url":"https://x.example/","max":2},"samples":[{"at":0,"inflight":-3}]}`:                   "samples[0] has a negative count",
		`{"hook":{"hostname":"a.example.com","url":"https://x.example/","max":2},"samples":[{"at":0}],"failures":[{"at":0,"count":0}]}`: "failures[0]",
		`{"hook":{"hostname":"a.example.com","url":"https://x.example/","max":2},"samples":[{"at":0}],"colour":1}`:                      `unknown field "colour"`,
	} {
		if _, _, err := Parse(strings.NewReader(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", text, err, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"hook":{"hostname":"a.example.com","url":"https://x.example/","max":2},"samples":[{"at":0,"waiting":1}]}`)
	f.Add(`{"hook":{},"samples":[{"at":86400,"clients":1000000,"max_concurrent":1000000,"inflight":1}]}`)
	f.Fuzz(func(t *testing.T, text string) {
		sc, h, err := Parse(strings.NewReader(text))
		if err != nil {
			return
		}
		if sc.DurationSeconds > 3600 {
			sc.DurationSeconds = 3600 // keep one fuzz input cheap
		}
		Run(sc, h, func(Line) {})
	})
}
