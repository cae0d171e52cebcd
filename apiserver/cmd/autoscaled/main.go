// Command autoscaled is the control plane's API server. `serve` (the default)
// runs the API on an embedded SQLite file; see --help for the rest.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := newRootCmd()
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "autoscaled:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	serve := newServeCmd()
	root := &cobra.Command{
		Use:   "autoscaled",
		Short: "The autoscale control plane: QoD pools with autoscale bands, and their API",
		Long: `autoscaled serves the control plane's HTTP API (default 127.0.0.1:20900),
storing pools, bands, keys and the audit log in an embedded SQLite file.

Run with no arguments to serve. On the first start with an empty database it
creates the operator API key and prints it once (or takes QOD_API_KEY).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE:          serve.RunE,
	}
	root.Flags().AddFlagSet(serve.Flags())
	root.AddCommand(serve, newSimulateCmd(), newClientCmd())
	return root
}
