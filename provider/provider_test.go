package provider

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/config"
)

// testHardCap differs from the default so the tests show the provider takes
// the hard cap from the server, not from a constant of its own.
const testHardCap = 10

// testServer is the real API server the acceptance tests run against.
var testServer *apiservertest.Instance

// testAccProtoV6ProviderFactories serves both providers in-process.
var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"qod":    providerserver.NewProtocol6WithError(NewQod("test")()),
	"aperio": providerserver.NewProtocol6WithError(NewAperio("test")()),
}

// testDNS resolves the hook hosts the acceptance tests declare: one public,
// one internal (which the server's fence refuses).
type testDNS map[string]string

func (d testDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := d[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, errors.New("no such host")
}

func TestMain(m *testing.M) {
	if os.Getenv("CI") != "" && os.Getenv("TF_ACC") == "" {
		fmt.Fprintln(os.Stderr, "FATAL: CI is set but TF_ACC is not: acceptance tests must run in CI. Use the README's test command (make test).")
		os.Exit(1)
	}
	if os.Getenv("TF_ACC") != "" {
		tf := os.Getenv("TF_ACC_TERRAFORM_PATH")
		if tf == "" {
			var err error
			if tf, err = exec.LookPath("terraform"); err != nil {
				fmt.Fprintln(os.Stderr, "FATAL: TF_ACC is set but no terraform binary was found on PATH (nor TF_ACC_TERRAFORM_PATH).\n"+
					"Install Terraform 1.11 or unset TF_ACC; acceptance tests never download Terraform.")
				os.Exit(1)
			}
			os.Setenv("TF_ACC_TERRAFORM_PATH", tf)
		}
		os.Setenv("CHECKPOINT_DISABLE", "1")
	}
	settings := config.DefaultAutoscale()
	settings.HardCap = testHardCap
	var err error
	aperio := config.DefaultAperio()
	aperio.Scaling = true
	testServer, err = apiservertest.Start(apiservertest.Options{Autoscale: &settings, Aperio: &aperio,
		Resolver: testDNS{"hooks.example.com": "93.184.216.34", "inside.example.com": "10.0.0.9"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FATAL: starting the test API server:", err)
		os.Exit(1)
	}
	os.Setenv("QOD_ENDPOINT", testServer.URL)
	os.Setenv("QOD_API_KEY", apiservertest.OperatorKey)
	os.Setenv("APERIO_ENDPOINT", testServer.URL)
	os.Setenv("APERIO_API_KEY", apiservertest.OperatorKey)
	code := m.Run()
	testServer.Close()
	os.Exit(code)
}

// poolName turns a test's name into a pool name unique to it.
func poolName(t *testing.T) string {
	n := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(n) > 60 {
		n = n[len(n)-60:]
	}
	return strings.Trim(n, "-.")
}

// createPool creates a pool for a test through the real API.
func createPool(t *testing.T, req api.CreatePoolRequest) *api.Pool {
	t.Helper()
	p, err := testServer.Client.CreatePool(context.Background(), req)
	if err != nil {
		t.Fatalf("creating pool: %v", err)
	}
	return p
}

// wrapped matches text as Terraform prints it: its diagnostics wrap long
// lines, so any run of spaces in text may come out as a line break.
func wrapped(text string) *regexp.Regexp {
	parts := strings.Fields(text)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(strings.Join(parts, `\s+`))
}

func ptr[T any](v T) *T { return &v }
