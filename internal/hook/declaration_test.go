package hook

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
)

func decl(mut func(d *Declaration)) Declaration {
	max := 8
	d := Declaration{Hostname: "app.example.com", URL: "https://api.provider.example/apps/web/scale", Max: &max}
	if mut != nil {
		mut(&d)
	}
	return d
}

func TestDefaults(t *testing.T) {
	h, err := decl(nil).Validate()
	if err != nil {
		t.Fatal(err)
	}
	want := Hook{Hostname: "app.example.com", URL: "https://api.provider.example/apps/web/scale", Min: 0, Max: 8,
		ColdStart: 30 * time.Second, TargetUtilization: 0.8, Window: 15 * time.Second, Cooldown: time.Minute, IdleTimeout: 5 * time.Minute}
	if h != want {
		t.Fatalf("got %+v\nwant %+v", h, want)
	}
}

// The reference page's own declaration passes as written.
func TestReferenceDeclaration(t *testing.T) {
	var d Declaration
	err := json.Unmarshal([]byte(`{"hostname":"app.example.com","url":"https://api.provider.example/apps/web/scale",
		"min":0,"max":8,"cold_start":"45s","target_utilization":0.8,"window":"15s","cooldown":"60s","idle_timeout":"5m","max_concurrent":10}`), &d)
	if err != nil {
		t.Fatal(err)
	}
	h, err := d.Validate()
	if err != nil || h.ColdStart != 45*time.Second || h.MaxConcurrent != 10 || h.IdleTimeout != 5*time.Minute {
		t.Fatalf("%+v, %v", h, err)
	}
}

func TestRulesNameTheField(t *testing.T) {
	i := func(v int) *int { return &v }
	f := func(v float64) *float64 { return &v }
	cases := []struct {
		mut  func(d *Declaration)
		want string
	}{
		{func(d *Declaration) { d.Hostname = "" }, "hostname is required"},
		{func(d *Declaration) { d.Hostname = "App.Example.com" }, `hostname "App.Example.com" is not a DNS name`},
		{func(d *Declaration) { d.Hostname = "-app.example.com" }, "is not a DNS name"},
		{func(d *Declaration) { d.Hostname = "app..example.com" }, "is not a DNS name"},
		{func(d *Declaration) { d.Hostname = "app.example.com." }, "is not a DNS name"},
		{func(d *Declaration) { d.Hostname = "app_1.example.com" }, "is not a DNS name"},
		{func(d *Declaration) { d.Hostname = strings.Repeat("a", 64) + ".com" }, "is not a DNS name"},
		{func(d *Declaration) { d.Hostname = strings.Repeat("abc.", 64) + "com" }, "hostname is 259 characters long"},
		{func(d *Declaration) { d.URL = "" }, "url is required"},
		{func(d *Declaration) { d.URL = "/scale" }, `url "/scale" is not an absolute URL`},
		{func(d *Declaration) { d.URL = "ftp://x.example/scale" }, `url scheme "ftp" is not accepted`},
		{func(d *Declaration) { d.URL = "https://user:pw@x.example/scale" }, "url carries credentials"},
		{func(d *Declaration) { d.URL = "https://x.example/scale#frag" }, "url has a #fragment"},
		{func(d *Declaration) { d.URL = "mailto:ops@example.com" }, "is not an absolute URL"},
		{func(d *Declaration) { d.URL = "https://" + strings.Repeat("a", 3000) }, "url is 3008 characters long"},
		{func(d *Declaration) { d.Max = nil }, "max is required; accepted: 1 to 10000"},
		{func(d *Declaration) { d.Max = i(0) }, "max is 0; accepted: 1 to 10000"},
		{func(d *Declaration) { d.Max = i(10001) }, "max is 10001"},
		{func(d *Declaration) { d.Min = i(-1) }, "min is -1; accepted: 0 to 10000"},
		{func(d *Declaration) { d.Min = i(9) }, "min 9 is above max 8; accepted: min <= max"},
		{func(d *Declaration) { d.TargetUtilization = f(0) }, "target_utilization is 0; accepted: above 0, at most 1"},
		{func(d *Declaration) { d.TargetUtilization = f(1.01) }, "target_utilization is 1.01"},
		{func(d *Declaration) { d.ColdStart = "45" }, `cold_start "45" is not a duration; accepted: a Go duration such as 45s`},
		{func(d *Declaration) { d.ColdStart = "0s" }, "cold_start is 0s; accepted: 1s to 10m0s"},
		{func(d *Declaration) { d.ColdStart = "1h" }, "cold_start is 1h0m0s; accepted: 1s to 10m0s"},
		{func(d *Declaration) { d.Window = "-5s" }, "window is -5s; accepted: 1s to 1h0m0s"},
		{func(d *Declaration) { d.Cooldown = "48h" }, "cooldown is 48h0m0s; accepted: 0s to 24h0m0s"},
		{func(d *Declaration) { d.IdleTimeout = "soon" }, `idle_timeout "soon" is not a duration`},
		{func(d *Declaration) { d.MaxConcurrent = i(-1) }, "max_concurrent is -1; accepted: 0 (no limit announced) to 1000000"},
	}
	for _, c := range cases {
		_, err := decl(c.mut).Validate()
		if err == nil || !api.HasCode(err, api.CodeInvalidHook) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want invalid_hook containing %q", err, c.want)
		}
	}
	// The edges that are accepted.
	for _, mut := range []func(d *Declaration){
		func(d *Declaration) { d.Min = i(8) },
		func(d *Declaration) { d.TargetUtilization = f(1) },
		func(d *Declaration) { d.Cooldown = "0s"; d.IdleTimeout = "0s" },
		func(d *Declaration) { d.URL = "http://10.0.0.5:8080/scale" }, // the fence decides on http and private addresses
		func(d *Declaration) { d.Hostname = "localhost" },
	} {
		if _, err := decl(mut).Validate(); err != nil {
			t.Errorf("rejected an accepted edge: %v", err)
		}
	}
}

// FuzzValidate: any declaration either passes with values inside every
// bound, or fails with invalid_hook; never a panic.
func FuzzValidate(f *testing.F) {
	f.Add("app.example.com", "https://x.example/scale", 0, 8, "45s", 0.8, "15s", "60s", "5m", 10)
	f.Add("", "", -1, 0, "x", -1.0, "", "", "", -5)
	f.Add("a.b", "http://[::1]:0/%zz", 5, 3, "9999999999h", 1e308, "1ns", "-1s", "0", 1<<40)
	f.Fuzz(func(t *testing.T, host, u string, min, max int, cold string, target float64, window, cooldown, idle string, mc int) {
		d := Declaration{Hostname: host, URL: u, Min: &min, Max: &max, ColdStart: cold, TargetUtilization: &target,
			Window: window, Cooldown: cooldown, IdleTimeout: idle, MaxConcurrent: &mc}
		h, err := d.Validate()
		if err != nil {
			if !api.HasCode(err, api.CodeInvalidHook) {
				t.Fatalf("error without the invalid_hook code: %v", err)
			}
			return
		}
		if h.Min < 0 || h.Max < 1 || h.Min > h.Max || h.TargetUtilization <= 0 || h.TargetUtilization > 1 ||
			h.ColdStart < time.Second || h.ColdStart > MaxColdStart || h.Window < time.Second || h.Cooldown < 0 || h.MaxConcurrent < 0 {
			t.Fatalf("accepted out of bounds: %+v", h)
		}
	})
}
