package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/refclient"
)

func newClientCmd() *cobra.Command {
	var file string
	var printConfig bool
	var help strings.Builder
	for _, s := range refclient.Settings {
		def := s.Default
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(&help, "  %-28s %-34s %s (default %s)\n", strings.Replace(s.Key, ".0.", "[0].", 1), s.Env, s.Help, def)
	}
	cmd := &cobra.Command{
		Use:   "client",
		Short: "Run the reference Aperio client: serve one hostname in front of a backend",
		Long: `client fronts one backend for one hostname: it listens for the edge, heartbeats
the API server so the edge routes the hostname's requests to it, announces the
hostname's scaling block, and retires after idle_timeout with nothing
arriving, draining its in-flight requests first (SIGINT and SIGTERM drain the
same way).

Settings come from aperio.yaml (--config) and APERIO_* variables; a variable
overrides the file's value of its own field only, so a file can declare the
scaling block and one variable change one value of it. ${NAME} in
server.token or scaling.secret is read from the environment.

` + help.String() + `
Example:
  APERIO_SERVER_TOKEN=$KEY APERIO_HOSTNAME=app.localhost \
  APERIO_TARGET=http://127.0.0.1:3000 APERIO_MAX_CONCURRENT=10 \
  APERIO_IDLE_TIMEOUT=5m autoscaled client`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var f *config.File
			if file != "" {
				var err error
				if f, err = config.ReadFile(file); err != nil {
					return err
				}
			}
			cfg, src, err := refclient.Load(f, os.Getenv)
			if err != nil {
				return err
			}
			if printConfig {
				fmt.Fprint(cmd.OutOrStdout(), cfg.Describe(src))
				return nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			err = refclient.Run(ctx, cfg, clock.Real{}, log, nil)
			if errors.Is(err, refclient.Retired) || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&file, "config", "", "aperio.yaml to read the settings from")
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the effective settings and where each came from, then exit")
	return cmd
}
