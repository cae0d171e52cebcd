package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qodaperio/autoscale/internal/hooksim"
	"github.com/qodaperio/autoscale/internal/qodsim"
)

// TestSimulateExamples runs every scenario in examples/simulate, as the docs
// tell an operator to, and checks each prints decodable lines with actions.
func TestSimulateExamples(t *testing.T) {
	files, err := filepath.Glob("../../../examples/simulate/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cmd := newRootCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetArgs([]string{"simulate", "--actions-only", f})
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(filepath.Base(f), "hook") {
				checkHookExample(t, out.String())
				return
			}
			actions := 0
			for _, raw := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var l qodsim.Line
				if err := json.Unmarshal([]byte(raw), &l); err != nil {
					t.Fatalf("line %q: %v", raw, err)
				}
				if l.Direction == "" && l.Event == "" {
					t.Fatalf("--actions-only printed a held sweep: %s", raw)
				}
				if l.Direction != "" {
					actions++
				}
			}
			if actions == 0 {
				t.Fatal("the example scenario makes no scaling decision")
			}
		})
	}
}

func TestSimulateRefusesBadScenario(t *testing.T) {
	cmd := newRootCmd()
	cmd.SetIn(strings.NewReader(`{"pool":{"roleDistribution":{"readonly":1},"minNodes":1,"maxNodes":2},"load":[1],"events":[{"at":10,"type":"explode"}]}`))
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"simulate", "-"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `events[0].type "explode"; accepted: suspend, resume, scale, fail, unroutable`) {
		t.Fatalf("got %v", err)
	}
}

// checkHookExample: a hook example shows every kind of call the loop makes,
// and a failure.
func checkHookExample(t *testing.T, out string) {
	t.Helper()
	seen := map[string]bool{}
	for _, raw := range strings.Split(strings.TrimSpace(out), "\n") {
		var l hooksim.Line
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatalf("line %q: %v", raw, err)
		}
		seen[l.Reason] = true
		if !l.OK && l.Event == "" {
			seen["failed"] = true
		}
	}
	for _, want := range []string{"cold_start", "scale_out", "scale_in", "failed"} {
		if !seen[want] {
			t.Errorf("the hook example shows no %s call:\n%s", want, out)
		}
	}
}
