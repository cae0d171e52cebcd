package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/config"
)

// hookDNS resolves the test's hook hosts.
type hookDNS map[string]string

func (d hookDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := d[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, errors.New("no such host")
}

var testDNS = hookDNS{"hooks.example.com": "93.184.216.34", "inside.example.com": "10.0.0.9"}

func scalingHarness(t *testing.T, scaling bool) *harness {
	a := config.DefaultAperio()
	a.Scaling = scaling
	return newHarness(t, apiservertest.Options{Aperio: &a, Resolver: testDNS})
}

func scalingRecord(t *testing.T, a answer) api.ScalingRecord {
	t.Helper()
	var r api.ScalingRecord
	if err := json.Unmarshal(a.body, &r); err != nil {
		t.Fatalf("not a record: %s", a.body)
	}
	return r
}

const decl = `{"url":"https://hooks.example.com/scale","min":0,"max":8,"cold_start":"45s","window":"15s","cooldown":"60s","secret":"s3cret"}`

func TestDeclareEditAndDisarm(t *testing.T) {
	h := scalingHarness(t, true)
	acme := h.newKey(api.CreateKeyRequest{Name: "acme-tf", Org: "acme"})
	a := h.mustCall("PUT", "/api/scaling/app.example.com", acme, decl, 201)
	r := scalingRecord(t, a)
	if !strings.HasPrefix(r.ID, "sh_") || r.Hostname != "app.example.com" || r.Org != "acme" || r.Max != 8 || r.ColdStart != "45s" ||
		r.TargetUtilization != 0.8 || r.IdleTimeout != "5m0s" || !r.SecretSet || !r.Armed || r.Breaker != "closed" || !r.Active || r.Notice != "" {
		t.Fatalf("declared: %+v", r)
	}
	if strings.Contains(string(a.body), "s3cret") {
		t.Fatal("the secret came back")
	}
	// Editing without a secret keeps it; "" removes it.
	r2 := scalingRecord(t, h.mustCall("PUT", "/api/scaling/app.example.com", acme, `{"url":"https://hooks.example.com/v2","max":4}`, 200))
	if r2.ID != r.ID || r2.Max != 4 || r2.ColdStart != "30s" || !r2.SecretSet {
		t.Fatalf("edited: %+v", r2)
	}
	r3 := scalingRecord(t, h.mustCall("PUT", "/api/scaling/app.example.com", acme, `{"url":"https://hooks.example.com/v2","max":4,"secret":""}`, 200))
	if r3.SecretSet {
		t.Fatal("an empty secret did not remove it")
	}
	for _, q := range []string{r.ID, "app.example.com"} {
		if got := scalingRecord(t, h.mustCall("GET", "/api/scaling/"+q, acme, "", 200)); got.ID != r.ID {
			t.Fatalf("get %s: %+v", q, got)
		}
	}
	// Another organization neither sees it nor takes the hostname.
	globex := h.newKey(api.CreateKeyRequest{Name: "globex", Org: "globex"})
	h.mustCall("GET", "/api/scaling/"+r.ID, globex, "", 404)
	h.mustCall("DELETE", "/api/scaling/"+r.ID, globex, "", 404)
	if a := h.mustCall("PUT", "/api/scaling/app.example.com", globex, decl, 409); !strings.Contains(a.err.Message, "declared by another organization") {
		t.Fatalf("foreign declaration: %+v", a.err)
	}
	var list api.ScalingList
	json.Unmarshal(h.mustCall("GET", "/api/scaling", globex, "", 200).body, &list)
	if len(list.Records) != 0 {
		t.Fatalf("globex sees %+v", list.Records)
	}
	json.Unmarshal(h.mustCall("GET", "/api/scaling", opKey, "", 200).body, &list)
	if len(list.Records) != 1 {
		t.Fatalf("the operator sees %d records", len(list.Records))
	}
	h.mustCall("DELETE", "/api/scaling/"+r.ID, acme, "", 200)
	h.mustCall("GET", "/api/scaling/"+r.ID, acme, "", 404)
	var audit struct {
		Entries []api.AuditEntry `json:"entries"`
	}
	json.Unmarshal(h.mustCall("GET", "/api/audit?tenant=acme", opKey, "", 200).body, &audit)
	var actions []string
	for _, e := range audit.Entries {
		actions = append(actions, e.Action)
		if strings.Contains(string(mustJSON(e.Detail)), "s3cret") || strings.Contains(string(mustJSON(e.Detail)), "/scale") {
			t.Fatalf("the audit carries the secret or the URL's path: %+v", e.Detail)
		}
	}
	if strings.Join(actions, ",") != "scaling_disarmed,scaling.update,scaling.update,scaling.declare" {
		t.Fatalf("audit actions %v", actions)
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestDeclarationRulesAndTheFence(t *testing.T) {
	h := scalingHarness(t, true)
	cases := []struct {
		path, body, code, msg string
	}{
		{"/api/scaling/app.example.com", `{"url":"https://hooks.example.com/scale","max":0}`, "invalid_hook", "max is 0; accepted: 1 to 10000"},
		{"/api/scaling/app.example.com", `{"url":"https://hooks.example.com/scale","max":2,"window":"15"}`, "invalid_hook", `window "15" is not a duration`},
		{"/api/scaling/App.example.com", `{"url":"https://hooks.example.com/scale","max":2}`, "invalid_hook", "is not a DNS name"},
		{"/api/scaling/app.example.com", `{"hostname":"other.example.com","url":"https://hooks.example.com/scale","max":2}`, "invalid_hook", "differs from"},
		{"/api/scaling/app.example.com", `{"url":"https://inside.example.com/scale","max":2}`, "destination_refused", "url: host inside.example.com resolves to 10.0.0.9: an internal address"},
		{"/api/scaling/app.example.com", `{"url":"http://hooks.example.com/scale","max":2}`, "destination_refused", "url: http:// is not allowed"},
		{"/api/scaling/app.example.com", `{"url":"https://169.254.169.254/latest","max":2}`, "destination_refused", "169.254.169.254"},
		{"/api/scaling/app.example.com", `{"url":"https://nowhere.example.com/","max":2}`, "destination_refused", "does not resolve"},
		{"/api/scaling/app.example.com", `{"url":"https://hooks.example.com/scale","max":2,"colour":"red"}`, "invalid_request", `unknown field "colour"`},
	}
	for _, c := range cases {
		a := h.call("PUT", c.path, opKey, c.body)
		if a.status != 400 || a.err.Code != c.code || !strings.Contains(a.err.Message, c.msg) {
			t.Errorf("PUT %s %s: %d %+v, want %s containing %q", c.path, c.body, a.status, a.err, c.code, c.msg)
		}
		// validate answers exactly the same, and stores nothing.
		body := strings.Replace(c.body, "{", `{"hostname":"app.example.com",`, 1)
		if strings.Contains(c.body, `"hostname"`) || strings.Contains(c.path, "App") {
			continue
		}
		if v := h.call("POST", "/api/scaling/validate", opKey, body); v.status != 400 || v.err.Code != c.code || !strings.Contains(v.err.Message, c.msg) {
			t.Errorf("validate %s: %d %+v", body, v.status, v.err)
		}
	}
	var v api.ScalingValidation
	json.Unmarshal(h.mustCall("POST", "/api/scaling/validate", opKey, `{"hostname":"app.example.com","url":"https://hooks.example.com/scale","max":3,"secret":"x"}`, 200).body, &v)
	if !v.Valid || v.Record.Max != 3 || v.Record.Window != "15s" || !v.Record.SecretSet {
		t.Fatalf("validate: %+v", v)
	}
	var list api.ScalingList
	json.Unmarshal(h.mustCall("GET", "/api/scaling", opKey, "", 200).body, &list)
	if len(list.Records) != 0 {
		t.Fatalf("validate or a refused declaration stored %d records", len(list.Records))
	}
	client := h.newKey(api.CreateKeyRequest{Name: "c", Org: "acme", Kind: "client"})
	h.mustCall("PUT", "/api/scaling/app.example.com", client, decl, 403)
}

// With APERIO_SCALING off the record is kept, and every answer says it is
// never called.
func TestScalingOffIsSaidNotSilent(t *testing.T) {
	h := scalingHarness(t, false)
	r := scalingRecord(t, h.mustCall("PUT", "/api/scaling/app.example.com", opKey, decl, 201))
	if r.Active || !strings.Contains(r.Notice, "APERIO_SCALING=1") {
		t.Fatalf("off: %+v", r)
	}
}

// A record goes with the last live key that armed it.
func TestRecordGoesWithItsLastKey(t *testing.T) {
	h := scalingHarness(t, true)
	k, err := h.srv.Client.CreateKey(context.Background(), api.CreateKeyRequest{Name: "acme-ci", Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	h.mustCall("PUT", "/api/scaling/app.example.com", k.Secret, decl, 201)
	h.mustCall("DELETE", "/api/keys/"+k.ID, opKey, "", 204)
	h.mustCall("GET", "/api/scaling/app.example.com", opKey, "", 404)
}
