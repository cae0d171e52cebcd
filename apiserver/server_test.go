package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
)

const opKey = apiservertest.OperatorKey

type harness struct {
	t   *testing.T
	srv *apiservertest.Instance
}

func newHarness(t *testing.T, o apiservertest.Options) *harness {
	t.Helper()
	srv, err := apiservertest.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return &harness{t: t, srv: srv}
}

type answer struct {
	status int
	body   []byte
	err    api.Error
}

func (a answer) pool(t *testing.T) api.Pool {
	t.Helper()
	var p api.Pool
	if err := json.Unmarshal(a.body, &p); err != nil {
		t.Fatalf("answer is not a pool: %s", a.body)
	}
	return p
}

// call sends one request with the key in X-API-Key ("" sends none).
func (h *harness) call(method, path, key, body string) answer {
	h.t.Helper()
	return callURL(h.t, h.srv.URL, method, path, key, body)
}

// callURL sends one request to the server at base.
func callURL(t *testing.T, base, method, path, key, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, body: b}
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(b, &a.err); err != nil || a.err.Code == "" {
			t.Fatalf("%s %s: error answer %d is not {code, message}: %s", method, path, resp.StatusCode, b)
		}
	}
	return a
}

func (h *harness) mustCall(method, path, key, body string, want int) answer {
	h.t.Helper()
	a := h.call(method, path, key, body)
	if a.status != want {
		h.t.Fatalf("%s %s %s: status %d, want %d: %s", method, path, body, a.status, want, a.body)
	}
	return a
}

// newKey creates an API key through the operator and returns its secret.
func (h *harness) newKey(req api.CreateKeyRequest) string {
	h.t.Helper()
	k, err := h.srv.Client.CreateKey(context.Background(), req)
	if err != nil {
		h.t.Fatal(err)
	}
	return k.Secret
}

// TestWorkedExample runs the reference page's three calls verbatim.
func TestWorkedExample(t *testing.T) {
	h := newHarness(t, apiservertest.Options{})
	p := h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":2,
       "roleDistribution":{"writeonly":1,"readonly":1,"dual":0},
       "minNodes":2,"maxNodes":6}`, 201).pool(t)
	if p.Size != 2 || !p.Elastic || *p.MinNodes != 2 || *p.MaxNodes != 6 || p.RoleDistribution != (api.Roles{Writeonly: 1, Readonly: 1}) {
		t.Fatalf("created pool: %+v", p)
	}
	p = h.mustCall("POST", "/api/pool/setAutoscale", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","minNodes":2,"maxNodes":8}`, 200).pool(t)
	if *p.MaxNodes != 8 {
		t.Fatalf("band not widened: %+v", p)
	}
	p = h.mustCall("POST", "/api/pool/setAutoscale", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi"}`, 200).pool(t)
	if p.Elastic || p.MinNodes != nil || p.Size != 2 {
		t.Fatalf("band not cleared or size moved: %+v", p)
	}
	got := h.mustCall("GET", "/api/pool/get?tenant=acme&tenantDb=acme_sales&pool=bi", opKey, "", 200).pool(t)
	if got.Version != 3 || got.Elastic {
		t.Fatalf("stored pool: %+v", got)
	}
}

func TestOutsideBandMessage(t *testing.T) {
	h := newHarness(t, apiservertest.Options{})
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":2,"roleDistribution":{"writeonly":1,"readonly":1,"dual":0},"minNodes":2,"maxNodes":6}`, 201)
	a := h.mustCall("POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","targetSize":8}`, 409)
	want := api.Error{Code: "outside_band", Message: "targetSize 8 is outside the autoscale band [2, 6]; adjust the band first via pool/setAutoscale"}
	if a.err != want {
		t.Fatalf("got %+v, want %+v", a.err, want)
	}
	// Inside the band, manual scaling works and moves readonly nodes only.
	p := h.mustCall("POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","targetSize":5}`, 200).pool(t)
	if p.Size != 5 || p.RoleDistribution != (api.Roles{Writeonly: 1, Readonly: 4}) {
		t.Fatalf("scaled pool: %+v", p)
	}
}

