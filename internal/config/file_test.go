package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parse(t *testing.T, text string) *File {
	t.Helper()
	f, err := ParseFile("server.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFileWinsOverEnvironmentWhichWinsOverDefault(t *testing.T) {
	f := parse(t, `
quack-on-demand:
  autoscale:
    sweepSeconds: 45
    highWatermark: 0.9
    enabled: false
`)
	a, src, err := LoadAutoscale(f, env(map[string]string{"QOD_AUTOSCALE_SWEEP_SEC": "120", "QOD_AUTOSCALE_IN_STREAK": "4"}))
	if err != nil {
		t.Fatal(err)
	}
	if a.SweepSeconds != 45 || a.HighWatermark != 0.9 || a.Enabled || a.InStreak != 4 || a.OutStreak != 2 {
		t.Fatalf("got %+v", a)
	}
	if src["sweepSeconds"] != FromFile || src["inStreak"] != FromEnv || src["outStreak"] != FromDefault {
		t.Fatalf("sources %v", src)
	}
	if err := f.Unknown(); err != nil {
		t.Fatal(err)
	}
}

func TestFileErrorsNameTheKeyTheLineAndWhatIsAccepted(t *testing.T) {
	cases := map[string]string{
		"quack-on-demand:\n  autoscale:\n    hardCap: 0\n":         `server.yaml line 3: quack-on-demand.autoscale.hardCap is "0"; accepted: a whole number from 1 to 1024`,
		"quack-on-demand:\n  autoscale:\n    enabled: maybe\n":     `server.yaml line 3: quack-on-demand.autoscale.enabled is "maybe"; accepted: true or false`,
		"quack-on-demand:\n  autoscale:\n    inStreak: [1, 2]\n":   `quack-on-demand.autoscale.inStreak must be a single value, not a list`,
		"quack-on-demand:\n  autoscale:\n    lowWatermark: 0.95\n": `lowWatermark 0.95 must be below highWatermark 0.8`,
	}
	for text, want := range cases {
		f := parse(t, text)
		_, _, err := LoadAutoscale(f, env(nil))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", text, err, want)
		}
	}
}

func TestUnknownKeysStopStartUp(t *testing.T) {
	f := parse(t, "quack-on-demand:\n  autoscale:\n    sweepSecond: 30\n")
	if _, _, err := LoadAutoscale(f, env(nil)); err != nil {
		t.Fatal(err)
	}
	err := f.Unknown()
	if err == nil || !strings.Contains(err.Error(), "unknown key(s) quack-on-demand.autoscale.sweepSecond (line 3)") ||
		!strings.Contains(err.Error(), "quack-on-demand.autoscale.sweepSeconds") {
		t.Fatalf("typo: %v", err)
	}
}

func TestMalformedFiles(t *testing.T) {
	cases := map[string]string{
		"- a\n- b\n":                     "the top level must be a mapping",
		"a: 1\na: 2\n":                   "", // the YAML parser refuses duplicates itself
		"x: &a 1\ny: *a\n":               "anchors and aliases are not accepted",
		"quack-on-demand: {autoscale: [": "server.yaml",
		"? [a, b]\n: c\n":                "keys must be plain names",
	}
	for text, want := range cases {
		_, err := ParseFile("server.yaml", []byte(text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", text, err, want)
		}
	}
	for _, empty := range []string{"", "\n", "~\n", "# nothing\n"} {
		f, err := ParseFile("server.yaml", []byte(empty))
		if err != nil || f.Unknown() != nil {
			t.Errorf("empty file %q: %v", empty, err)
		}
	}
}

func TestReadFileRefusesHugeAndMissingFiles(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(big, make([]byte, MaxFileSize+1), 0o600)
	if _, err := ReadFile(big); err == nil || !strings.Contains(err.Error(), "accepted: at most") {
		t.Fatalf("huge file: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("missing file: %v", err)
	}
}

// FuzzParseFile: whatever the bytes, parsing returns a file or an error,
// never a panic, and reading every setting from a parsed file does too.
func FuzzParseFile(f *testing.F) {
	for _, seed := range []string{"quack-on-demand:\n  autoscale:\n    sweepSeconds: 45\n", "a: [1, {b: c}]", "x: &a 1\ny: *a\n", "~", "k: !!binary aGVsbG8="} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := ParseFile("fuzz.yaml", data)
		if err != nil {
			return
		}
		_, _, _ = LoadAutoscale(file, func(string) string { return "" })
		_ = file.Unknown()
	})
}

