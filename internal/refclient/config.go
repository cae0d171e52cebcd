// Package refclient is the reference Aperio client: it serves one hostname
// by fronting a backend, heartbeats the server so the edge routes to it,
// announces the hostname's scaling block, and retires itself after
// idle_timeout with nothing arriving, draining what is in flight first.
// It is what makes the whole scaling loop runnable on one machine.
package refclient

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/hook"
)

// Config is the client's settings: aperio.yaml keys, each with an APERIO_*
// spelling. An environment variable overrides the file's value of the same
// field, one field at a time, so one file can serve several deployments.
type Config struct {
	ServerURL         string        // server.url: the API server
	Token             string        // server.token: the client's API key
	Hostname          string        // services[0].hostname
	Target            string        // services[0].target: the backend this client fronts
	Listen            string        // listen: where the client serves the edge
	ClientID          string        // client_id
	MaxConcurrent     int           // max_concurrent
	Priority          int           // priority: 0 primary, above standby
	ProbePath         string        // probe_path: the edge GETs it through the client
	IdleTimeout       time.Duration // idle_timeout: retire after this long with nothing arriving; 0 never
	HeartbeatInterval time.Duration // heartbeat_interval
	DrainTimeout      time.Duration // drain_timeout: the longest a retiring client waits for in-flight requests
	Maintenance       bool          // maintenance
	Resilience        bool          // resilience
	Fallback          string        // fallback
	// Scaling is the hostname's scaling block; nil when neither the file
	// nor the environment sets any of its fields.
	Scaling *Scaling
}

// Scaling is the scaling block as the client announces it: the
// declaration the server checks (hostname left empty: the heartbeat's), and
// the secret.
type Scaling struct {
	hook.Declaration
	Secret *string `json:"secret,omitempty"`
}

// Setting is one key the client reads.
type Setting struct {
	Key, Env, Help, Default string
	Secret                  bool
}

// Settings lists every key, in the order --help and --print-config show them.
var Settings = []Setting{
	{"server.url", "APERIO_SERVER_URL", "the API server the client heartbeats", "http://127.0.0.1:20900", false},
	{"server.token", "APERIO_SERVER_TOKEN", "the client's API key (a client or admin key of the hostname's org)", "", true},
	{"services.0.hostname", "APERIO_HOSTNAME", "the hostname this client serves", "", false},
	{"services.0.target", "APERIO_TARGET", "the backend the client fronts, an http(s) URL", "", false},
	{"listen", "APERIO_LISTEN", "where the client listens for the edge (port 0: any free port)", "127.0.0.1:0", false},
	{"client_id", "APERIO_CLIENT_ID", "this client's id among the hostname's clients", "<hostname>-<random>", false},
	{"max_concurrent", "APERIO_MAX_CONCURRENT", "requests one instance handles at once; what makes utilization measurable (0: unknown)", "0", false},
	{"priority", "APERIO_PRIORITY", "0 primary; above 0 standby (serves only when no primary can, never capacity)", "0", false},
	{"probe_path", "APERIO_PROBE_PATH", "path the edge GETs through this client to check the backend", "", false},
	{"idle_timeout", "APERIO_IDLE_TIMEOUT", "retire after this long with nothing arriving (0: never)", "0", false},
	{"heartbeat_interval", "APERIO_HEARTBEAT_INTERVAL", "time between heartbeats (1s to 25s; the server forgets a client after 30s)", "10s", false},
	{"drain_timeout", "APERIO_DRAIN_TIMEOUT", "the longest a retiring client waits for its in-flight requests", "30s", false},
	{"maintenance", "APERIO_MAINTENANCE", "the hostname is down for maintenance: 503 at the edge, no cold start", "false", false},
	{"resilience", "APERIO_RESILIENCE", "the edge keeps recent GET answers and serves them stale when no client answers", "false", false},
	{"fallback", "APERIO_FALLBACK", "where the edge redirects when no client answers in time", "", false},
	{"scaling.url", "APERIO_SCALING_URL", "the scale endpoint the server calls", "", false},
	{"scaling.secret", "APERIO_SCALING_SECRET", "sent as Authorization: Bearer on each call", "", true},
	{"scaling.min", "APERIO_SCALING_MIN", "instances to keep (0: scale to zero)", "", false},
	{"scaling.max", "APERIO_SCALING_MAX", "instances never to exceed", "", false},
	{"scaling.cold_start", "APERIO_SCALING_COLD_START", "how long a visitor may be held while an instance starts", "", false},
	{"scaling.target_utilization", "APERIO_SCALING_TARGET_UTILIZATION", "scale out at or above this utilization", "", false},
	{"scaling.window", "APERIO_SCALING_WINDOW", "how long utilization must stay there", "", false},
	{"scaling.cooldown", "APERIO_SCALING_COOLDOWN", "the least time between two calls", "", false},
}

