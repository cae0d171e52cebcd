package main

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/client"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/store"
	"github.com/qodaperio/autoscale/internal/store/postgres"
	"github.com/qodaperio/autoscale/internal/store/postgres/pgtest"
	"github.com/qodaperio/autoscale/internal/store/sqlite"
)

func TestConfigFileErrorsStopStartup(t *testing.T) {
	bin := buildServer(t)
	dir := t.TempDir()
	cases := map[string]string{
		"quack-on-demand:\n  autoscale:\n    hardCap: 0\n":    `line 3: quack-on-demand.autoscale.hardCap is "0"; accepted: a whole number from 1 to 1024`,
		"quack-on-demand:\n  autoscale:\n    sweepSecs: 30\n": "unknown key(s) quack-on-demand.autoscale.sweepSecs (line 3)",
		"quack-on-demand:\n  nodes:\n    backend: docker\n":   `quack-on-demand.nodes.backend is "docker"; accepted: memory or process`,
		"listen_addr: [a, b]\n":                               "listen_addr must be a single value, not a list",
		"log_level: loud\n":                                   `QOD_LOG_LEVEL "loud"; accepted: debug, info, warn, error`,
		"quack-on-demand: {autoscale: {enabled: true}\n":      "server.yaml",
	}
	for text, want := range cases {
		path := filepath.Join(dir, "server.yaml")
		os.WriteFile(path, []byte(text), 0o600)
		cmd := exec.Command(bin, "--config", path, "--database-url", filepath.Join(dir, "x.db"))
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("%q: got %v: %s\nwant %q", text, err, out, want)
		}
	}
}

// The file wins over the environment, and a flag over the file.
func TestConfigFilePrecedence(t *testing.T) {
	bin := buildServer(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "server.yaml")
	os.WriteFile(path, []byte("quack-on-demand:\n  autoscale:\n    hardCap: 9\n    sweepSeconds: 45\nlisten_addr: 127.0.0.1:1\n"), 0o600)
	// --listen beats listen_addr (port 1 would fail); the file's hardCap
	// beats the environment's.
	_, c, _ := startServerWith(t, bin, filepath.Join(dir, "p.db"), []string{"QOD_AUTOSCALE_HARD_CAP=12", "QOD_AUTOSCALE_SWEEP_SEC=300"}, "--config", path)
	cfg, err := c.AutoscaleConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HardCap != 9 || cfg.SweepSeconds != 45 {
		t.Fatalf("effective settings %+v, want hardCap 9 and sweepSeconds 45 from the file", cfg)
	}
}

// With the process backend every node is a child of the server: a pool's
// nodes start with it, come back after a restart, and stop with the server.
func TestProcessBackendNodesLiveAndDieWithTheServer(t *testing.T) {
	bin := buildServer(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "n.db")
	env := []string{"QOD_NODE_BACKEND=process", "QOD_NODE_STOP_GRACE_SEC=2",
		"QOD_NODE_COMMAND=echo $$ >> " + dir + "/pids; exec sleep 600"}
	cmd, c, _ := startServerWith(t, bin, db, env)
	ref := api.PoolRef{Tenant: "acme", TenantDB: "db", Pool: "p"}
	if _, err := c.CreatePool(context.Background(), api.CreatePoolRequest{PoolRef: ref, Size: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pids")
	stopAndCheck := func(want int) {
		t.Helper()
		waitPids(t, pidFile, want) // the children are up and have said so
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		pids := readPids(t, pidFile)
		if len(pids) != want {
			t.Fatalf("%d nodes were started, want %d", len(pids), want)
		}
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				t.Fatalf("node pid %d outlived the server", pid)
			}
		}
	}
	stopAndCheck(2)
	cmd, _, _ = startServerWith(t, bin, db, env)
	stopAndCheck(4) // the restart started the stored pool's two nodes again
}

// waitPids waits until n children have written their pid: they start on
// their own, so this polls, with a deadline.
func waitPids(t *testing.T, path string, n int) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && strings.Count(string(b), "\n") >= n {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%d children never wrote their pids to %s", n, path)
		}
	}
}

func readPids(t *testing.T, path string) []int {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatalf("pid file line %q", sc.Text())
		}
		pids = append(pids, pid)
	}
	return pids
}

// An open event stream does not hold up a graceful shutdown.
func TestShutdownEndsEventStreams(t *testing.T) {
	bin := buildServer(t)
	cmd, _, addr := startServerWith(t, bin, filepath.Join(t.TempDir(), "e.db"), nil)
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/events", nil)
	req.Header.Set("X-API-Key", restartKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit with a stream open: %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("shutdown waited on the event stream")
	}
}

