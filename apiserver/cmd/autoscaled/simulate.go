package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/qodaperio/autoscale/internal/hooksim"
	"github.com/qodaperio/autoscale/internal/qodsim"
)

func newSimulateCmd() *cobra.Command {
	var actionsOnly bool
	cmd := &cobra.Command{
		Use:   "simulate SCENARIO.json",
		Short: "Replay a QoD load scenario or an Aperio hook scenario through the same engine the server runs",
		Long: `simulate replays a JSON scenario on a virtual clock through the engine the
server runs.

A QoD scenario (settings, one pool with its band, the statement-seconds
completed in each minute, and events such as suspend, resume, manual scale or
failing actions) prints one JSON line per sweep and per event: the time in
seconds, the direction, from and to, the utilization, the rule that moved or
held the pool, and for an action whether it succeeded.

A hook scenario (a "hook" declaration, per-second "samples" of the
hostname's client pool, in-flight and waiting requests, and "failures")
prints one JSON line per call the loop would make: the time, the reason,
current and desired, the utilization and whether it succeeded, and a line
when the breaker disarms the hook.

Use "-" to read the scenario from standard input. The format is documented in
docs/simulate.md; examples/simulate/ has scenarios to start from.`,
		Example: `  autoscaled simulate examples/simulate/bi-business-day.json
  autoscaled simulate --actions-only examples/simulate/bi-business-day.json
  autoscaled simulate examples/simulate/web-hook-morning.json`,
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
			data, err := io.ReadAll(io.LimitReader(in, 16<<20))
			if err != nil {
				return err
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false) // rules read "u >= 0.80", not "\u003e="
			var probe map[string]json.RawMessage
			if json.Unmarshal(data, &probe) == nil && probe["hook"] != nil {
				sc, h, err := hooksim.Parse(bytes.NewReader(data))
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				var werr error
				hooksim.Run(sc, h, func(l hooksim.Line) {
					if werr == nil {
						werr = enc.Encode(l)
					}
				})
				return werr
			}
			sc, settings, err := qodsim.Parse(bytes.NewReader(data))
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
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