// Source says where each key's value came from: "file", "env" or "default".
type Source = map[string]string

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Load reads the client's settings from the file (nil: none) and the
// environment. Every error names the key, where its value came from, and
// what is accepted.
func Load(f *config.File, getenv func(string) string) (Config, Source, error) {
	c := Config{HeartbeatInterval: 10 * time.Second, DrainTimeout: 30 * time.Second, Listen: "127.0.0.1:0", ServerURL: "http://127.0.0.1:20900"}
	src := Source{}
	raw := map[string]string{}
	where := map[string]string{}
	if f.Has("services.1") {
		return c, nil, fmt.Errorf("%s: services has more than one item; the reference client serves one hostname: run one client per service", f.Path)
	}
	for _, s := range Settings {
		src[s.Key] = "default"
		v, w, ok, err := f.Scalar(s.Key)
		if err != nil {
			return c, nil, err
		}
		if ok {
			raw[s.Key], where[s.Key], src[s.Key] = v, w+": "+s.Key, "file"
		}
		if e := getenv(s.Env); e != "" {
			raw[s.Key], where[s.Key], src[s.Key] = e, s.Env, "env"
		}
	}
	if err := f.Unknown(); err != nil {
		return c, nil, err
	}
	for k, v := range raw {
		v = strings.TrimSpace(v)
		if k == "server.token" || k == "scaling.secret" {
			// ${NAME} in a secret is read from the environment, so the file
			// can be committed without it.
			var missing []string
			v = envRef.ReplaceAllStringFunc(v, func(m string) string {
				name := envRef.FindStringSubmatch(m)[1]
				val := getenv(name)
				if val == "" {
					missing = append(missing, name)
				}
				return val
			})
			if len(missing) > 0 {
				return c, nil, fmt.Errorf("%s refers to %s, which is not set in the environment", where[k], strings.Join(missing, ", "))
			}
		}
		if err := c.set(k, v, where[k]); err != nil {
			return c, nil, err
		}
	}
	if c.Hostname == "" {
		return c, nil, fmt.Errorf("the hostname is required: set services[0].hostname in aperio.yaml or APERIO_HOSTNAME")
	}
	if c.Target == "" {
		return c, nil, fmt.Errorf("the backend is required: set services[0].target in aperio.yaml or APERIO_TARGET, e.g. http://127.0.0.1:3000")
	}
	if c.Token == "" {
		return c, nil, fmt.Errorf("the API key is required: set server.token in aperio.yaml or APERIO_SERVER_TOKEN")
	}
	if c.ClientID == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.ClientID = c.Hostname + "-" + hex.EncodeToString(b)
	}
	if c.Scaling != nil {
		if c.IdleTimeout > 0 {
			c.Scaling.IdleTimeout = c.IdleTimeout.String()
		}
		if c.MaxConcurrent > 0 {
			mc := c.MaxConcurrent
			c.Scaling.MaxConcurrent = &mc
		}
	}
	return c, src, nil
}

func (c *Config) scaling() *Scaling {
	if c.Scaling == nil {
		c.Scaling = &Scaling{}
	}
	return c.Scaling
}

