package apiserver_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
)

// TestBadInputs sends every endpoint the inputs a careless or hostile caller
// would, and checks each gets its stable code and a message that names the
// field: never a 500.
func TestBadInputs(t *testing.T) {
	h := newHarness(t, apiservertest.Options{})
	globex := h.newKey(api.CreateKeyRequest{Name: "globex", Org: "globex"})
	globexClient := h.newKey(api.CreateKeyRequest{Name: "globex-client", Org: "globex", Kind: "client"})
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"p","size":2,"roleDistribution":{"writeonly":1,"readonly":1,"dual":0}}`, 201)
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"banded","size":2,"minNodes":2,"maxNodes":4}`, 201)
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"w2","size":4,"roleDistribution":{"writeonly":2,"readonly":1,"dual":1}}`, 201)
	h.mustCall("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"cohorts","size":3,"cohorts":[{"name":"etl","nodes":1}]}`, 201)

	ref := `"tenant":"acme","tenantDb":"db","pool":"p"`
	type tc struct {
		name, method, path, key, body string
		status                        int
		code, msg                     string
	}
	var cases []tc
	// What every POST endpoint that takes a pool must refuse.
	for _, ep := range []string{"create", "setAutoscale", "scale", "suspend", "resume", "delete", "load"} {
		path := "/api/pool/" + ep
		cases = append(cases,
			tc{ep + " no key", "POST", path, "", `{` + ref + `}`, 401, "unauthorized", "no API key"},
			tc{ep + " wrong key", "POST", path, "not-a-key", `{` + ref + `}`, 401, "unauthorized", "not valid"},
			tc{ep + " other tenant", "POST", path, globex, `{` + ref + `}`, 403, "forbidden", `may not touch tenant "acme"`},
			tc{ep + " empty body", "POST", path, opKey, ``, 400, "invalid_request", "request body is empty"},
			tc{ep + " malformed", "POST", path, opKey, `{"tenant":`, 400, "invalid_request", "malformed JSON"},
			tc{ep + " not an object", "POST", path, opKey, `[1,2]`, 400, "invalid_request", "must be a JSON object"},
			tc{ep + " unknown field", "POST", path, opKey, `{` + ref + `,"colour":"red"}`, 400, "invalid_request", `unknown field "colour"; accepted fields: tenant, tenantDb, pool`},
			tc{ep + " wrong type", "POST", path, opKey, `{"tenant":7,"tenantDb":"db","pool":"p"}`, 400, "invalid_request", `field "tenant" must be a string, got number`},
			tc{ep + " missing tenant", "POST", path, opKey, `{"tenantDb":"db","pool":"p"}`, 400, "invalid_request", "tenant is required"},
			tc{ep + " bad name", "POST", path, opKey, `{"tenant":"acme","tenantDb":"d b","pool":"p"}`, 400, "invalid_request", `tenantDb "d b" is not a valid name`},
			tc{ep + " trailing data", "POST", path, opKey, `{` + ref + `} {}`, 400, "invalid_request", "unexpected data after the JSON object"},
			tc{ep + " huge body", "POST", path, opKey, `{"tenant":"` + strings.Repeat("a", 2<<20) + `"}`, 400, "invalid_request", "larger than 1048576 bytes"},
			tc{ep + " wrong method", "GET", path, opKey, ``, 400, "invalid_request", "method GET is not allowed"},
		)
		if ep != "create" {
			cases = append(cases, tc{ep + " unknown pool", "POST", path, opKey, unknownPoolBody(ep), 404, "not_found", "pool acme/db/nope not found"})
		}
	}
	now := time.Now().UTC()
	stmt := func(ms string, at time.Time) string {
		return `{` + ref + `,"statements":[{"durationMs":` + ms + `,"at":"` + at.Format(time.RFC3339Nano) + `"}]}`
	}
	tooMany := `{` + ref + `,"statements":[` + strings.Repeat(`{"durationMs":1,"at":"`+now.Format(time.RFC3339)+`"},`, api.MaxLoadStatements) + `{"durationMs":1,"at":"` + now.Format(time.RFC3339) + `"}]}`
	cases = append(cases,
		// load
		tc{"load no statements", "POST", "/api/pool/load", opKey, `{` + ref + `}`, 400, "invalid_request", "statements is required; accepted: 1 to 10000 statements"},
		tc{"load empty statements", "POST", "/api/pool/load", opKey, `{` + ref + `,"statements":[]}`, 400, "invalid_request", "statements is required"},
		tc{"load too many", "POST", "/api/pool/load", opKey, tooMany, 400, "invalid_request", "statements has 10001 entries; accepted: at most 10000 per call"},
		tc{"load no duration", "POST", "/api/pool/load", opKey, `{` + ref + `,"statements":[{"at":"` + now.Format(time.RFC3339) + `"}]}`, 400, "invalid_request", "statements[0].durationMs is required; accepted: 0 to 86400000"},
		tc{"load negative duration", "POST", "/api/pool/load", opKey, stmt("-1", now), 400, "invalid_request", "statements[0].durationMs is -1; accepted: 0 to 86400000"},
		tc{"load huge duration", "POST", "/api/pool/load", opKey, stmt("86400001", now), 400, "invalid_request", "statements[0].durationMs is 86400001"},
		tc{"load fractional duration", "POST", "/api/pool/load", opKey, stmt("1.5", now), 400, "invalid_request", `field "statements.durationMs" must be a whole number`},
		tc{"load no time", "POST", "/api/pool/load", opKey, `{` + ref + `,"statements":[{"durationMs":1}]}`, 400, "invalid_request", "statements[0].at is required; accepted: the RFC 3339 time"},
		tc{"load bad time", "POST", "/api/pool/load", opKey, `{` + ref + `,"statements":[{"durationMs":1,"at":"yesterday"}]}`, 400, "invalid_request", `statements[0].at "yesterday" is not accepted; accepted: an RFC 3339 time such as`},
		tc{"load old statement", "POST", "/api/pool/load", opKey, stmt("1", now.Add(-61*time.Minute)), 400, "invalid_request", "is more than 60 minutes before the server's time"},
		tc{"load future statement", "POST", "/api/pool/load", opKey, stmt("1", now.Add(5*time.Minute)), 400, "invalid_request", "accepted: up to 1m0s ahead (check the reporter's clock)"},
		tc{"load client key", "POST", "/api/pool/load", globexClient, `{"tenant":"globex","tenantDb":"db","pool":"p","statements":[]}`, 403, "forbidden", "admin key"},
		// scaling hooks and heartbeats
		tc{"scaling no key", "PUT", "/api/scaling/app.example.com", "", `{}`, 401, "unauthorized", "no API key"},
		tc{"scaling client key", "PUT", "/api/scaling/app.example.com", globexClient, `{"url":"https://x.example/","max":1}`, 403, "forbidden", "admin key"},
		tc{"scaling empty body", "PUT", "/api/scaling/app.example.com", opKey, ``, 400, "invalid_request", "request body is empty"},
		tc{"scaling malformed", "PUT", "/api/scaling/app.example.com", opKey, `{"url":`, 400, "invalid_request", "malformed JSON"},
		tc{"scaling unknown field", "PUT", "/api/scaling/app.example.com", opKey, `{"url":"https://x.example/","max":1,"replicas":3}`, 400, "invalid_request", `unknown field "replicas"`},
		tc{"scaling wrong type", "PUT", "/api/scaling/app.example.com", opKey, `{"url":"https://x.example/","max":"2"}`, 400, "invalid_request", `field "max" must be a whole number`},
		tc{"scaling no max", "PUT", "/api/scaling/app.example.com", opKey, `{"url":"https://x.example/"}`, 400, "invalid_hook", "max is required"},
		tc{"scaling bad path host", "PUT", "/api/scaling/-bad-", opKey, `{"url":"https://x.example/","max":1}`, 400, "invalid_hook", "is not a DNS name"},
		tc{"scaling huge secret", "PUT", "/api/scaling/app.example.com", opKey, `{"url":"https://93.184.216.34/","max":1,"secret":"` + strings.Repeat("s", 5000) + `"}`, 400, "invalid_hook", "secret is 5000 bytes long; accepted: at most 4096"},
		tc{"scaling get unknown", "GET", "/api/scaling/sh_nope", opKey, ``, 404, "not_found", `scaling record "sh_nope" not found`},
		tc{"scaling delete unknown", "DELETE", "/api/scaling/sh_nope", opKey, ``, 404, "not_found", "not found"},
		tc{"scaling list param", "GET", "/api/scaling?org=acme", opKey, ``, 400, "invalid_request", "org"},
		tc{"scaling validate method", "GET", "/api/scaling/validate", opKey, ``, 404, "not_found", "not found"},
		tc{"heartbeat no key", "POST", "/api/clients/heartbeat", "", `{}`, 401, "unauthorized", "no API key"},
		tc{"heartbeat malformed", "POST", "/api/clients/heartbeat", opKey, `{"client_id":`, 400, "invalid_request", "malformed JSON"},
		tc{"heartbeat negative inflight", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","inflight":-1}`, 400, "invalid_request", "inflight is -1"},
		tc{"heartbeat probe without target", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","probe_path":"/healthz"}`, 400, "invalid_request", "probe_path needs a target"},
		tc{"heartbeat relative probe", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","target":"http://127.0.0.1:1","probe_path":"healthz"}`, 400, "invalid_request", `probe_path "healthz" is not accepted; accepted: a path starting with /`},
		tc{"heartbeat probe with query", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","target":"http://127.0.0.1:1","probe_path":"/h?x=1"}`, 400, "invalid_request", "probe_path"},
		tc{"heartbeat fallback not a URL", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","fallback":"status page"}`, 400, "invalid_request", `fallback "status page" is not accepted; accepted: an absolute http(s) URL`},
		tc{"heartbeat fallback javascript", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","fallback":"javascript:alert(1)"}`, 400, "invalid_request", "fallback"},
		tc{"heartbeat maintenance not bool", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","maintenance":"yes"}`, 400, "invalid_request", `field "maintenance" must be true or false`},
		tc{"heartbeat huge concurrency", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","max_concurrent":2000000}`, 400, "invalid_request", "max_concurrent is 2000000"},
		tc{"heartbeat unknown field", "POST", "/api/clients/heartbeat", opKey, `{"client_id":"c","hostname":"a.example.com","weight":1}`, 400, "invalid_request", `unknown field "weight"`},
		// autoscaleStatus, nodes, events, metrics
		tc{"status missing pool", "GET", "/api/pool/autoscaleStatus?tenant=acme&tenantDb=db", opKey, ``, 400, "invalid_request", "pool is required"},
		tc{"status unknown pool", "GET", "/api/pool/autoscaleStatus?tenant=acme&tenantDb=db&pool=nope", opKey, ``, 404, "not_found", "pool acme/db/nope not found"},
		tc{"status other tenant", "GET", "/api/pool/autoscaleStatus?tenant=acme&tenantDb=db&pool=p", globex, ``, 403, "forbidden", `may not touch tenant "acme"`},
		tc{"status unknown param", "GET", "/api/pool/autoscaleStatus?tenant=acme&tenantDb=db&pool=p&verbose=1", opKey, ``, 400, "invalid_request", `verbose`},
		tc{"nodes unknown pool", "GET", "/api/pool/nodes?tenant=acme&tenantDb=db&pool=nope", opKey, ``, 404, "not_found", "pool acme/db/nope not found"},
		tc{"routable no index", "POST", "/api/pool/nodes/setRoutable", opKey, `{` + ref + `,"role":"readonly","routable":false}`, 400, "invalid_request", "index is required"},
		tc{"routable negative index", "POST", "/api/pool/nodes/setRoutable", opKey, `{` + ref + `,"role":"readonly","index":-1,"routable":false}`, 400, "invalid_request", "index is required; accepted: a node index from 0"},
		tc{"routable no flag", "POST", "/api/pool/nodes/setRoutable", opKey, `{` + ref + `,"role":"readonly","index":0}`, 400, "invalid_request", "routable is required; accepted: true or false"},
		tc{"routable bad role", "POST", "/api/pool/nodes/setRoutable", opKey, `{` + ref + `,"role":"reader","index":0,"routable":false}`, 400, "invalid_request", `role "reader" is not a role; accepted: writeonly, readonly, dual`},
		tc{"routable no such node", "POST", "/api/pool/nodes/setRoutable", opKey, `{` + ref + `,"role":"readonly","index":9,"routable":false}`, 404, "not_found", "pool acme/db/p has no readonly node 9"},
		tc{"routable org key", "POST", "/api/pool/nodes/setRoutable", globex, `{` + ref + `,"role":"readonly","index":0,"routable":false}`, 403, "forbidden", "operator"},
		tc{"events bad last id", "GET", "/api/events?lastEventId=abc", opKey, ``, 400, "invalid_request", `Last-Event-ID "abc" is not accepted`},
		tc{"events other tenant", "GET", "/api/events?tenant=acme", globex, ``, 403, "forbidden", `may not touch tenant "acme"`},
		tc{"metrics no key", "GET", "/metrics", "", ``, 401, "unauthorized", "no API key"},
		tc{"metrics org key", "GET", "/metrics", globex, ``, 403, "forbidden", "operator"},
		// create
		tc{"create missing size", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n"}`, 400, "invalid_request", "size is required; accepted: 1 to 1024"},
		tc{"create negative size", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":-1}`, 400, "invalid_request", "size is -1; accepted: 1 to 1024"},
		tc{"create huge size", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":99999999999999999999}`, 400, "invalid_request", `field "size" must be a whole number`},
		tc{"create fractional size", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":2.5}`, 400, "invalid_request", `field "size" must be a whole number`},
		tc{"create string size", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":"2"}`, 400, "invalid_request", `field "size" must be a whole number`},
		tc{"create roles mismatch", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":3,"roleDistribution":{"writeonly":1,"readonly":1,"dual":0}}`, 400, "invalid_request", "adds up to 2 nodes but size is 3"},
		tc{"create negative role", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":1,"roleDistribution":{"writeonly":-1,"readonly":2,"dual":0}}`, 400, "invalid_request", "roleDistribution.writeonly is -1"},
		tc{"create nested wrong type", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":1,"roleDistribution":{"readonly":"1"}}`, 400, "invalid_request", `field "roleDistribution.readonly" must be a whole number`},
		tc{"create nested unknown", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":1,"roleDistribution":{"readers":1}}`, 400, "invalid_request", `unknown field "readers"`},
		tc{"create negative cap", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":1,"maxConcurrentPerNode":-5}`, 400, "invalid_request", "maxConcurrentPerNode is -5"},
		tc{"create half band", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":1,"minNodes":1}`, 400, "invalid_band", "set together or not at all"},
		tc{"create band rule", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":3,"minNodes":1,"maxNodes":2}`, 400, "invalid_band", "rule 4"},
		tc{"create cohort too big", "POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"db","pool":"n","size":1,"cohorts":[{"name":"etl","nodes":5}]}`, 400, "invalid_request", "cohorts[0].nodes is 5"},
		tc{"create duplicate", "POST", "/api/pool/create", opKey, `{` + ref + `,"size":1}`, 409, "conflict", "pool acme/db/p already exists"},
		// setAutoscale: the five rules and their shape.
		tc{"band rule 1", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"minNodes":0,"maxNodes":3}`, 400, "invalid_band", "rule 1 (1 <= minNodes <= maxNodes): minNodes is 0"},
		tc{"band rule 1 order", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"minNodes":4,"maxNodes":3}`, 400, "invalid_band", "minNodes 4 is greater than maxNodes 3"},
		tc{"band negative", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"minNodes":-3,"maxNodes":3}`, 400, "invalid_band", "minNodes is -3"},
		tc{"band rule 2", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"minNodes":2,"maxNodes":17}`, 400, "invalid_band", "maxNodes 17 exceeds the hard cap 16"},
		tc{"band huge", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"minNodes":2,"maxNodes":9223372036854775807}`, 400, "invalid_band", "exceeds the hard cap 16"},
		tc{"band overflow", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"minNodes":2,"maxNodes":9223372036854775808}`, 400, "invalid_request", `field "maxNodes" must be a whole number`},
		tc{"band rule 3", "POST", "/api/pool/setAutoscale", opKey, `{"tenant":"acme","tenantDb":"db","pool":"w2","minNodes":2,"maxNodes":4}`, 400, "invalid_band", "rule 3 (minNodes covers the write-capable nodes): minNodes 2 is below the pool's 3 write-capable nodes (writeonly 2 + dual 1)"},
		tc{"band rule 4", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"minNodes":3,"maxNodes":4}`, 400, "invalid_band", "rule 4 (current size inside the band): the pool's size 2 is outside the band [3, 4]"},
		tc{"band half", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"maxNodes":4}`, 400, "invalid_band", "got maxNodes 4 without minNodes"},
		tc{"band null", "POST", "/api/pool/setAutoscale", opKey, `{` + ref + `,"minNodes":null,"maxNodes":4}`, 400, "invalid_band", "got maxNodes 4 without minNodes"},
		tc{"band rule 5", "POST", "/api/pool/setAutoscale", opKey, `{"tenant":"acme","tenantDb":"db","pool":"cohorts","minNodes":1,"maxNodes":4}`, 400, "invalid_band", "rule 5 (no authored cohorts): the pool has 1 authored cohort(s)"},
		// scale
		tc{"scale missing target", "POST", "/api/pool/scale", opKey, `{` + ref + `}`, 400, "invalid_request", "targetSize is required"},
		tc{"scale negative", "POST", "/api/pool/scale", opKey, `{` + ref + `,"targetSize":-1}`, 400, "invalid_request", "targetSize is -1; accepted: 0 to 1024"},
		tc{"scale huge", "POST", "/api/pool/scale", opKey, `{` + ref + `,"targetSize":100000}`, 400, "invalid_request", "targetSize is 100000"},
		tc{"scale below writers", "POST", "/api/pool/scale", opKey, `{` + ref + `,"targetSize":1,"roleDistribution":{"writeonly":2,"readonly":0,"dual":0}}`, 400, "invalid_request", "adds up to 2 nodes but targetSize is 1"},
		tc{"scale outside band", "POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"db","pool":"banded","targetSize":5}`, 409, "outside_band", "targetSize 5 is outside the autoscale band [2, 4]; adjust the band first via pool/setAutoscale"},
		tc{"scale band writers", "POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"db","pool":"banded","targetSize":3,"roleDistribution":{"writeonly":3,"readonly":0,"dual":0}}`, 400, "invalid_band", "rule 3"},
		// reads
		tc{"get missing params", "GET", "/api/pool/get", opKey, ``, 400, "invalid_request", "tenant is required"},
		tc{"get unknown param", "GET", "/api/pool/get?tenant=acme&tenantDb=db&pool=p&x=1", opKey, ``, 400, "invalid_request", `unknown query parameter "x"`},
		tc{"get repeated param", "GET", "/api/pool/get?tenant=acme&tenant=acme&tenantDb=db&pool=p", opKey, ``, 400, "invalid_request", `"tenant" is given 2 times`},
		tc{"get unknown pool", "GET", "/api/pool/get?tenant=acme&tenantDb=db&pool=nope", opKey, ``, 404, "not_found", "pool acme/db/nope not found"},
		tc{"get other tenant", "GET", "/api/pool/get?tenant=acme&tenantDb=db&pool=p", globex, ``, 403, "forbidden", "scoped to org"},
		tc{"get no key", "GET", "/api/pool/get?tenant=acme&tenantDb=db&pool=p", "", ``, 401, "unauthorized", "no API key"},
		tc{"list bad tenant", "GET", "/api/pool/list?tenant=%00", opKey, ``, 400, "invalid_request", "tenant"},
		tc{"audit bad limit", "GET", "/api/audit?limit=-1", opKey, ``, 400, "invalid_request", `limit "-1" is not accepted`},
		tc{"config unknown param", "GET", "/api/autoscale/config?x=1", opKey, ``, 400, "invalid_request", "unknown query parameter"},
		tc{"unknown route", "GET", "/api/nope", opKey, ``, 404, "not_found", "no route for GET /api/nope"},
		// keys and tenants
		tc{"key bad kind", "POST", "/api/keys", opKey, `{"name":"k","org":"acme","kind":"root"}`, 400, "invalid_request", `kind "root" is not a key kind`},
		tc{"key bad cidr", "POST", "/api/keys", opKey, `{"name":"k","org":"acme","allowedIps":["10.0.0.1/99"]}`, 400, "invalid_request", `allowedIps[0] "10.0.0.1/99" is not a CIDR`},
		tc{"key past expiry", "POST", "/api/keys", opKey, `{"name":"k","org":"acme","expiresAt":"2000-01-01T00:00:00Z"}`, 400, "invalid_request", "is not in the future"},
		tc{"key bad expiry", "POST", "/api/keys", opKey, `{"name":"k","org":"acme","expiresAt":"tomorrow"}`, 400, "invalid_request", "malformed JSON"},
		tc{"key no name", "POST", "/api/keys", opKey, `{"org":"acme"}`, 400, "invalid_request", "name is required"},
		tc{"revoke unknown key", "DELETE", "/api/keys/nope", opKey, ``, 404, "not_found", `key "nope" not found`},
		tc{"quota negative", "POST", "/api/tenant/setQuota", opKey, `{"tenant":"acme","nodeQuota":-1}`, 400, "invalid_request", "nodeQuota is -1"},
		tc{"quota missing", "POST", "/api/tenant/setQuota", opKey, `{"tenant":"acme"}`, 400, "invalid_request", "nodeQuota is required"},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := h.call(c.method, c.path, c.key, c.body)
			if a.status != c.status || a.err.Code != c.code || !strings.Contains(a.err.Message, c.msg) {
				t.Fatalf("got %d %+v\nwant %d %s containing %q", a.status, a.err, c.status, c.code, c.msg)
			}
		})
	}
	// None of that changed the pools.
	p := h.mustCall("GET", "/api/pool/get?tenant=acme&tenantDb=db&pool=p", opKey, "", 200).pool(t)
	if p.Version != 1 || p.Size != 2 || p.Elastic {
		t.Fatalf("pool changed by refused calls: %+v", p)
	}
}

func unknownPoolBody(ep string) string {
	switch ep {
	case "setAutoscale":
		return `{"tenant":"acme","tenantDb":"db","pool":"nope","minNodes":1,"maxNodes":2}`
	case "scale":
		return `{"tenant":"acme","tenantDb":"db","pool":"nope","targetSize":1}`
	case "load":
		return `{"tenant":"acme","tenantDb":"db","pool":"nope","statements":[{"durationMs":5,"at":"` + time.Now().UTC().Format(time.RFC3339) + `"}]}`
	}
	return fmt.Sprintf(`{"tenant":"acme","tenantDb":"db","pool":%q}`, "nope")
}
