package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/client"
)

func bandConfig(name string, minNodes, maxNodes int) string {
	return fmt.Sprintf(`
resource "qod_pool_autoscale" "test" {
  tenant    = "acme"
  tenant_db = "acme_sales"
  pool      = %q
  min_nodes = %d
  max_nodes = %d
}
`, name, minNodes, maxNodes)
}

// serverBand checks the band the server holds for a pool.
func serverBand(name string, want *band.Band) resource.TestCheckFunc {
	return func(*terraform.State) error {
		p, err := testServer.Client.GetPool(context.Background(), "acme", "acme_sales", name)
		if err != nil {
			return err
		}
		switch {
		case want == nil && p.Elastic:
			return fmt.Errorf("server still has band [%d, %d]", *p.MinNodes, *p.MaxNodes)
		case want != nil && (!p.Elastic || *p.MinNodes != want.Min || *p.MaxNodes != want.Max):
			return fmt.Errorf("server band is elastic=%v %v/%v, want %v", p.Elastic, p.MinNodes, p.MaxNodes, want)
		}
		return nil
	}
}

func TestAccPoolAutoscale_lifecycle(t *testing.T) {
	name := poolName(t)
	createPool(t, api.CreatePoolRequest{
		PoolRef: api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: name}, Size: ptr(2),
		RoleDistribution: &api.Roles{Writeonly: 1, Readonly: 1},
	})
	id := "acme/acme_sales/" + name
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             serverBand(name, nil),
		Steps: []resource.TestStep{
			{
				Config: bandConfig(name, 2, 6),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("qod_pool_autoscale.test", plancheck.ResourceActionCreate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("qod_pool_autoscale.test", tfjsonpath.New("id"), knownvalue.StringExact(id)),
					statecheck.ExpectKnownValue("qod_pool_autoscale.test", tfjsonpath.New("min_nodes"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue("qod_pool_autoscale.test", tfjsonpath.New("max_nodes"), knownvalue.Int64Exact(6)),
					statecheck.ExpectKnownValue("qod_pool_autoscale.test", tfjsonpath.New("size"), knownvalue.Int64Exact(2)),
				},
				Check: serverBand(name, &band.Band{Min: 2, Max: 6}),
			},
			{
				// Applying the same configuration again changes nothing.
				Config: bandConfig(name, 2, 6),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
			},
			{
				Config: bandConfig(name, 2, 8),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply:             []plancheck.PlanCheck{plancheck.ExpectResourceAction("qod_pool_autoscale.test", plancheck.ResourceActionUpdate)},
					PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("qod_pool_autoscale.test", tfjsonpath.New("max_nodes"), knownvalue.Int64Exact(8)),
				},
				Check: resource.ComposeTestCheckFunc(
					serverBand(name, &band.Band{Min: 2, Max: 8}),
					// The band Terraform declared binds manual scaling too.
					func(*terraform.State) error {
						_, err := testServer.Client.Scale(context.Background(), api.ScaleRequest{
							PoolRef: api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: name}, TargetSize: ptr(9)})
						var ae *client.APIError
						if !errors.As(err, &ae) || ae.Code != api.CodeOutsideBand || ae.Status != 409 ||
							ae.Message != "targetSize 9 is outside the autoscale band [2, 8]; adjust the band first via pool/setAutoscale" {
							return fmt.Errorf("scale outside the band: got %v, want outside_band 409 with the reference message", err)
						}
						return nil
					},
				),
			},
			{
				ResourceName:      "qod_pool_autoscale.test",
				ImportState:       true,
				ImportStateId:     id,
				ImportStateVerify: true,
			},
			{
				ResourceName:    "qod_pool_autoscale.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
				ImportStateId:   id,
				// An import block must plan as a no-op import; the
				// testing framework fails the step otherwise.
			},
			{
				// import {} with -generate-config-out writes a resource
				// block that plans as a no-op import.
				ResourceName:    "qod_pool_autoscale.test",
				ImportState:     true,
				ImportStateKind: resource.ImportBlockWithID,
				ImportStateId:   id,
				GenerateConfig:  true,
				Config:          " ",
			},
		},
	})
}

func TestAccPoolAutoscale_disappears(t *testing.T) {
	name := poolName(t)
	ref := api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: name}
	createPool(t, api.CreatePoolRequest{PoolRef: ref, Size: ptr(3)})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: bandConfig(name, 1, 4)},
			{
				// Someone clears the band behind Terraform's back: the
				// plan declares it again.
				PreConfig: func() {
					if _, err := testServer.Client.SetAutoscale(context.Background(), api.SetAutoscaleRequest{PoolRef: ref}); err != nil {
						t.Fatalf("clearing the band: %v", err)
					}
				},
				Config: bandConfig(name, 1, 4),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("qod_pool_autoscale.test", plancheck.ResourceActionCreate),
				}},
				Check: serverBand(name, &band.Band{Min: 1, Max: 4}),
			},
			{
				// The pool itself deleted: refresh drops the band from
				// state and the plan to declare it again fails, since
				// apply would.
				PreConfig: func() {
					if err := testServer.Client.DeletePool(context.Background(), ref); err != nil {
						t.Fatalf("deleting the pool: %v", err)
					}
				},
				Config:      bandConfig(name, 1, 4),
				ExpectError: wrapped("pool acme/acme_sales/" + name + " does not exist; create it first"),
			},
		},
	})
}

