package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/qodaperio/autoscale/internal/api"
)

func TestAccPoolDataSource(t *testing.T) {
	name := poolName(t)
	createPool(t, api.CreatePoolRequest{
		PoolRef: api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: name}, Size: ptr(3),
		RoleDistribution: &api.Roles{Writeonly: 1, Readonly: 2}, MaxConcurrentPerNode: ptr(8),
		MinNodes: ptr(2), MaxNodes: ptr(5),
	})
	// Ten minute-long statements in one minute: demand 2 over the
	// five-minute window, against capacity 2 readers x 8 = 16.
	now := time.Now()
	stmts := make([]api.Statement, 10)
	for i := range stmts {
		stmts[i] = api.Statement{DurationMs: ptr(int64(60_000)), At: ptr(now.UTC().Format(time.RFC3339))}
	}
	ctx := context.Background()
	if _, err := testServer.Client.RecordLoad(ctx, api.LoadRequest{PoolRef: api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: name}, Statements: stmts}); err != nil {
		t.Fatal(err)
	}
	if rep := testServer.Server.Sweep(ctx, now.Add(2*time.Minute)); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	at := func(p string) tfjsonpath.Path { return tfjsonpath.New(p) }
	auto := func(p string) tfjsonpath.Path { return tfjsonpath.New("autoscale").AtMapKey(p) }
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: fmt.Sprintf(`
data "qod_pool" "bi" {
  tenant    = "acme"
  tenant_db = "acme_sales"
  pool      = %q
}`, name),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("id"), knownvalue.StringExact("acme/acme_sales/"+name)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("size"), knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("elastic"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("min_nodes"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("max_nodes"), knownvalue.Int64Exact(5)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("writeonly"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("readonly"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("dual"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("max_concurrent_per_node"), knownvalue.Int64Exact(8)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", at("suspended"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("decision"), knownvalue.StringExact("hold")),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("rule"), knownvalue.StringExact("quiet: in streak 1/10")),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("rule_code"), knownvalue.StringExact("in_streak")),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("demand"), knownvalue.Float64Exact(2)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("capacity"), knownvalue.Float64Exact(16)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("utilization"), knownvalue.Float64Exact(0.125)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("in_streak"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("in_streak_needed"), knownvalue.Int64Exact(10)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("out_cooldown_left_sec"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("data.qod_pool.bi", auto("enabled"), knownvalue.Bool(true)),
				},
			},
			{
				Config: `
data "qod_pool" "missing" {
  tenant    = "acme"
  tenant_db = "acme_sales"
  pool      = "no-such-pool"
}`,
				ExpectError: wrapped("pool acme/acme_sales/no-such-pool not found"),
			},
		},
	})
}

func TestAccPoolsDataSource(t *testing.T) {
	tenant := "listing"
	for _, n := range []string{"a", "b"} {
		createPool(t, api.CreatePoolRequest{PoolRef: api.PoolRef{Tenant: tenant, TenantDB: "db", Pool: n}, Size: ptr(1)})
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: `data "qod_pools" "all" { tenant = "listing" }`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.qod_pools.all", tfjsonpath.New("pools"), knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact("listing/db/a"), "size": knownvalue.Int64Exact(1), "elastic": knownvalue.Bool(false)}),
					knownvalue.ObjectPartial(map[string]knownvalue.Check{"id": knownvalue.StringExact("listing/db/b"), "min_nodes": knownvalue.Null()}),
				})),
			},
		}},
	})
}
