// Package hook holds the Aperio scaling-hook declaration and its rules,
// written once: the server checks every declaration with them and the
// aperio provider shows the same errors at plan time.
package hook

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
)

// Declaration is a scaling hook as a client or an operator declares it for a
// hostname (snake_case, as in the Aperio reference). Pointers and strings
// left empty take the defaults.
type Declaration struct {
	Hostname          string   `json:"hostname"`
	URL               string   `json:"url"`
	Min               *int     `json:"min,omitempty"`
	Max               *int     `json:"max"`
	ColdStart         string   `json:"cold_start,omitempty"`
	TargetUtilization *float64 `json:"target_utilization,omitempty"`
	Window            string   `json:"window,omitempty"`
	Cooldown          string   `json:"cooldown,omitempty"`
	IdleTimeout       string   `json:"idle_timeout,omitempty"`
	MaxConcurrent     *int     `json:"max_concurrent,omitempty"`
}

// Hook is a declaration that passed every rule, with its defaults filled in.
type Hook struct {
	Hostname          string
	URL               string
	Min, Max          int
	ColdStart         time.Duration
	TargetUtilization float64
	Window            time.Duration
	Cooldown          time.Duration
	IdleTimeout       time.Duration
	MaxConcurrent     int
}

// Defaults and bounds of the fields.
const (
	MaxInstances       = 10_000
	MaxMaxConcurrent   = 1_000_000
	DefaultColdStart   = 30 * time.Second
	MaxColdStart       = 10 * time.Minute
	DefaultTarget      = 0.8
	DefaultWindow      = 15 * time.Second
	MaxWindow          = time.Hour
	DefaultCooldown    = 60 * time.Second
	MaxCooldown        = 24 * time.Hour
	DefaultIdleTimeout = 5 * time.Minute
	MaxIdleTimeout     = 24 * time.Hour
	maxHostnameLen     = 253
	maxURLLen          = 2048
	durationSyntaxHint = "a Go duration such as 45s, 1m30s or 2h"
)

func invalid(field, format string, args ...any) error {
	return api.Errorf(api.CodeInvalidHook, "%s %s", field, fmt.Sprintf(format, args...))
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// duration parses a Go duration within [lo, hi], or takes def when empty.
func duration(field, raw string, def, lo, hi time.Duration) (time.Duration, error) {
	if raw == "" {
		return def, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		return 0, invalid(field, "%q is not a duration; accepted: %s", clip(raw), durationSyntaxHint)
	}
	if d < lo || d > hi {
		return 0, invalid(field, "is %s; accepted: %s to %s", d, lo, hi)
	}
	return d, nil
}

// ValidHostname reports why h is not a DNS name (lowercase letters, digits
// and hyphens in dot-separated labels of 1 to 63 characters, at most 253 in
// all), or nil.
func ValidHostname(h string) error {
	const accepted = "accepted: a DNS name such as app.example.com (lowercase letters, digits, '-' and '.')"
	if h == "" {
		return invalid("hostname", "is required; %s", accepted)
	}
	if len(h) > maxHostnameLen {
		return invalid("hostname", "is %d characters long; %s, at most %d characters", len(h), accepted, maxHostnameLen)
	}
	for _, label := range strings.Split(h, ".") {
		ok := len(label) >= 1 && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for i := 0; ok && i < len(label); i++ {
			c := label[i]
			ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
		}
		if !ok {
			return invalid("hostname", "%q is not a DNS name; %s", clip(h), accepted)
		}
	}
	return nil
}

// Validate checks a declaration against every static rule and returns the
// hook with its defaults. Rules that need the network (the outbound fence)
// are the server's.
func (d Declaration) Validate() (Hook, error) {
	h := Hook{Hostname: d.Hostname, URL: d.URL}
	if err := ValidHostname(d.Hostname); err != nil {
		return h, err
	}
	if err := checkURL(d.URL); err != nil {
		return h, err
	}
	if d.Max == nil {
		return h, invalid("max", "is required; accepted: 1 to %d", MaxInstances)
	}
	h.Max = *d.Max
	if h.Max < 1 || h.Max > MaxInstances {
		return h, invalid("max", "is %d; accepted: 1 to %d", h.Max, MaxInstances)
	}
	if d.Min != nil {
		h.Min = *d.Min
	}
	if h.Min < 0 || h.Min > MaxInstances {
		return h, invalid("min", "is %d; accepted: 0 to %d", h.Min, MaxInstances)
	}
	if h.Min > h.Max {
		return h, invalid("min", "%d is above max %d; accepted: min <= max", h.Min, h.Max)
	}
	h.TargetUtilization = DefaultTarget
	if d.TargetUtilization != nil {
		h.TargetUtilization = *d.TargetUtilization
	}
	if math.IsNaN(h.TargetUtilization) || h.TargetUtilization <= 0 || h.TargetUtilization > 1 {
		return h, invalid("target_utilization", "is %v; accepted: above 0, at most 1", h.TargetUtilization)
	}
	var err error
	if h.ColdStart, err = duration("cold_start", d.ColdStart, DefaultColdStart, time.Second, MaxColdStart); err != nil {
		return h, err
	}
	if h.Window, err = duration("window", d.Window, DefaultWindow, time.Second, MaxWindow); err != nil {
		return h, err
	}
	if h.Cooldown, err = duration("cooldown", d.Cooldown, DefaultCooldown, 0, MaxCooldown); err != nil {
		return h, err
	}
	if h.IdleTimeout, err = duration("idle_timeout", d.IdleTimeout, DefaultIdleTimeout, 0, MaxIdleTimeout); err != nil {
		return h, err
	}
	if d.MaxConcurrent != nil {
		h.MaxConcurrent = *d.MaxConcurrent
	}
	if h.MaxConcurrent < 0 || h.MaxConcurrent > MaxMaxConcurrent {
		return h, invalid("max_concurrent", "is %d; accepted: 0 (no limit announced) to %d", h.MaxConcurrent, MaxMaxConcurrent)
	}
	return h, nil
}

// checkURL is the static half of the URL's rules: an absolute http or https
// URL with a host and no credentials. Whether the server may call it is the
// outbound fence's question.
// ParseHTTPURL parses an absolute http or https URL with a host and no
// credentials: the shape of every URL a client hands the server (a hook, a
// target, a fallback). ok is false for anything else.
func ParseHTTPURL(raw string) (u *url.URL, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" || u.User != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, false
	}
	return u, true
}

func checkURL(raw string) error {
	const accepted = "accepted: an absolute https:// URL such as https://api.example.com/scale"
	if raw == "" {
		return invalid("url", "is required; %s", accepted)
	}
	if len(raw) > maxURLLen {
		return invalid("url", "is %d characters long; %s, at most %d characters", len(raw), accepted, maxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return invalid("url", "%q is not an absolute URL; %s", clip(raw), accepted)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return invalid("url", "scheme %q is not accepted; %s", clip(u.Scheme), accepted)
	}
	if u.User != nil {
		return invalid("url", "carries credentials; put the secret in secret, never in the URL")
	}
	if u.Fragment != "" {
		return invalid("url", "has a #fragment, which is never sent; remove it")
	}
	return nil
}