// TestAccPoolAutoscale_planTimeRules shows each of the five band rules failing
// at plan with the server's own message, before anything is applied.
func TestAccPoolAutoscale_planTimeRules(t *testing.T) {
	name := poolName(t)
	mk := func(suffix string, req api.CreatePoolRequest) string {
		req.PoolRef = api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: name + suffix}
		createPool(t, req)
		return name + suffix
	}
	plain := mk("-plain", api.CreatePoolRequest{Size: ptr(2), RoleDistribution: &api.Roles{Writeonly: 1, Readonly: 1}})
	writers := mk("-writers", api.CreatePoolRequest{Size: ptr(4), RoleDistribution: &api.Roles{Writeonly: 2, Readonly: 1, Dual: 1}})
	big := mk("-big", api.CreatePoolRequest{Size: ptr(5)})
	cohorts := mk("-cohorts", api.CreatePoolRequest{Size: ptr(3), Cohorts: []api.Cohort{{Name: "etl", Nodes: 1}}})

	// The expected messages come from the same rules the server runs; the
	// API checks below show the server answers with the very same words.
	cases := []struct {
		pool     string
		min, max int
		want     string
	}{
		{plain, 0, 6, "rule 1 (1 <= minNodes <= maxNodes): minNodes is 0, it must be at least 1"},
		{plain, 5, 3, "rule 1 (1 <= minNodes <= maxNodes): minNodes 5 is greater than maxNodes 3"},
		{plain, 2, 12, "rule 2 (maxNodes <= autoscale.hardCap): maxNodes 12 exceeds the hard cap 10"},
		{writers, 2, 6, "rule 3 (minNodes covers the write-capable nodes): minNodes 2 is below the pool's 3 write-capable nodes (writeonly 2 + dual 1)"},
		{big, 1, 3, "rule 4 (current size inside the band): the pool's size 5 is outside the band [1, 3]; scale it into the band first"},
		{cohorts, 1, 4, "rule 5 (no authored cohorts): the pool has 1 authored cohort(s) and cannot be elastic"},
	}
	var steps []resource.TestStep
	for _, c := range cases {
		_, err := testServer.Client.SetAutoscale(context.Background(), api.SetAutoscaleRequest{
			PoolRef: api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: c.pool}, MinNodes: ptr(c.min), MaxNodes: ptr(c.max)})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Code != api.CodeInvalidBand || ae.Status != 400 || !regexp.MustCompile("^"+regexp.QuoteMeta(c.want)).MatchString(ae.Message) {
			t.Fatalf("server on %s [%d, %d]: got %v, want invalid_band %q", c.pool, c.min, c.max, err, c.want)
		}
		steps = append(steps, resource.TestStep{
			Config:      bandConfig(c.pool, c.min, c.max),
			PlanOnly:    true,
			ExpectError: wrapped("invalid_band: " + c.want),
		})
	}
	steps = append(steps, resource.TestStep{
		Config:      bandConfig(name+"-missing", 1, 2),
		PlanOnly:    true,
		ExpectError: wrapped("pool acme/acme_sales/" + name + "-missing does not exist"),
	}, resource.TestStep{
		Config:      bandConfig("bad/name", 1, 2),
		PlanOnly:    true,
		ExpectError: wrapped(`pool "bad/name" is not a valid name`),
	})
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: testAccProtoV6ProviderFactories, Steps: steps})
}

func TestAccPoolAutoscale_importErrors(t *testing.T) {
	name := poolName(t)
	createPool(t, api.CreatePoolRequest{PoolRef: api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: name}, Size: ptr(2)})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:        bandConfig(name, 1, 3),
				ResourceName:  "qod_pool_autoscale.test",
				ImportState:   true,
				ImportStateId: "acme/" + name,
				ExpectError:   wrapped("must have the form tenant/tenant_db/pool"),
			},
			{
				// A pool without a band has nothing to import.
				Config:        bandConfig(name, 1, 3),
				ResourceName:  "qod_pool_autoscale.test",
				ImportState:   true,
				ImportStateId: "acme/acme_sales/" + name,
				ExpectError:   wrapped("Cannot import non-existent remote object"),
			},
		},
	})
}

// stateFor builds resource state for a band on the named pool.
func stateFor(t *testing.T, r *poolAutoscaleResource, name string) tfsdk.State {
	t.Helper()
	ctx := context.Background()
	var sr fwresource.SchemaResponse
	r.Schema(ctx, fwresource.SchemaRequest{}, &sr)
	st := tfsdk.State{Schema: sr.Schema, Raw: tftypes.NewValue(sr.Schema.Type().TerraformType(ctx), nil)}
	diags := st.Set(ctx, &poolAutoscaleModel{
		ID: types.StringValue("acme/acme_sales/" + name), Tenant: types.StringValue("acme"), TenantDB: types.StringValue("acme_sales"),
		Pool: types.StringValue(name), MinNodes: types.Int64Value(1), MaxNodes: types.Int64Value(2), Size: types.Int64Value(2),
	})
	if diags.HasError() {
		t.Fatal(diags)
	}
	return st
}

// TestDeleteIgnoresNotFound: destroying the band of a pool that is already
// gone succeeds; any other failure is still reported.
func TestDeleteIgnoresNotFound(t *testing.T) {
	r := &poolAutoscaleResource{data: &qodData{client: testServer.Client}}
	st := stateFor(t, r, "never-existed")
	resp := fwresource.DeleteResponse{State: st}
	r.Delete(context.Background(), fwresource.DeleteRequest{State: st}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("delete of a gone pool: %v", resp.Diagnostics)
	}

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"code":"forbidden","message":"key is scoped to org \"globex\""}`))
	}))
	defer broken.Close()
	c, err := client.New(client.Options{Endpoint: broken.URL, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	r = &poolAutoscaleResource{data: &qodData{client: c}}
	resp = fwresource.DeleteResponse{State: st}
	r.Delete(context.Background(), fwresource.DeleteRequest{State: st}, &resp)
	if !resp.Diagnostics.HasError() {
		t.Fatal("a refused delete was reported as success")
	}
}