func TestSuspendResume(t *testing.T) {
	h := newHarness(t, apiservertest.Options{})
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"banded","size":4,"roleDistribution":{"writeonly":1,"readonly":2,"dual":1},"minNodes":3,"maxNodes":6}`, 201)
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"fixed","size":3}`, 201)
	for _, name := range []string{"banded", "fixed"} {
		p := h.mustCall("POST", "/api/pool/suspend", opKey, `{"tenant":"acme","tenantDb":"db","pool":"`+name+`"}`, 200).pool(t)
		if p.Size != 0 || !p.Suspended {
			t.Fatalf("suspended %s: %+v", name, p)
		}
	}
	// A suspended pool is outside every band (rule 4).
	a := h.mustCall("POST", "/api/pool/setAutoscale", opKey, `{"tenant":"acme","tenantDb":"db","pool":"fixed","minNodes":1,"maxNodes":4}`, 400)
	if a.err.Code != "invalid_band" || !strings.Contains(a.err.Message, "rule 4") || !strings.Contains(a.err.Message, "suspended") {
		t.Fatalf("band on suspended pool: %+v", a.err)
	}
	// Banded: back at minNodes with the writers kept.
	p := h.mustCall("POST", "/api/pool/resume", opKey, `{"tenant":"acme","tenantDb":"db","pool":"banded"}`, 200).pool(t)
	if p.Size != 3 || p.RoleDistribution != (api.Roles{Writeonly: 1, Readonly: 1, Dual: 1}) {
		t.Fatalf("resumed banded pool: %+v", p)
	}
	// Unbanded: back at the size it had.
	p = h.mustCall("POST", "/api/pool/resume", opKey, `{"tenant":"acme","tenantDb":"db","pool":"fixed"}`, 200).pool(t)
	if p.Size != 3 || p.RoleDistribution != (api.Roles{Dual: 1, Readonly: 2}) {
		t.Fatalf("resumed fixed pool: %+v", p)
	}
}

