// The provider binary. One build serves two providers, `qod` and `aperio`;
// which one is decided by the file name Terraform runs
// (terraform-provider-qod* or terraform-provider-aperio*), or at build time
// with -ldflags "-X main.providerName=qod".
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/qodaperio/autoscale/provider"
)

// Set at build time.
var (
	version      = "0.1.0"
	providerName = "" // empty: decided by the binary's file name
)

// Namespace is the provider source namespace; the hostname is a local one so
// that `terraform init` installs from the local plugin directory.
const sourcePrefix = "terraform.local/qodaperio/"

func pick(name string) (string, error) {
	if providerName != "" {
		name = providerName
	} else {
		name = strings.TrimSuffix(filepath.Base(name), ".exe")
		name = strings.TrimPrefix(name, "terraform-provider-")
		name, _, _ = strings.Cut(name, "_") // terraform-provider-qod_v0.1.0
	}
	switch name {
	case "qod", "aperio":
		return name, nil
	}
	return "", fmt.Errorf("cannot tell which provider to serve from the name %q: name the binary terraform-provider-qod or terraform-provider-aperio, or build with -ldflags \"-X main.providerName=qod\"", filepath.Base(os.Args[0]))
}

// quietSDKLogsUnlessAsked turns the plugin SDK's own trace logs off when no
// TF_LOG* variable asks for logs. Terraform discards them in that case
// anyway, but producing them was a third of the provider's CPU time.
func quietSDKLogsUnlessAsked() {
	for _, v := range []string{"TF_LOG", "TF_LOG_PROVIDER", "TF_LOG_SDK", "TF_LOG_SDK_PROTO", "TF_LOG_SDK_FRAMEWORK"} {
		if os.Getenv(v) != "" {
			return
		}
	}
	os.Setenv("TF_LOG_SDK", "OFF")
	os.Setenv("TF_LOG_SDK_PROTO", "OFF")
	os.Setenv("TF_LOG_SDK_FRAMEWORK", "OFF")
}

func main() {
	debug := flag.Bool("debug", false, "run with support for debuggers like delve")
	flag.Parse()
	name, err := pick(os.Args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	quietSDKLogsUnlessAsked()
	factory := provider.NewQod(version)
	if name == "aperio" {
		factory = provider.NewAperio(version)
	}
	err = providerserver.Serve(context.Background(), factory, providerserver.ServeOpts{Address: sourcePrefix + name, Debug: *debug})
	if err != nil {
		log.Fatal(err)
	}
}
