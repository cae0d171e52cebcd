package config

import (
	"strings"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	a, err := AutoscaleFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if a != DefaultAutoscale() || a.HardCap != 16 || a.SweepSeconds != 60 || a.HighWatermark != 0.8 {
		t.Fatalf("defaults: %+v", a)
	}
}

func TestFromEnv(t *testing.T) {
	a, err := AutoscaleFromEnv(env(map[string]string{
		"QOD_AUTOSCALE_HARD_CAP": "8", "QOD_AUTOSCALE_ENABLED": "false", "QOD_AUTOSCALE_SWEEP_SEC": "5",
		"QOD_AUTOSCALE_LOW_WATERMARK": "0.1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if a.HardCap != 8 || a.Enabled || a.LowWatermark != 0.1 {
		t.Fatalf("got %+v", a)
	}
	if a.SweepSeconds != MinSweepSeconds {
		t.Fatalf("sweepSeconds 5 not clamped to %d: %d", MinSweepSeconds, a.SweepSeconds)
	}
}

func TestBadSettingsNameKeyValueAndRange(t *testing.T) {
	cases := map[string][2]string{
		"QOD_AUTOSCALE_HARD_CAP":       {"0", `quack-on-demand.autoscale.hardCap (QOD_AUTOSCALE_HARD_CAP) is "0"; accepted: a whole number from 1 to 1024`},
		"QOD_AUTOSCALE_ENABLED":        {"yes please", `enabled (QOD_AUTOSCALE_ENABLED) is "yes please"; accepted: true or false`},
		"QOD_AUTOSCALE_HIGH_WATERMARK": {"NaN", `highWatermark (QOD_AUTOSCALE_HIGH_WATERMARK) is "NaN"`},
		"QOD_AUTOSCALE_IN_STREAK":      {"-2", `inStreak (QOD_AUTOSCALE_IN_STREAK) is "-2"`},
		"QOD_AUTOSCALE_LOW_WATERMARK":  {"0.9", "lowWatermark 0.9 must be below highWatermark 0.8"},
	}
	for k, c := range cases {
		_, err := AutoscaleFromEnv(env(map[string]string{k: c[0]}))
		if err == nil || !strings.Contains(err.Error(), c[1]) {
			t.Errorf("%s=%s: got %v, want %q", k, c[0], err, c[1])
		}
	}
}
