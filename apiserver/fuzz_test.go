package apiserver_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/config"
)

var fuzzEndpoints = []string{"create", "setAutoscale", "scale", "suspend", "resume", "delete", "load", "nodes/setRoutable"}

// FuzzPoolRequests throws arbitrary bodies at every pool endpoint: whatever
// comes in, the answer is a success or a known error code with a message,
// never a 500 or a panic.
func FuzzPoolRequests(f *testing.F) {
	seeds := []string{
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":2,"roleDistribution":{"writeonly":1,"readonly":1,"dual":0},"minNodes":2,"maxNodes":6}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","minNodes":2,"maxNodes":8}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi"}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","targetSize":8}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","targetSize":0}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":1e400}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":-9223372036854775808,"cohorts":[{"name":"a","nodes":1},{"name":"a","nodes":1}]}`,
		`{"tenant":"\u0000","tenantDb":"` + strings.Repeat("x", 100) + `","pool":"bi"}`,
		`{"tenant":"acme","tenant":"evil","tenantDb":"d","pool":"p","size":1}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","statements":[{"durationMs":12,"at":"2026-11-30T20:00:00Z"}]}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","statements":[{"durationMs":-1,"at":"9999-99-99"}]}`,
		`{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","role":"dual","index":0,"routable":false}`,
		`[]`, `null`, `"x"`, `{`, `{}{}`, ``,
	}
	for i, s := range seeds {
		f.Add(uint8(i), s)
	}
	srv, err := apiservertest.Start(apiservertest.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		path := "/api/pool/" + fuzzEndpoints[int(which)%len(fuzzEndpoints)]
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", apiservertest.OperatorKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %q: status %d", path, body, resp.StatusCode)
		}
		if resp.StatusCode >= 300 {
			var e api.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || !api.KnownCode(e.Code) || e.Message == "" {
				t.Fatalf("%s %q: error body %+v (%v)", path, body, e, err)
			}
			if e.Status() != resp.StatusCode {
				t.Fatalf("%s: code %s served with %d", path, e.Code, resp.StatusCode)
			}
		}
	})
}

// FuzzQuery does the same for the query strings of the read endpoints.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"tenant=acme&tenantDb=db&pool=p", "tenant=%00", "limit=99999999999999999999", "tenant=a&tenant=b", "x=%zz", ";;;&&&="} {
		f.Add(s)
	}
	srv, err := apiservertest.Start(apiservertest.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, q string) {
		for _, path := range []string{"/api/pool/get", "/api/pool/list", "/api/audit", "/api/tenant/get", "/api/pool/autoscaleStatus", "/api/pool/nodes"} {
			req := httptest.NewRequest(http.MethodGet, "http://x"+path, nil)
			req.URL.RawQuery = q
			req.Header.Set("X-API-Key", apiservertest.OperatorKey)
			req.RequestURI = ""
			req.URL.Host = strings.TrimPrefix(srv.URL, "http://")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue // the query was not even a sendable URL
			}
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				t.Fatalf("%s?%s: status %d", path, q, resp.StatusCode)
			}
		}
	})
}

// FuzzScalingRequests throws arbitrary bodies at the hook declaration, its
// validation and the heartbeat: a known error code or a success, never a
// 5xx, whatever the body.
func FuzzScalingRequests(f *testing.F) {
	for i, s := range []string{
		`{"url":"https://93.184.216.34/scale","max":2,"secret":"x"}`,
		`{"url":"https://127.0.0.1/","max":2}`,
		`{"url":"http://[::1]:80/","min":5,"max":1,"window":"-1s"}`,
		`{"client_id":"c","hostname":"app.example.com","max_concurrent":10,"scaling":{"url":"https://93.184.216.34/","max":1}}`,
		`{"hostname":"app.example.com","url":"https://x/","max":1e400}`,
		`[]`, `null`, `{`, ``,
	} {
		f.Add(uint8(i), s)
	}
	a := config.DefaultAperio()
	a.Scaling = true
	srv, err := apiservertest.Start(apiservertest.Options{Aperio: &a})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	targets := []struct{ method, path string }{
		{http.MethodPut, "/api/scaling/app.example.com"},
		{http.MethodPost, "/api/scaling/validate"},
		{http.MethodPost, "/api/clients/heartbeat"},
	}
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		tg := targets[int(which)%len(targets)]
		req, _ := http.NewRequest(tg.method, srv.URL+tg.path, strings.NewReader(body))
		req.Header.Set("X-API-Key", apiservertest.OperatorKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 500 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %s %q: %d %s", tg.method, tg.path, body, resp.StatusCode, b)
		}
	})
}