func TestNodeSettings(t *testing.T) {
	n, src, err := LoadNodes(nil, env(nil))
	if err != nil || n.Backend != "memory" || n.StopGrace.Seconds() != 10 || src["backend"] != FromDefault {
		t.Fatalf("defaults: %+v %v", n, err)
	}
	f := parse(t, "quack-on-demand:\n  nodes:\n    backend: process\n    command: node --port {port}\n")
	n, src, err = LoadNodes(f, env(map[string]string{"QOD_NODE_BACKEND": "memory", "QOD_NODE_STOP_GRACE_SEC": "3"}))
	if err != nil || n.Backend != "process" || n.Command != "node --port {port}" || n.StopGrace.Seconds() != 3 || src["backend"] != FromFile || src["stopGraceSec"] != FromEnv {
		t.Fatalf("layered: %+v %v %v", n, src, err)
	}
	for envs, want := range map[[2]string]string{
		{"QOD_NODE_BACKEND", "docker"}:     `QOD_NODE_BACKEND is "docker"; accepted: memory or process`,
		{"QOD_NODE_BACKEND", "process"}:    `command (QOD_NODE_COMMAND) is required with the process backend`,
		{"QOD_NODE_STOP_GRACE_SEC", "0"}:   `QOD_NODE_STOP_GRACE_SEC is "0"; accepted: a whole number of seconds from 1 to 3600`,
		{"QOD_NODE_STOP_GRACE_SEC", "1e9"}: `accepted: a whole number of seconds`,
	} {
		if _, _, err := LoadNodes(nil, env(map[string]string{envs[0]: envs[1]})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: got %v, want %q", envs, err, want)
		}
	}
}

func TestAperioSettings(t *testing.T) {
	a, src, err := LoadAperio(nil, env(nil))
	if err != nil || a.Scaling || a.ScalingRecordTTL.Hours() != 720 || a.EdgeListenAddr != "127.0.0.1:20980" || src["scaling"] != FromDefault {
		t.Fatalf("defaults: %+v %v", a, err)
	}
	f := parse(t, "scaling: true\noutbound:\n  allowlist: [\"*.example.com\", 10.0.0.0/8]\n  block_private: true\nscaling_record_ttl: 3600\n")
	a, src, err = LoadAperio(f, env(map[string]string{"APERIO_SCALING": "0", "APERIO_SCALING_ALLOW_HTTP": "1", "APERIO_OUTBOUND_ALLOWLIST": "a.com,b.com"}))
	if err != nil || !a.Scaling || !a.ScalingAllowHTTP || !a.OutboundBlockPrivate || len(a.OutboundAllowlist) != 2 ||
		a.OutboundAllowlist[0] != "*.example.com" || a.ScalingRecordTTL.Seconds() != 3600 {
		t.Fatalf("layered: %+v %v", a, err)
	}
	if src["scaling"] != FromFile || src["scaling_allow_http"] != FromEnv || src["outbound.allowlist"] != FromFile {
		t.Fatalf("sources %v", src)
	}
	if err := f.Unknown(); err != nil {
		t.Fatal(err)
	}
	for envs, want := range map[[2]string]string{
		{"APERIO_SCALING", "maybe"}:                       `APERIO_SCALING is "maybe"; accepted: 1 or 0`,
		{"APERIO_OUTBOUND_ALLOWLIST", "ok.com, bad host"}: `APERIO_OUTBOUND_ALLOWLIST has "bad host"; accepted: host names, host globs`,
		{"APERIO_SCALING_RECORD_TTL", "5"}:                `APERIO_SCALING_RECORD_TTL is "5"; accepted: whole seconds from 60`,
		{"APERIO_EDGE_LISTEN_ADDR", "localhost"}:          `APERIO_EDGE_LISTEN_ADDR is "localhost"; accepted: host:port`,
		{"APERIO_COLD_START_MAX_PENDING", "0"}:            `APERIO_COLD_START_MAX_PENDING is "0"; accepted: a whole number from 1 to 1000000`,
		{"APERIO_EDGE_MAX_CONCURRENT", "lots"}:            `APERIO_EDGE_MAX_CONCURRENT is "lots"; accepted: a whole number from 1 to 1000000`,
	} {
		if _, _, err := LoadAperio(nil, env(map[string]string{envs[0]: envs[1]})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: got %v, want %q", envs, err, want)
		}
	}
}
