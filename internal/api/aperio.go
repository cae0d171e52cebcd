package api

import "time"

// The Aperio half speaks snake_case JSON, as its reference page does.

// ScalingPoolView is a hostname's live client pool as the hook loop sees it.
type ScalingPoolView struct {
	Instances   int      `json:"instances"`
	Capacity    int      `json:"capacity"`
	Inflight    int      `json:"inflight"`
	Utilization *float64 `json:"utilization"`
}

// ScalingRecord is a scaling hook as the API shows it: the declaration with
// its defaults, never the secret.
type ScalingRecord struct {
	ID                string    `json:"id"`
	Hostname          string    `json:"hostname"`
	Org               string    `json:"org"`
	URL               string    `json:"url"`
	Min               int       `json:"min"`
	Max               int       `json:"max"`
	ColdStart         string    `json:"cold_start"`
	TargetUtilization float64   `json:"target_utilization"`
	Window            string    `json:"window"`
	Cooldown          string    `json:"cooldown"`
	IdleTimeout       string    `json:"idle_timeout"`
	MaxConcurrent     int       `json:"max_concurrent"`
	SecretSet         bool      `json:"secret_set"`
	Armed             bool      `json:"armed"`
	Breaker           string    `json:"breaker"` // "closed", or "open" after five failures in a row
	Failures          int       `json:"failures"`
	Source            string    `json:"source"` // "api" or "heartbeat"
	AnnouncedAt       time.Time `json:"announced_at"`
	UpdatedAt         time.Time `json:"updated_at"`
	// Active is false while the server ignores declarations
	// (APERIO_SCALING off); Notice then says so.
	Active bool             `json:"active"`
	Notice string           `json:"notice,omitempty"`
	Pool   *ScalingPoolView `json:"pool,omitempty"`
}

// ScalingList is the answer of GET /api/scaling.
type ScalingList struct {
	Records []ScalingRecord `json:"records"`
}

// ScalingValidation is the answer of POST /api/scaling/validate.
type ScalingValidation struct {
	Valid  bool          `json:"valid"`
	Record ScalingRecord `json:"record"`
}
