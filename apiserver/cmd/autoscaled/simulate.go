package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/qodaperio/autoscale/internal/qodsim"
)

func newSimulateCmd() *cobra.Command {
	var actionsOnly bool
	cmd := &cobra.Command{
		Use:   "simulate SCENARIO.json",
		Short: "Replay a load scenario through the QoD autoscale engine and print every decision",
		Long: `simulate replays a JSON scenario (settings, one pool with its band, the
statement-seconds completed in each minute, and events such as suspend,
resume, manual scale or failing actions) through the same engine the server
sweeps with, on a virtual clock. It prints one JSON line per sweep and per
event: the time in seconds, the direction, from and to, the utilization, the
rule that moved or held the pool, and for an action whether it succeeded.

Use "-" to read the scenario from standard input. The format is documented in
docs/simulate.md; examples/simulate/ has scenarios to start from.`,
		Example: `  autoscaled simulate examples/simulate/bi-business-day.json
  autoscaled simulate --actions-only examples/simulate/bi-business-day.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var in io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			sc, settings, err := qodsim.Parse(in)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false) // rules read "u >= 0.80", not "\u003e="
			var werr error
			qodsim.Run(sc, settings, func(l qodsim.Line) {
				if werr != nil || (actionsOnly && l.Direction == "" && l.Event == "") {
					return
				}
				werr = enc.Encode(l)
			})
			return werr
		},
	}
	cmd.Flags().BoolVar(&actionsOnly, "actions-only", false, "print only actions and events, not the sweeps that held the pool still")
	return cmd
}