func TestTenantQuota(t *testing.T) {
	h := newHarness(t, apiservertest.Options{})
	h.mustCall("POST", "/api/tenant/setQuota", opKey, `{"tenant":"acme","nodeQuota":5}`, 200)
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"a","size":3}`, 201)
	a := h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"b","size":3}`, 409)
	if a.err.Code != "quota_exceeded" || !strings.Contains(a.err.Message, "node quota of 5") {
		t.Fatalf("create over quota: %+v", a.err)
	}
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"b","size":2}`, 201)
	a = h.mustCall("POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"db","pool":"b","targetSize":3}`, 409)
	if a.err.Code != "quota_exceeded" {
		t.Fatalf("scale over quota: %+v", a.err)
	}
	// Scaling down is always allowed, and frees room.
	h.mustCall("POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"db","pool":"a","targetSize":1}`, 200)
	h.mustCall("POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"db","pool":"b","targetSize":4}`, 200)
	var tn api.Tenant
	json.Unmarshal(h.mustCall("GET", "/api/tenant/get?tenant=acme", opKey, "", 200).body, &tn)
	if tn.NodeQuota != 5 || tn.Nodes != 5 {
		t.Fatalf("tenant: %+v", tn)
	}
	// Other tenants are not limited by acme's quota.
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"globex","tenantDb":"db","pool":"a","size":9}`, 201)
}

func TestKeysAndScopes(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := newHarness(t, apiservertest.Options{Now: func() time.Time { return now }})
	acme := h.newKey(api.CreateKeyRequest{Name: "acme-admin", Org: "acme", Kind: "admin"})
	acmeClient := h.newKey(api.CreateKeyRequest{Name: "acme-client", Org: "acme", Kind: "client"})
	globex := h.newKey(api.CreateKeyRequest{Name: "globex-admin", Org: "globex"})
	soon := now.Add(time.Hour)
	expiring := h.newKey(api.CreateKeyRequest{Name: "expiring", Org: "acme", ExpiresAt: &soon})
	fenced := h.newKey(api.CreateKeyRequest{Name: "fenced", Org: "acme", AllowedIPs: []string{"10.0.0.0/8"}})

	h.mustCall("POST", "/api/pool/create", acme, `{"tenant":"acme","tenantDb":"db","pool":"p","size":2}`, 201)
	h.mustCall("POST", "/api/pool/create", globex, `{"tenant":"globex","tenantDb":"db","pool":"p","size":2}`, 201)

	a := h.mustCall("POST", "/api/pool/setAutoscale", globex, `{"tenant":"acme","tenantDb":"db","pool":"p","minNodes":1,"maxNodes":3}`, 403)
	if a.err.Code != "forbidden" || !strings.Contains(a.err.Message, `scoped to org "globex"`) {
		t.Fatalf("other tenant's key: %+v", a.err)
	}
	// The same answer for a pool that does not exist: scope says nothing
	// about what exists.
	b := h.mustCall("GET", "/api/pool/get?tenant=acme&tenantDb=db&pool=nope", globex, "", 403)
	if b.err.Code != "forbidden" {
		t.Fatalf("other tenant, missing pool: %+v", b.err)
	}
	var list api.PoolList
	json.Unmarshal(h.mustCall("GET", "/api/pool/list", acme, "", 200).body, &list)
	if len(list.Pools) != 1 || list.Pools[0].Tenant != "acme" {
		t.Fatalf("org key lists only its tenant: %+v", list)
	}
	h.mustCall("GET", "/api/pool/list?tenant=globex", acme, "", 403)
	json.Unmarshal(h.mustCall("GET", "/api/pool/list", opKey, "", 200).body, &list)
	if len(list.Pools) != 2 {
		t.Fatalf("operator lists all: %+v", list)
	}

	a = h.mustCall("POST", "/api/pool/scale", acmeClient, `{"tenant":"acme","tenantDb":"db","pool":"p","targetSize":3}`, 403)
	if !strings.Contains(a.err.Message, "needs an admin key") {
		t.Fatalf("client key mutating: %+v", a.err)
	}
	h.mustCall("GET", "/api/pool/get?tenant=acme&tenantDb=db&pool=p", acmeClient, "", 200)
	h.mustCall("POST", "/api/keys", acme, `{"name":"x","org":"acme"}`, 403)
	h.mustCall("POST", "/api/tenant/setQuota", acme, `{"tenant":"acme","nodeQuota":1}`, 403)

	h.mustCall("GET", "/api/pool/list", expiring, "", 200)
	now = now.Add(2 * time.Hour)
	a = h.mustCall("GET", "/api/pool/list", expiring, "", 401)
	if !strings.Contains(a.err.Message, "expired") {
		t.Fatalf("expired key: %+v", a.err)
	}
	a = h.mustCall("GET", "/api/pool/list", fenced, "", 403)
	if !strings.Contains(a.err.Message, "may not be used from this address") {
		t.Fatalf("key outside allowed_ips: %+v", a.err)
	}

	var keys struct{ Keys []api.Key }
	json.Unmarshal(h.mustCall("GET", "/api/keys", opKey, "", 200).body, &keys)
	var acmeID string
	for _, k := range keys.Keys {
		if k.Secret != "" {
			t.Fatalf("key list shows a secret: %+v", k)
		}
		if k.Name == "acme-admin" {
			acmeID = k.ID
		}
	}
	h.mustCall("DELETE", "/api/keys/"+acmeID, opKey, "", 204)
	a = h.mustCall("GET", "/api/pool/list", acme, "", 401)
	if !strings.Contains(a.err.Message, "revoked") {
		t.Fatalf("revoked key: %+v", a.err)
	}

	// Bearer works as well as X-API-Key.
	req, _ := http.NewRequest("GET", h.srv.URL+"/api/autoscale/config", nil)
	req.Header.Set("Authorization", "Bearer "+opKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("bearer auth: %v %v", resp, err)
	}
	var cfg api.AutoscaleConfig
	json.NewDecoder(resp.Body).Decode(&cfg)
	resp.Body.Close()
	if cfg.HardCap != 16 || cfg.SweepSeconds != 60 {
		t.Fatalf("config: %+v", cfg)
	}
}

func TestAuditTrail(t *testing.T) {
	h := newHarness(t, apiservertest.Options{})
	acme := h.newKey(api.CreateKeyRequest{Name: "acme-admin", Org: "acme"})
	h.mustCall("POST", "/api/pool/create", acme, `{"tenant":"acme","tenantDb":"db","pool":"p","size":2}`, 201)
	h.mustCall("POST", "/api/pool/scale", acme, `{"tenant":"acme","tenantDb":"db","pool":"p","targetSize":3}`, 200)
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"globex","tenantDb":"db","pool":"p","size":2}`, 201)
	var out struct{ Entries []api.AuditEntry }
	json.Unmarshal(h.mustCall("GET", "/api/audit", acme, "", 200).body, &out)
	if len(out.Entries) != 2 {
		t.Fatalf("acme sees %d audit entries, want its own 2: %+v", len(out.Entries), out.Entries)
	}
	e := out.Entries[0]
	if e.Action != "pool.scale" || e.Actor != "key:acme-admin" || e.Target != "acme/db/p" || e.Detail["fromSize"] != 2.0 || e.Detail["toSize"] != 3.0 {
		t.Fatalf("newest entry: %+v", e)
	}
}

func TestHealth(t *testing.T) {
	h := newHarness(t, apiservertest.Options{})
	h.mustCall("GET", "/healthz", "", "", 200)
	h.mustCall("GET", "/readyz", "", "", 200)
	h.srv.Store.Close()
	resp, err := http.Get(h.srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz with the store closed: %d", resp.StatusCode)
	}
	h.mustCall("GET", "/healthz", "", "", 200)
}
