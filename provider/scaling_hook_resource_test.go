package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

func hookConfig(host, extra string) string {
	return fmt.Sprintf(`
resource "aperio_scaling_hook" "web" {
  hostname          = %q
  url               = "https://hooks.example.com/apps/web/scale"
  max               = 8
  cold_start        = "45s"
  secret_wo         = "s3cret-1"
  secret_wo_version = 1
%s
}`, host, extra)
}

func hookGone(host string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		if _, err := testServer.Client.GetScaling(context.Background(), host); err == nil {
			return fmt.Errorf("the hook for %s is still there after destroy", host)
		}
		return nil
	}
}

func TestAccScalingHook_lifecycle(t *testing.T) {
	host := "web-lifecycle.example.com"
	at := func(p string) tfjsonpath.Path { return tfjsonpath.New(p) }
	res := "aperio_scaling_hook.web"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             hookGone(host),
		Steps: []resource.TestStep{
			{
				Config: hookConfig(host, ""),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, at("id"), knownvalue.StringRegexp(regexp.MustCompile(`^sh_[0-9a-f]{24}$`))),
					statecheck.ExpectKnownValue(res, at("min"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue(res, at("max"), knownvalue.Int64Exact(8)),
					statecheck.ExpectKnownValue(res, at("cold_start"), knownvalue.StringExact("45s")),
					statecheck.ExpectKnownValue(res, at("window"), knownvalue.StringExact("15s")),
					statecheck.ExpectKnownValue(res, at("target_utilization"), knownvalue.Float64Exact(0.8)),
					statecheck.ExpectKnownValue(res, at("armed"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(res, at("secret_set"), knownvalue.Bool(true)),
					// Write-only: never in state.
					statecheck.ExpectKnownValue(res, at("secret_wo"), knownvalue.Null()),
				},
			},
			{
				Config:           hookConfig(host, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
			{
				Config: hookConfig(host, `  window = "30s"
  cooldown = "2m"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate)}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(res, at("window"), knownvalue.StringExact("30s")),
					statecheck.ExpectKnownValue(res, at("cooldown"), knownvalue.StringExact("2m")),
					statecheck.ExpectKnownValue(res, at("secret_set"), knownvalue.Bool(true)),
				},
			},
			{
				ResourceName:            res,
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"secret_wo", "secret_wo_version", "secret"},
			},
			{
				ResourceName:            res,
				ImportState:             true,
				ImportStateId:           host, // by hostname too
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"secret_wo", "secret_wo_version", "secret"},
			},
		},
	})
}

func secretConfig(host, secret string, version int) string {
	return fmt.Sprintf(`
resource "aperio_scaling_hook" "web" {
  hostname          = %q
  url               = "https://hooks.example.com/scale"
  max               = 2
  secret_wo         = %q
  secret_wo_version = %d
}`, host, secret, version)
}

// The write-only secret is sent on create and again only when its version
// changes; it never reaches state.
func TestAccScalingHook_secretVersionBumpResendsIt(t *testing.T) {
	host := "web-secret.example.com"
	serverHolds := func(want string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			got, err := testServer.Server.HookSecret(context.Background(), host)
			if err != nil || got != want {
				return fmt.Errorf("the server holds %q (%v), want %q", got, err, want)
			}
			return nil
		}
	}
	noSecretInState := func(s *terraform.State) error {
		for _, m := range s.Modules {
			for _, r := range m.Resources {
				for k, v := range r.Primary.Attributes {
					if strings.Contains(v, "first-secret") || strings.Contains(v, "second-secret") {
						return fmt.Errorf("state attribute %s holds the secret", k)
					}
				}
			}
		}
		return nil
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             hookGone(host),
		Steps: []resource.TestStep{
			{Config: secretConfig(host, "first-secret", 1), Check: resource.ComposeTestCheckFunc(serverHolds("first-secret"), noSecretInState)},
			{
				// A new value under the same version: nothing to do.
				Config:           secretConfig(host, "second-secret", 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
				Check:            serverHolds("first-secret"),
			},
			{
				Config:           secretConfig(host, "second-secret", 2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction("aperio_scaling_hook.web", plancheck.ResourceActionUpdate)}},
				Check:            resource.ComposeTestCheckFunc(serverHolds("second-secret"), noSecretInState),
			},
		},
	})
}

// A hook the breaker disarmed shows as a diff on armed, and apply re-arms it.
func TestAccScalingHook_breakerShowsAsADiff(t *testing.T) {
	host := "web-breaker.example.com"
	res := "aperio_scaling_hook.web"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             hookGone(host),
		Steps: []resource.TestStep{
			{Config: hookConfig(host, "")},
			{
				PreConfig: func() {
					ctx := context.Background()
					rec, err := testServer.Store.GetScaling(ctx, host)
					if err != nil {
						t.Fatal(err)
					}
					rec.State.Armed, rec.State.Failures = false, 5
					if err := testServer.Store.SaveScalingState(ctx, rec.ID, rec.State, rec.Version); err != nil {
						t.Fatal(err)
					}
				},
				Config: hookConfig(host, ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(res, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(res, tfjsonpath.New("armed"), knownvalue.Bool(true)),
				}},
				Check: func(*terraform.State) error {
					rec, err := testServer.Store.GetScaling(context.Background(), host)
					if err != nil || !rec.State.Armed || rec.State.Failures != 0 {
						return fmt.Errorf("apply did not re-arm: %+v %v", rec, err)
					}
					return nil
				},
			},
		},
	})
}

// The shared rules fail at validation, and the server's live outbound fence
// fails the plan: the exact errors apply would hit.
func TestAccScalingHook_planTimeRules(t *testing.T) {
	cases := []struct{ config, want string }{
		{`resource "aperio_scaling_hook" "x" {
  hostname = "x.example.com"
  url      = "https://hooks.example.com/scale"
  max      = 0
}`, `max is 0; accepted: 1 to 10000`},
		{`resource "aperio_scaling_hook" "x" {
  hostname = "x.example.com"
  url      = "https://hooks.example.com/scale"
  max      = 2
  window   = "15"
}`, `window "15" is not a duration`},
		{`resource "aperio_scaling_hook" "x" {
  hostname = "X.example.com"
  url      = "https://hooks.example.com/scale"
  max      = 2
}`, `is not a DNS name`},
		{`resource "aperio_scaling_hook" "x" {
  hostname = "x.example.com"
  url      = "https://inside.example.com/scale"
  max      = 2
}`, `url: host inside.example.com resolves to 10.0.0.9: an internal address`},
		{`resource "aperio_scaling_hook" "x" {
  hostname = "x.example.com"
  url      = "http://hooks.example.com/scale"
  max      = 2
}`, `url: http:// is not allowed`},
		{`resource "aperio_scaling_hook" "x" {
  hostname  = "x.example.com"
  url       = "https://hooks.example.com/scale"
  max       = 2
  secret    = "a"
  secret_wo = "b"
}`, `Attribute "secret" cannot be specified when "secret_wo" is specified`},
	}
	for _, c := range cases {
		resource.Test(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps:                    []resource.TestStep{{Config: c.config, PlanOnly: true, ExpectError: wrapped(c.want)}},
		})
	}
}

func TestAccScalingHooksDataSource(t *testing.T) {
	host := "web-listed.example.com"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: hookConfig(host, "") + `
data "aperio_scaling_hooks" "all" {
  depends_on = [aperio_scaling_hook.web]
}
output "listed" {
  value = [for h in data.aperio_scaling_hooks.all.hooks : h if h.hostname == "` + host + `"]
}`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownOutputValue("listed", knownvalue.ListExact([]knownvalue.Check{
					knownvalue.ObjectPartial(map[string]knownvalue.Check{
						"hostname":   knownvalue.StringExact(host),
						"armed":      knownvalue.Bool(true),
						"breaker":    knownvalue.StringExact("closed"),
						"secret_set": knownvalue.Bool(true),
						"source":     knownvalue.StringExact("api"),
						"active":     knownvalue.Bool(true),
					}),
				})),
			},
		}},
	})
}
