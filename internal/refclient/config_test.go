package refclient

import (
	"strings"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/config"
)

const sampleFile = `
server:
  url: http://127.0.0.1:20900
  token: ${EDGE_TOKEN}
services:
  - target: http://127.0.0.1:3000
    hostname: App.Example.com
scaling:
  url: https://api.provider.example/apps/web/scale
  secret: ${SCALE_SECRET}
  min: 0
  max: 8
  cold_start: 45s
  target_utilization: 0.8
  window: 15s
  cooldown: 60s
idle_timeout: 5m
max_concurrent: 10
`

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadLayersTheEnvironmentFieldByField(t *testing.T) {
	f, err := config.ParseFile("aperio.yaml", []byte(sampleFile))
	if err != nil {
		t.Fatal(err)
	}
	c, src, err := Load(f, env(map[string]string{"EDGE_TOKEN": "tok", "SCALE_SECRET": "s3cret", "APERIO_SCALING_MAX": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Scaling
	if c.Token != "tok" || c.Hostname != "app.example.com" || c.Target != "http://127.0.0.1:3000" || c.IdleTimeout != 5*time.Minute || c.MaxConcurrent != 10 {
		t.Fatalf("%+v", c)
	}
	if s == nil || *s.Max != 3 || *s.Min != 0 || s.ColdStart != "45s" || *s.TargetUtilization != 0.8 || *s.Secret != "s3cret" || s.IdleTimeout != "5m0s" || *s.MaxConcurrent != 10 {
		t.Fatalf("scaling %+v", s)
	}
	if src["scaling.max"] != "env" || src["scaling.min"] != "file" || src["priority"] != "default" {
		t.Fatalf("sources %v", src)
	}
	out := c.Describe(src)
	if strings.Contains(out, "s3cret") || strings.Contains(out, "tok ") || !strings.Contains(out, "(set)") {
		t.Fatalf("secrets in --print-config:\n%s", out)
	}
}

func TestLoadEnvironmentOnly(t *testing.T) {
	c, _, err := Load(nil, env(map[string]string{"APERIO_SERVER_TOKEN": "k", "APERIO_HOSTNAME": "a.localhost", "APERIO_TARGET": "http://127.0.0.1:1",
		"APERIO_SCALING_URL": "http://127.0.0.1:2/scale", "APERIO_SCALING_MIN": "0"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Scaling == nil || c.Scaling.URL != "http://127.0.0.1:2/scale" || c.Scaling.Max != nil || !strings.HasPrefix(c.ClientID, "a.localhost-") {
		t.Fatalf("%+v %+v", c, c.Scaling)
	}
	c, _, _ = Load(nil, env(map[string]string{"APERIO_SERVER_TOKEN": "k", "APERIO_HOSTNAME": "a.localhost", "APERIO_TARGET": "http://127.0.0.1:1"}))
	if c.Scaling != nil {
		t.Fatal("a scaling block appeared from nothing")
	}
}

func TestLoadErrorsNameTheField(t *testing.T) {
	base := map[string]string{"APERIO_SERVER_TOKEN": "k", "APERIO_HOSTNAME": "a.localhost", "APERIO_TARGET": "http://127.0.0.1:1"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for a, b := range base {
			if a != k {
				m[a] = b
			}
		}
		return m
	}
	for _, tc := range []struct {
		env  map[string]string
		file string
		want string
	}{
		{with("APERIO_MAX_CONCURRENT", "ten"), "", `APERIO_MAX_CONCURRENT: "ten" is not accepted; accepted: a whole number from 0 to 1000000`},
		{with("APERIO_PRIORITY", "101"), "", "APERIO_PRIORITY"},
		{with("APERIO_IDLE_TIMEOUT", "5 minutes"), "", "APERIO_IDLE_TIMEOUT"},
		{with("APERIO_HEARTBEAT_INTERVAL", "40s"), "", "from 1s to 25s"},
		{with("APERIO_TARGET", "localhost:3000"), "", "APERIO_TARGET"},
		{with("APERIO_PROBE_PATH", "healthz"), "", "a path starting with /"},
		{with("APERIO_SCALING_MIN", "none"), "", "APERIO_SCALING_MIN"},
		{with("APERIO_SCALING_TARGET_UTILIZATION", "high"), "", "APERIO_SCALING_TARGET_UTILIZATION"},
		{with("APERIO_MAINTENANCE", "maybe"), "", "true or false"},
		{with("APERIO_HOSTNAME", ""), "", "the hostname is required"},
		{base, "idle_timeout: 5m\nidle_timout: 5m\n", "idle_timout"},
		{base, "max_concurrent: [1, 2]\n", "must be a single value"},
		{base, "services:\n  - hostname: a\n  - hostname: b\n", "run one client per service"},
		{base, "scaling:\n  secret: ${NOT_SET}\n", "NOT_SET, which is not set"},
		{base, "max_concurrent: -1\n", "aperio.yaml line 1: max_concurrent"},
	} {
		var f *config.File
		if tc.file != "" {
			var err error
			if f, err = config.ParseFile("aperio.yaml", []byte(tc.file)); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := Load(f, env(tc.env))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: %v, want %q", tc.env, tc.file, err, tc.want)
		}
	}
}

// FuzzLoad feeds aperio.yaml text and one variable to the client's loader:
// it never panics, and a setting it accepts is usable.
func FuzzLoad(f *testing.F) {
	f.Add(sampleFile, "APERIO_SCALING_MAX", "3")
	f.Add("services:\n  - {hostname: a.localhost, target: http://127.0.0.1:1}\n", "APERIO_IDLE_TIMEOUT", "5m")
	f.Add("scaling: {min: x}\n", "APERIO_PRIORITY", "-1")
	f.Add("server: {token: ${A}${B}}\n", "APERIO_FALLBACK", "javascript:alert(1)")
	f.Fuzz(func(t *testing.T, file, name, value string) {
		cf, err := config.ParseFile("aperio.yaml", []byte(file))
		if err != nil {
			return
		}
		env := map[string]string{"APERIO_SERVER_TOKEN": "k", "APERIO_HOSTNAME": "a.localhost", "APERIO_TARGET": "http://127.0.0.1:1", name: value}
		c, src, err := Load(cf, func(k string) string { return env[k] })
		if err != nil {
			return
		}
		if c.Hostname == "" || c.Target == "" || c.Token == "" || c.HeartbeatInterval < time.Second || c.MaxConcurrent < 0 || c.Priority < 0 || c.Priority > 100 {
			t.Fatalf("accepted an unusable config: %+v", c)
		}
		_ = c.Describe(src)
	})
}
