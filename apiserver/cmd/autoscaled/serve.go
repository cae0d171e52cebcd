package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/qodaperio/autoscale/apiserver"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/store/sqlite"
)

const (
	defaultListen   = "127.0.0.1:20900"
	defaultDatabase = "autoscaled.db"
)

type serveOptions struct {
	listen   string
	database string
	logLevel string
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API (the default command)",
		Long: `Serve the control plane's HTTP API until SIGINT or SIGTERM, then drain
in-flight requests for up to 10 seconds and exit.

Environment (flags win over it):
  QOD_LISTEN_ADDR      address to listen on (default 127.0.0.1:20900)
  QOD_DATABASE_URL     SQLite file path or sqlite:PATH (default ./autoscaled.db)
  QOD_API_KEY          operator key to create on first start (default: random, printed once)
  QOD_AUTOSCALE_*      autoscale settings; see docs/autoscale-settings.md`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serve(ctx, o, os.Getenv, os.Stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", envOr("QOD_LISTEN_ADDR", defaultListen), "address to listen on (QOD_LISTEN_ADDR)")
	f.StringVar(&o.database, "database-url", envOr("QOD_DATABASE_URL", defaultDatabase), "SQLite file, or sqlite:PATH (QOD_DATABASE_URL)")
	f.StringVar(&o.logLevel, "log-level", envOr("QOD_LOG_LEVEL", "info"), "debug, info, warn or error (QOD_LOG_LEVEL)")
	return cmd
}

func sqlitePath(dsn string) (string, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return "", errors.New("QOD_DATABASE_URL: a PostgreSQL store is not part of this build yet; use a SQLite file path")
	case strings.HasPrefix(dsn, "sqlite:"):
		dsn = strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
	case strings.Contains(dsn, "://"):
		return "", fmt.Errorf("QOD_DATABASE_URL %q: unknown scheme; accepted: a file path or sqlite:PATH", dsn)
	}
	if dsn == "" {
		return "", errors.New("QOD_DATABASE_URL is empty; accepted: a file path or sqlite:PATH")
	}
	return dsn, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("QOD_LOG_LEVEL %q; accepted: debug, info, warn, error", s)
	}
	return l, nil
}

func serve(ctx context.Context, o *serveOptions, getenv func(string) string, out *os.File) error {
	level, err := parseLevel(o.logLevel)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	settings, err := config.AutoscaleFromEnv(getenv)
	if err != nil {
		return err
	}
	path, err := sqlitePath(o.database)
	if err != nil {
		return err
	}
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	defer st.Close()
	secret, err := apiserver.EnsureOperatorKey(ctx, st, getenv("QOD_API_KEY"), time.Now())
	if err != nil {
		return err
	}
	if secret != "" && getenv("QOD_API_KEY") == "" {
		fmt.Fprintf(out, "\nOperator API key (shown once, keep it safe):\n\n    %s\n\n", secret)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s (QOD_LISTEN_ADDR): %w", o.listen, err)
	}
	srv := &http.Server{
		Handler:           apiserver.NewServer(apiserver.Deps{Store: st, Autoscale: settings, Now: time.Now, Logger: log}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("autoscaled listening", "addr", ln.Addr().String(), "database", path, "hardCap", settings.HardCap)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests")
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
