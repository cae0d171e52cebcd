package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/qodaperio/autoscale/internal/api"
)

// TestAccProviderBlock: the provider block wins over the environment, and the
// server's verdict on the key reaches the operator at plan time.
func TestAccProviderBlock(t *testing.T) {
	name := poolName(t)
	createPool(t, api.CreatePoolRequest{PoolRef: api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: name}, Size: ptr(2)})
	globex, err := testServer.Client.CreateKey(context.Background(), api.CreateKeyRequest{Name: "globex-tf", Org: "globex"})
	if err != nil {
		t.Fatal(err)
	}
	acme, err := testServer.Client.CreateKey(context.Background(), api.CreateKeyRequest{Name: "acme-tf", Org: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	withKey := func(key string) string {
		return fmt.Sprintf(`
provider "qod" {
  endpoint = %q
  api_key  = %q
}
`, testServer.URL, key) + bandConfig(name, 1, 3)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      `provider "qod" { endpoint = "not a url" }` + bandConfig(name, 1, 3),
				PlanOnly:    true,
				ExpectError: wrapped(`endpoint "not a url" is not an http or https URL with a host`),
			},
			{
				Config:      withKey("not-a-real-key-at-all"),
				PlanOnly:    true,
				ExpectError: wrapped("unauthorized (HTTP 401): the API key is not valid"),
			},
			{
				Config:      withKey(globex.Secret),
				PlanOnly:    true,
				ExpectError: wrapped(`forbidden (HTTP 403): key ` + globex.ID + ` is scoped to org "globex" and may not touch tenant "acme"`),
			},
			{
				// An org-scoped admin key manages its own tenant's bands.
				Config: withKey(acme.Secret),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("qod_pool_autoscale.test", tfjsonpath.New("max_nodes"), knownvalue.Int64Exact(3)),
				},
			},
		},
	})
}