func TestPrintConfigShowsSourcesAndMasksSecrets(t *testing.T) {
	bin := buildServer(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "server.yaml")
	os.WriteFile(path, []byte("quack-on-demand:\n  autoscale:\n    hardCap: 9\n"), 0o600)
	cmd := exec.Command(bin, "--print-config", "--config", path, "--log-level", "debug")
	cmd.Env = append(os.Environ(), "QOD_API_KEY=a-very-secret-operator-key", "QOD_AUTOSCALE_IN_STREAK=4",
		"QOD_DATABASE_URL=postgres://app:hunter2@db.internal:5432/qod", "APERIO_OUTBOUND_ALLOWLIST=*.example.com, 10.0.0.0/8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	text := string(out)
	for _, re := range []string{
		`log_level +QOD_LOG_LEVEL +debug +flag`,
		`database_url +QOD_DATABASE_URL +postgres://app:\*\*\*@db.internal:5432/qod +env`,
		`- +QOD_API_KEY +\*\*\* +env`,
		`quack-on-demand.autoscale.hardCap +QOD_AUTOSCALE_HARD_CAP +9 +file`,
		`quack-on-demand.autoscale.inStreak +QOD_AUTOSCALE_IN_STREAK +4 +env`,
		`quack-on-demand.autoscale.outStreak +QOD_AUTOSCALE_OUT_STREAK +2 +default`,
		`quack-on-demand.nodes.backend +QOD_NODE_BACKEND +memory +default`,
		`outbound.allowlist +APERIO_OUTBOUND_ALLOWLIST +\*.example.com,10.0.0.0/8 +env`,
		`scaling +APERIO_SCALING +false +default`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("print-config lacks /%s/:\n%s", re, text)
		}
	}
	if strings.Contains(text, "hunter2") || strings.Contains(text, "a-very-secret") {
		t.Fatalf("a secret leaked:\n%s", text)
	}
}

// The server binary on PostgreSQL: ready, leading (alone), and its data
// there after a restart.
func TestServeOnPostgres(t *testing.T) {
	c, err := pgtest.Shared()
	if err != nil {
		t.Fatalf("PostgreSQL for the tests: %v", err)
	}
	url, err := c.NewDatabase(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bin := buildServer(t)
	env := []string{"QOD_DATABASE_URL=" + url}
	cmd, cl, addr := startServerWith(t, bin, "", env)
	ref := api.PoolRef{Tenant: "acme", TenantDB: "db", Pool: "p"}
	if _, err := cl.CreatePool(context.Background(), api.CreatePoolRequest{PoolRef: ref, Size: ptr(2), MinNodes: ptr(2), MaxNodes: ptr(4)}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", err, resp)
	}
	resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	_, cl, _ = startServerWith(t, bin, "", env)
	p, err := cl.GetPool(context.Background(), "acme", "db", "p")
	if err != nil || *p.MaxNodes != 4 {
		t.Fatalf("after restart: %+v, %v", p, err)
	}
}

// crashStores runs fn once per store: SQLite, and PostgreSQL.
func crashStores(t *testing.T, fn func(t *testing.T, dsn string, open func() store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "crash.db")
		fn(t, path, func() store.Store {
			st, err := sqlite.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			return st
		})
	})
	t.Run("postgres", func(t *testing.T) {
		c, err := pgtest.Shared()
		if err != nil {
			t.Fatalf("PostgreSQL for the tests: %v", err)
		}
		url, err := c.NewDatabase(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		fn(t, url, func() store.Store {
			st, err := postgres.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			return st
		})
	})
}

// waitKilled waits for the server to die of SIGKILL.
func waitKilled(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("the server ended with %v, want killed by its failpoint", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the failpoint never fired")
	}
}

