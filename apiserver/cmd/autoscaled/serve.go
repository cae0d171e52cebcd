package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/qodaperio/autoscale/apiserver"
	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/h1"
	"github.com/qodaperio/autoscale/internal/nodes"
	"github.com/qodaperio/autoscale/internal/secretbox"
	"github.com/qodaperio/autoscale/internal/store"
	"github.com/qodaperio/autoscale/internal/store/postgres"
	"github.com/qodaperio/autoscale/internal/store/sqlite"
)

const (
	defaultListen   = "127.0.0.1:20900"
	defaultDatabase = "autoscaled.db"
)

type serveOptions struct {
	config      string
	printConfig bool
	listen      string
	database    string
	logLevel    string
	// changed reports whether a flag was given on the command line.
	changed func(name string) bool
}

// edgeGCPercent is the server's garbage collector target unless GOGC is
// set. The edge allocates a few small objects per proxied request over a
// small live heap, so the default (100) collects very often; at 400 it
// serves about a tenth more requests per CPU second (docs/scaling-hooks.md,
// "The edge") for a few MiB more heap.
const edgeGCPercent = 400

func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(edgeGCPercent)
	}
}

func newServeCmd() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API and run the autoscale sweep (the default command)",
		Long: `Serve the control plane's HTTP API and run the QoD autoscale sweep until
SIGINT or SIGTERM, then drain in-flight requests for up to 10 seconds, stop
the nodes the server started, and exit.

Settings come from flags, the YAML file given with --config, the environment
and the defaults, in that order of precedence (a flag beats the file, the
file beats the environment). See docs/autoscale-settings.md for every key.

Environment:
  QOD_CONFIG           YAML config file (same as --config)
  QOD_LISTEN_ADDR      address to listen on (default 127.0.0.1:20900); file key listen_addr
  QOD_DATABASE_URL     SQLite file path or sqlite:PATH (default ./autoscaled.db); file key database_url
  QOD_LOG_LEVEL        debug, info, warn or error (default info); file key log_level
  QOD_API_KEY          operator key to create on first start (default: random, printed once)
  QOD_AUTOSCALE_*      autoscale settings; file keys quack-on-demand.autoscale.*
  QOD_NODE_BACKEND     memory (default) or process; file key quack-on-demand.nodes.backend
  QOD_NODE_COMMAND     the process backend's command template; quack-on-demand.nodes.command
  QOD_NODE_STOP_GRACE_SEC  seconds between SIGTERM and SIGKILL (default 10); quack-on-demand.nodes.stopGraceSec
  APERIO_*             the Aperio half's settings (scaling, outbound fence, edge address)

serve --print-config lists every setting with its file key, variable, value
and source, secrets masked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tuneGC(os.Getenv)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.changed = func(name string) bool {
				f := cmd.Flags().Lookup(name)
				return f != nil && f.Changed
			}
			return serve(ctx, o, os.Getenv, os.Stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", os.Getenv("QOD_CONFIG"), "YAML config file (QOD_CONFIG)")
	f.BoolVar(&o.printConfig, "print-config", false, "print the effective settings with where each comes from (flag, file, env, default), secrets masked, and exit")
	f.StringVar(&o.listen, "listen", defaultListen, "address to listen on (QOD_LISTEN_ADDR, listen_addr)")
	f.StringVar(&o.database, "database-url", defaultDatabase, "SQLite file, or sqlite:PATH (QOD_DATABASE_URL, database_url)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error (QOD_LOG_LEVEL, log_level)")
	return cmd
}

// resolve picks a server setting: the flag when given, else the file's
// key, else the variable, else the flag's default.
func resolve(o *serveOptions, file *config.File, getenv func(string) string, flag, key, env, value string) (string, config.Source, error) {
	v, _, ok, err := file.Scalar(key) // read even when a flag wins: the key is known
	if err != nil {
		return "", "", err
	}
	if o.changed != nil && o.changed(flag) {
		return value, "flag", nil
	}
	if ok {
		return v, config.FromFile, nil
	}
	if e := getenv(env); e != "" {
		return e, config.FromEnv, nil
	}
	return value, config.FromDefault, nil
}

// isPostgres reports whether the database URL selects PostgreSQL.
func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// openStore opens the store the URL names: PostgreSQL, with a leader
// election for the sweep, or a SQLite file (a single replica: no leader).
func openStore(ctx context.Context, dsn string) (store.Store, apiserver.Leader, string, error) {
	if isPostgres(dsn) {
		st, err := postgres.Open(ctx, dsn)
		if err != nil {
			return nil, nil, "", err
		}
		return st, st.NewLeader(postgres.SweepLock), "postgres", nil
	}
	path, err := sqlitePath(dsn)
	if err != nil {
		return nil, nil, "", err
	}
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, nil, "", err
	}
	return st, nil, path, nil
}

func sqlitePath(dsn string) (string, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		dsn = strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
	case strings.Contains(dsn, "://"):
		return "", fmt.Errorf("QOD_DATABASE_URL %q: unknown scheme; accepted: a file path, sqlite:PATH or postgres://...", redactURL(dsn))
	}
	if dsn == "" {
		return "", errors.New("QOD_DATABASE_URL is empty; accepted: a file path, sqlite:PATH or postgres://...")
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
	var stdout io.Writer = os.Stdout
	var file *config.File
	if o.config != "" {
		var err error
		if file, err = config.ReadFile(o.config); err != nil {
			return err
		}
	}
	var err error
	var levelSrc, listenSrc, dbSrc, keyFileSrc config.Source
	keyFile := ""
	if keyFile, keyFileSrc, err = resolve(o, file, getenv, "", "secret_key_file", "QOD_SECRET_KEY_FILE", ""); err != nil {
		return err
	}
	if o.logLevel, levelSrc, err = resolve(o, file, getenv, "log-level", "log_level", "QOD_LOG_LEVEL", o.logLevel); err != nil {
		return err
	}
	if o.listen, listenSrc, err = resolve(o, file, getenv, "listen", "listen_addr", "QOD_LISTEN_ADDR", o.listen); err != nil {
		return err
	}
	if o.database, dbSrc, err = resolve(o, file, getenv, "database-url", "database_url", "QOD_DATABASE_URL", o.database); err != nil {
		return err
	}
	level, err := parseLevel(o.logLevel)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	settings, autoscaleSrc, err := config.LoadAutoscale(file, getenv)
	if err != nil {
		return err
	}
	nodeSettings, nodeSrc, err := config.LoadNodes(file, getenv)
	if err != nil {
		return err
	}
	// The Aperio half's settings are read and checked here, so that the
	// whole surface is one file; the hook loop and the edge will use them.
	aperio, aperioSrc, err := config.LoadAperio(file, getenv)
	if err != nil {
		return err
	}
	if err := file.Unknown(); err != nil {
		return err
	}
	if o.printConfig {
		apiKey, apiKeySrc := "(none: generated on the first start and printed once)", config.FromDefault
		if getenv("QOD_API_KEY") != "" {
			apiKey, apiKeySrc = "***", config.FromEnv
		}
		rows := [][4]string{
			{"listen_addr", "QOD_LISTEN_ADDR", o.listen, string(listenSrc)},
			{"database_url", "QOD_DATABASE_URL", redactURL(o.database), string(dbSrc)},
			{"log_level", "QOD_LOG_LEVEL", o.logLevel, string(levelSrc)},
			{"", "QOD_API_KEY", apiKey, string(apiKeySrc)},
			{"secret_key_file", "QOD_SECRET_KEY_FILE", defaultKeyFile(o.database, keyFile), string(keyFileSrc)},
		}
		if getenv("QOD_SECRET_KEY") != "" {
			rows = append(rows, [4]string{"-", "QOD_SECRET_KEY", "***", string(config.FromEnv)})
		}
		envOf := config.AutoscaleEnv()
		a, _ := json.Marshal(settings)
		var values map[string]any
		_ = json.Unmarshal(a, &values)
		for _, k := range slices.Sorted(maps.Keys(autoscaleSrc)) {
			rows = append(rows, [4]string{config.AutoscalePrefix + k, envOf[k], fmt.Sprint(values[k]), string(autoscaleSrc[k])})
		}
		command := nodeSettings.Command
		rows = append(rows,
			[4]string{config.NodesPrefix + "backend", "QOD_NODE_BACKEND", nodeSettings.Backend, string(nodeSrc["backend"])},
			[4]string{config.NodesPrefix + "command", "QOD_NODE_COMMAND", command, string(nodeSrc["command"])},
			[4]string{config.NodesPrefix + "stopGraceSec", "QOD_NODE_STOP_GRACE_SEC", fmt.Sprint(nodeSettings.StopGrace.Seconds()), string(nodeSrc["stopGraceSec"])})
		aperioValues := map[string]string{
			"scaling": fmt.Sprint(aperio.Scaling), "scaling_allow_http": fmt.Sprint(aperio.ScalingAllowHTTP),
			"scaling_allow_private": fmt.Sprint(aperio.ScalingAllowPrivate), "outbound.allowlist": strings.Join(aperio.OutboundAllowlist, ","),
			"outbound.block_private": fmt.Sprint(aperio.OutboundBlockPrivate), "scaling_record_ttl": fmt.Sprint(aperio.ScalingRecordTTL.Seconds()),
			"edge_listen_addr": aperio.EdgeListenAddr, "event_webhooks": strings.Join(aperio.EventWebhooks, ","),
			"cold_start_max_pending": fmt.Sprint(aperio.ColdStartMaxPending), "edge_max_concurrent": fmt.Sprint(aperio.EdgeMaxConcurrent),
		}
		for _, k := range config.AperioKeys {
			rows = append(rows, [4]string{k.Key(), k.Env(), aperioValues[k.Key()], string(aperioSrc[k.Key()])})
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FILE KEY\tVARIABLE\tVALUE\tSOURCE")
		for _, r := range rows {
			if r[0] == "" {
				r[0] = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r[0], r[1], r[2], r[3])
		}
		return tw.Flush()
	}
	var backend nodes.Backend = nodes.NewMemory()
	if nodeSettings.Backend == "process" {
		if backend, err = nodes.NewProcess(nodes.ProcessOptions{Command: nodeSettings.Command, Grace: nodeSettings.StopGrace, Stderr: out}); err != nil {
			return err
		}
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), nodeSettings.StopGrace+5*time.Second)
		defer cancel()
		if err := backend.Close(stopCtx); err != nil {
			log.Warn("stopping nodes", "err", err)
		}
	}()
	if fp := getenv("QOD_FAILPOINT"); fp != "" {
		if err := armFailpoint(fp, log); err != nil {
			return err
		}
	}
	secretKey, err := loadSecretKey(getenv("QOD_SECRET_KEY"), defaultKeyFile(o.database, keyFile), log)
	if err != nil {
		return err
	}
	st, leader, where, err := openStore(ctx, o.database)
	if err != nil {
		return err
	}
	defer st.Close()
	if l, ok := leader.(*postgres.Leader); ok {
		defer l.Close()
	}
	secret, err := apiserver.EnsureOperatorKey(ctx, st, getenv("QOD_API_KEY"), time.Now())
	if err != nil {
		return err
	}
	if secret != "" && getenv("QOD_API_KEY") == "" {
		fmt.Fprintf(out, "\nOperator API key (shown once, keep it safe):\n\n    %s\n\n", secret)
	}
	server := apiserver.New(apiserver.Deps{Store: st, Autoscale: settings, Clock: clock.Real{}, Logger: log, Nodes: backend, Leader: leader,
		Aperio: aperio, SecretKey: secretKey})
	if err := server.RestoreNodes(ctx); err != nil {
		return fmt.Errorf("start the stored pools' nodes: %w", err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s (QOD_LISTEN_ADDR): %w", o.listen, err)
	}
	srv := &http.Server{
		Handler:           server.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		// No WriteTimeout: /api/events streams for as long as the client
		// stays; it sets its own write deadline per event instead.
		IdleTimeout: 120 * time.Second,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Event streams never go idle by themselves: end them when shutdown
	// starts, so that draining waits only for real requests.
	srv.RegisterOnShutdown(server.CloseStreams)
	log.Info("autoscaled listening", "addr", ln.Addr().String(), "database", where, "hardCap", settings.HardCap,
		"sweepSeconds", settings.SweepSeconds, "autoscale", settings.Enabled, "nodes", nodeSettings.Backend)
	sweepCtx, stopSweeps := context.WithCancel(context.Background())
	sweepsDone := make(chan struct{})
	hooksDone := make(chan struct{})
	go func() { defer close(sweepsDone); _ = server.RunSweeps(sweepCtx) }()
	webhooksDone := make(chan struct{})
	probesDone := make(chan struct{})
	go func() { defer close(hooksDone); _ = server.RunHookLoop(sweepCtx) }()
	go func() { defer close(webhooksDone); _ = server.RunWebhooks(sweepCtx) }()
	go func() { defer close(probesDone); _ = server.RunProbes(sweepCtx) }()
	defer func() { stopSweeps(); <-sweepsDone; <-hooksDone; <-webhooksDone; <-probesDone }()

	// The edge: requests by Host to the registered clients.
	edgeLn, err := net.Listen("tcp", aperio.EdgeListenAddr)
	if err != nil {
		return fmt.Errorf("listen on %s (APERIO_EDGE_LISTEN_ADDR): %w", aperio.EdgeListenAddr, err)
	}
	// The edge is served by h1 rather than net/http: the same rules with
	// less work around each proxied request (see internal/h1 for why).
	edgeSrv := &h1.Server{Handler: server.EdgeHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		Log: log}
	log.Info("edge listening", "addr", edgeLn.Addr().String())
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- edgeSrv.Serve(edgeLn) }()
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
	if err := edgeSrv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("edge shutdown: %w", err)
	}
	// Closed minutes not yet flushed are written before exit.
	if _, err := server.FlushLoad(context.Background(), time.Now().Add(time.Minute)); err != nil {
		log.Warn("final load flush failed", "err", err)
	}
	log.Info("stopped")
	return nil
}

// redactURL hides the password of a URL for messages and --print-config.
func redactURL(u string) string {
	scheme := strings.Index(u, "://")
	at := strings.LastIndex(u, "@")
	if scheme < 0 || at < scheme {
		return u
	}
	creds := u[scheme+3 : at]
	if colon := strings.Index(creds, ":"); colon >= 0 {
		return u[:scheme+3] + creds[:colon] + ":***" + u[at:]
	}
	return u
}

// armFailpoint is for crash tests only: QOD_FAILPOINT=OP[:N] makes the
// server SIGKILL itself just before committing its Nth (default first)
// transaction of kind OP ("mutate" or "flush"), with the transaction open.
func armFailpoint(spec string, log *slog.Logger) error {
	op, nth := spec, 1
	if i := strings.Index(spec, ":"); i >= 0 {
		n, err := strconv.Atoi(spec[i+1:])
		if err != nil || n < 1 {
			return fmt.Errorf("QOD_FAILPOINT %q; accepted: mutate or flush, optionally :N with N >= 1", spec)
		}
		op, nth = spec[:i], n
	}
	if op != "mutate" && op != "flush" {
		return fmt.Errorf("QOD_FAILPOINT %q; accepted: mutate or flush, optionally :N with N >= 1", spec)
	}
	log.Warn("QOD_FAILPOINT is set: this server will kill itself before a commit", "op", op, "nth", nth)
	var seen atomic.Int64
	store.BeforeCommit = func(got string) {
		if got == op && seen.Add(1) == int64(nth) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	return nil
}

// defaultKeyFile is where the server key for hook secrets lives: the file
// named by secret_key_file, else beside the SQLite file, else
// ./autoscaled.key (PostgreSQL replicas must share one key: set
// QOD_SECRET_KEY or point them at the same file).
func defaultKeyFile(dsn, configured string) string {
	if configured != "" {
		return configured
	}
	if isPostgres(dsn) {
		return "autoscaled.key"
	}
	if path, err := sqlitePath(dsn); err == nil {
		return path + ".key"
	}
	return "autoscaled.key"
}

// loadSecretKey takes QOD_SECRET_KEY (base64 of 32 bytes) when set, else
// the key file, creating it on the first start.
func loadSecretKey(env, file string, log *slog.Logger) ([]byte, error) {
	if env != "" {
		k, err := secretbox.ParseKey(env)
		if err != nil {
			return nil, fmt.Errorf("QOD_SECRET_KEY: %w", err)
		}
		return k, nil
	}
	k, created, err := secretbox.LoadOrCreate(file)
	if err != nil {
		return nil, err
	}
	if created {
		log.Info("created the server key that seals hook secrets; back it up beside the database", "file", file)
	}
	return k, nil
}