func (c *Config) set(key, v, where string) error {
	bad := func(accepted string) error {
		return fmt.Errorf("%s: %q is not accepted; accepted: %s", where, clip(v), accepted)
	}
	switch key {
	case "server.url", "services.0.target":
		if _, ok := hook.ParseHTTPURL(v); !ok {
			return bad("an absolute http(s) URL without credentials, such as http://127.0.0.1:3000")
		}
		if key == "server.url" {
			c.ServerURL = strings.TrimSuffix(v, "/")
		} else {
			c.Target = v
		}
	case "server.token":
		c.Token = v
	case "services.0.hostname":
		c.Hostname = strings.ToLower(v)
	case "listen":
		c.Listen = v
	case "client_id":
		if len(v) > 128 {
			return bad("1 to 128 characters")
		}
		c.ClientID = v
	case "max_concurrent", "priority":
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (key == "priority" && n > 100) || n > 1_000_000 {
			if key == "priority" {
				return bad("a whole number from 0 (primary) to 100")
			}
			return bad("a whole number from 0 to 1000000")
		}
		if key == "priority" {
			c.Priority = n
		} else {
			c.MaxConcurrent = n
		}
	case "probe_path":
		if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "?# \t") || len(v) > 1024 {
			return bad("a path starting with / (no query), such as /healthz")
		}
		c.ProbePath = v
	case "idle_timeout", "heartbeat_interval", "drain_timeout":
		d, err := time.ParseDuration(v)
		if v == "0" {
			d, err = 0, nil
		}
		switch {
		case err != nil || d < 0:
			return bad("a duration such as 5m or 30s")
		case key == "idle_timeout":
			c.IdleTimeout = d
		case key == "heartbeat_interval":
			if d < time.Second || d > 25*time.Second {
				return bad("from 1s to 25s")
			}
			c.HeartbeatInterval = d
		default:
			c.DrainTimeout = d
		}
	case "maintenance", "resilience":
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("true or false")
		}
		if key == "maintenance" {
			c.Maintenance = b
		} else {
			c.Resilience = b
		}
	case "fallback":
		if _, ok := hook.ParseHTTPURL(v); !ok {
			return bad("an absolute http(s) URL without credentials, such as https://status.example.com")
		}
		c.Fallback = v
	case "scaling.url":
		c.scaling().URL = v
	case "scaling.secret":
		c.scaling().Secret = &v
	case "scaling.min", "scaling.max":
		n, err := strconv.Atoi(v)
		if err != nil {
			return bad("a whole number")
		}
		if key == "scaling.min" {
			c.scaling().Min = &n
		} else {
			c.scaling().Max = &n
		}
	case "scaling.target_utilization":
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return bad("a number such as 0.8")
		}
		c.scaling().TargetUtilization = &x
	case "scaling.cold_start":
		c.scaling().ColdStart = v
	case "scaling.window":
		c.scaling().Window = v
	case "scaling.cooldown":
		c.scaling().Cooldown = v
	}
	return nil
}

// Describe renders the settings as --print-config shows them: every key,
// its value (secrets shown as set or not) and where it came from.
func (c Config) Describe(src Source) string {
	var b strings.Builder
	vals := map[string]string{
		"server.url": c.ServerURL, "services.0.hostname": c.Hostname, "services.0.target": c.Target,
		"listen": c.Listen, "client_id": c.ClientID, "max_concurrent": strconv.Itoa(c.MaxConcurrent),
		"priority": strconv.Itoa(c.Priority), "probe_path": c.ProbePath, "idle_timeout": c.IdleTimeout.String(),
		"heartbeat_interval": c.HeartbeatInterval.String(), "drain_timeout": c.DrainTimeout.String(),
		"maintenance": strconv.FormatBool(c.Maintenance), "resilience": strconv.FormatBool(c.Resilience), "fallback": c.Fallback,
	}
	if c.Token != "" {
		vals["server.token"] = "(set)"
	}
	if s := c.Scaling; s != nil {
		vals["scaling.url"], vals["scaling.cold_start"], vals["scaling.window"], vals["scaling.cooldown"] = s.URL, s.ColdStart, s.Window, s.Cooldown
		if s.Secret != nil {
			vals["scaling.secret"] = "(set)"
		}
		for k, p := range map[string]*int{"scaling.min": s.Min, "scaling.max": s.Max} {
			if p != nil {
				vals[k] = strconv.Itoa(*p)
			}
		}
		if s.TargetUtilization != nil {
			vals["scaling.target_utilization"] = strconv.FormatFloat(*s.TargetUtilization, 'g', -1, 64)
		}
	}
	for _, s := range Settings {
		fmt.Fprintf(&b, "%-28s %-40s %s\n", strings.Replace(s.Key, ".0.", "[0].", 1), vals[s.Key], src[s.Key])
	}
	return b.String()
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
