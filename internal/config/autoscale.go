// Package config reads and checks the server's settings. Every setting has a
// default, an environment variable and a key in the YAML file; the file wins
// over the environment, which wins over the default. A bad value stops
// start-up with a message naming the key, the value and what is accepted.
package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
)

// MinSweepSeconds is the floor sweepSeconds is clamped to.
const MinSweepSeconds = 30

// Autoscale holds the manager-wide QoD autoscale settings.
type Autoscale = api.AutoscaleConfig

// DefaultAutoscale returns the documented defaults.
func DefaultAutoscale() Autoscale {
	return Autoscale{
		Enabled:                   true,
		SweepSeconds:              60,
		WindowMinutes:             5,
		HighWatermark:             0.8,
		LowWatermark:              0.3,
		OutStreak:                 2,
		InStreak:                  10,
		ScaleOutCooldownSec:       180,
		ScaleInCooldownSec:        600,
		AssumedConcurrencyPerNode: 4,
		HardCap:                   band.DefaultHardCap,
		FailureBackoffSweeps:      5,
	}
}

// setting describes one key: its YAML name, its variable, and where it lands.
type setting struct {
	key, env string
	intp     *int
	floatp   *float64
	boolp    *bool
	min, max float64 // accepted range for numbers
}

func settingsOf(a *Autoscale) []setting {
	return []setting{
		{key: "enabled", env: "QOD_AUTOSCALE_ENABLED", boolp: &a.Enabled},
		{key: "sweepSeconds", env: "QOD_AUTOSCALE_SWEEP_SEC", intp: &a.SweepSeconds, min: 1, max: 86400},
		{key: "windowMinutes", env: "QOD_AUTOSCALE_WINDOW_MINUTES", intp: &a.WindowMinutes, min: 1, max: 60},
		{key: "highWatermark", env: "QOD_AUTOSCALE_HIGH_WATERMARK", floatp: &a.HighWatermark, min: 0, max: 100},
		{key: "lowWatermark", env: "QOD_AUTOSCALE_LOW_WATERMARK", floatp: &a.LowWatermark, min: 0, max: 100},
		{key: "outStreak", env: "QOD_AUTOSCALE_OUT_STREAK", intp: &a.OutStreak, min: 1, max: 1000},
		{key: "inStreak", env: "QOD_AUTOSCALE_IN_STREAK", intp: &a.InStreak, min: 1, max: 1000},
		{key: "scaleOutCooldownSec", env: "QOD_AUTOSCALE_OUT_COOLDOWN_SEC", intp: &a.ScaleOutCooldownSec, min: 0, max: 604800},
		{key: "scaleInCooldownSec", env: "QOD_AUTOSCALE_IN_COOLDOWN_SEC", intp: &a.ScaleInCooldownSec, min: 0, max: 604800},
		{key: "assumedConcurrencyPerNode", env: "QOD_AUTOSCALE_ASSUMED_CONCURRENCY", intp: &a.AssumedConcurrencyPerNode, min: 1, max: 1_000_000},
		{key: "hardCap", env: "QOD_AUTOSCALE_HARD_CAP", intp: &a.HardCap, min: 1, max: 1024},
		{key: "failureBackoffSweeps", env: "QOD_AUTOSCALE_FAILURE_BACKOFF_SWEEPS", intp: &a.FailureBackoffSweeps, min: 0, max: 10000},
	}
}

// AutoscaleEnv maps each autoscale key to its environment variable.
func AutoscaleEnv() map[string]string {
	var a Autoscale
	out := map[string]string{}
	for _, s := range settingsOf(&a) {
		out[s.key] = s.env
	}
	return out
}

// AutoscaleFromEnv starts from the defaults, applies every QOD_AUTOSCALE_*
// variable that getenv returns non-empty, and checks the result.
func AutoscaleFromEnv(getenv func(string) string) (Autoscale, error) {
	a, _, err := LoadAutoscale(nil, getenv)
	return a, err
}

// Source says where an effective setting came from.
type Source string

const (
	FromDefault Source = "default"
	FromEnv     Source = "env"
	FromFile    Source = "file"
)

// AutoscalePrefix is where the autoscale settings sit in the YAML file.
const AutoscalePrefix = "quack-on-demand.autoscale."

// LoadAutoscale layers the defaults, the environment and the file (nil: no
// file), checks the result and reports each key's source.
func LoadAutoscale(f *File, getenv func(string) string) (Autoscale, map[string]Source, error) {
	a := DefaultAutoscale()
	sources := map[string]Source{}
	for _, s := range settingsOf(&a) {
		sources[s.key] = FromDefault
		if raw := strings.TrimSpace(getenv(s.env)); raw != "" {
			if err := s.set(raw, s.name()); err != nil {
				return a, nil, err
			}
			sources[s.key] = FromEnv
		}
		raw, where, ok, err := f.Scalar(AutoscalePrefix + s.key)
		if err != nil {
			return a, nil, err
		}
		if ok {
			if err := s.set(strings.TrimSpace(raw), where+": "+AutoscalePrefix+s.key); err != nil {
				return a, nil, err
			}
			sources[s.key] = FromFile
		}
	}
	return a, sources, CheckAutoscale(&a)
}

func (s setting) name() string { return fmt.Sprintf("quack-on-demand.autoscale.%s (%s)", s.key, s.env) }

func (s setting) set(raw, name string) error {
	switch {
	case s.boolp != nil:
		v, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%s is %q; accepted: true or false", name, raw)
		}
		*s.boolp = v
	case s.intp != nil:
		v, err := strconv.Atoi(raw)
		if err != nil || float64(v) < s.min || float64(v) > s.max {
			return fmt.Errorf("%s is %q; accepted: a whole number from %g to %g", name, raw, s.min, s.max)
		}
		*s.intp = v
	case s.floatp != nil:
		v, err := strconv.ParseFloat(raw, 64)
		if err != nil || math.IsNaN(v) || v < s.min || v > s.max {
			return fmt.Errorf("%s is %q; accepted: a number from %g to %g", name, raw, s.min, s.max)
		}
		*s.floatp = v
	}
	return nil
}

// CheckAutoscale checks the relations between settings and clamps
// sweepSeconds to its floor.
func CheckAutoscale(a *Autoscale) error {
	for _, s := range settingsOf(a) {
		var v float64
		switch {
		case s.intp != nil:
			v = float64(*s.intp)
		case s.floatp != nil:
			v = *s.floatp
		default:
			continue
		}
		if math.IsNaN(v) || v < s.min || v > s.max {
			return fmt.Errorf("%s is %v; accepted: %g to %g", s.name(), v, s.min, s.max)
		}
	}
	if a.LowWatermark >= a.HighWatermark {
		return fmt.Errorf("quack-on-demand.autoscale.lowWatermark %v must be below highWatermark %v", a.LowWatermark, a.HighWatermark)
	}
	if a.SweepSeconds < MinSweepSeconds {
		a.SweepSeconds = MinSweepSeconds
	}
	return nil
}