// SIGKILL in the middle of a scale: the transaction that was open is gone
// whole (size, version, audit row), and the one committed before it stays.
func TestCrashMidScaleLosesNothingCommitted(t *testing.T) {
	bin := buildServer(t)
	crashStores(t, func(t *testing.T, dsn string, open func() store.Store) {
		ref := api.PoolRef{Tenant: "acme", TenantDB: "db", Pool: "p"}
		ctx := context.Background()
		// Mutations: 1 create, 2 scale to 3, 3 scale to 4 (killed before commit).
		cmd, c, _ := startServerWith(t, bin, "", []string{"QOD_DATABASE_URL=" + dsn, "QOD_FAILPOINT=mutate:3"})
		if _, err := c.CreatePool(ctx, api.CreatePoolRequest{PoolRef: ref, Size: ptr(2)}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Scale(ctx, api.ScaleRequest{PoolRef: ref, TargetSize: ptr(3)}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Scale(ctx, api.ScaleRequest{PoolRef: ref, TargetSize: ptr(4)}); err == nil {
			t.Fatal("the scale whose transaction was killed answered")
		}
		waitKilled(t, cmd)
		st := open()
		defer st.Close()
		p, err := st.GetPool(ctx, pool.Key{Tenant: "acme", TenantDB: "db", Pool: "p"})
		if err != nil || p.Size() != 3 || p.Version != 2 {
			t.Fatalf("after the crash: %+v, %v; want size 3 at version 2", p, err)
		}
		rows, _ := st.ListAudit(ctx, "acme", 10)
		if len(rows) != 2 || rows[0].Detail["toSize"] != float64(3) {
			t.Fatalf("audit after the crash: %+v", rows)
		}
	})
}

// SIGKILL in the middle of a load flush (the final one, at shutdown): the
// flush is gone whole, never half there; a clean flush afterwards lands
// exactly once.
func TestCrashMidFlushCountsNothingTwice(t *testing.T) {
	bin := buildServer(t)
	crashStores(t, func(t *testing.T, dsn string, open func() store.Store) {
		ctx := context.Background()
		k := pool.Key{Tenant: "acme", TenantDB: "db", Pool: "p"}
		report := func(c *client.Client, n int) {
			t.Helper()
			stmts := make([]api.Statement, n)
			for i := range stmts {
				stmts[i] = api.Statement{DurationMs: ptr(int64(1000)), At: ptr(time.Now().UTC().Format(time.RFC3339))}
			}
			if _, err := c.RecordLoad(ctx, api.LoadRequest{PoolRef: api.PoolRef{Tenant: k.Tenant, TenantDB: k.TenantDB, Pool: k.Pool}, Statements: stmts}); err != nil {
				t.Fatal(err)
			}
		}
		cmd, c, _ := startServerWith(t, bin, "", []string{"QOD_DATABASE_URL=" + dsn, "QOD_FAILPOINT=flush"})
		if _, err := c.CreatePool(ctx, api.CreatePoolRequest{PoolRef: api.PoolRef{Tenant: k.Tenant, TenantDB: k.TenantDB, Pool: k.Pool}, Size: ptr(2)}); err != nil {
			t.Fatal(err)
		}
		report(c, 7)
		cmd.Process.Signal(syscall.SIGTERM) // the final flush runs, and is killed
		waitKilled(t, cmd)
		now := time.Now().Unix() / 60
		st := open()
		if got, err := st.PoolLoad(ctx, k, now-5, now+5); err != nil || got != 0 {
			t.Fatalf("a killed flush left %d ms (%v)", got, err)
		}
		st.Close()

		cmd, c, _ = startServerWith(t, bin, "", []string{"QOD_DATABASE_URL=" + dsn})
		report(c, 5)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("clean exit: %v", err)
		}
		st = open()
		defer st.Close()
		if got, err := st.PoolLoad(ctx, k, now-5, now+5); err != nil || got != 5000 {
			t.Fatalf("after a clean flush: %d ms (%v), want 5000 exactly", got, err)
		}
	})
}

// The key that seals hook secrets is created beside the SQLite file on the
// first start, private to the server's user, and kept across restarts.
func TestSecretKeyFileIsCreatedOnce(t *testing.T) {
	bin := buildServer(t)
	db := filepath.Join(t.TempDir(), "k.db")
	cmd, _, _ := startServerWith(t, bin, db, nil)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	info, err := os.Stat(db + ".key")
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", info, err)
	}
	first, _ := os.ReadFile(db + ".key")
	cmd, _, _ = startServerWith(t, bin, db, nil)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if again, _ := os.ReadFile(db + ".key"); string(again) != string(first) {
		t.Fatal("the key changed across a restart")
	}
	bad := exec.Command(bin, "--database-url", db)
	bad.Env = append(os.Environ(), "QOD_SECRET_KEY=not-base64!")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "QOD_SECRET_KEY: the secret key is not base64") {
		t.Fatalf("a bad QOD_SECRET_KEY: %v %s", err, out)
	}
}
