package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/client"
	"github.com/qodaperio/autoscale/internal/store/postgres/pgtest"
)

const restartKey = "restart-test-operator-key"

var serverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "autoscaled-test")
	if err != nil {
		panic(err)
	}
	serverBin = filepath.Join(dir, "autoscaled")
	if out, err := exec.Command("go", "build", "-o", serverBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	pgtest.StopShared()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildServer returns the server binary built once for these tests.
func buildServer(*testing.T) string { return serverBin }

var listenRE = regexp.MustCompile(`autoscaled listening"? addr=(\S+)`)

// startServer runs the binary on a free port over db and waits until it
// says where it listens.
func startServer(t *testing.T, bin, db string) (*exec.Cmd, *client.Client) {
	t.Helper()
	cmd, c, _ := startServerWith(t, bin, db, nil)
	return cmd, c
}

// startServerWith also takes extra environment, and returns the address.
func startServerWith(t *testing.T, bin, db string, env []string, args ...string) (*exec.Cmd, *client.Client, string) {
	t.Helper()
	base := []string{"--listen", "127.0.0.1:0"}
	if db != "" {
		base = append(base, "--database-url", db)
	}
	cmd := exec.Command(bin, append(base, args...)...)
	// A free port for the edge too: tests run servers side by side.
	cmd.Env = append(append(os.Environ(), "QOD_API_KEY="+restartKey, "APERIO_EDGE_LISTEN_ADDR=127.0.0.1:0"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var seen []string
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
				io.Copy(io.Discard, stderr)
				return
			}
			seen = append(seen, sc.Text())
		}
		addr <- "exited: " + strings.Join(seen, "\n")
	}()
	select {
	case a := <-addr:
		if strings.HasPrefix(a, "exited: ") {
			t.Fatalf("server stopped before listening:\n%s", a)
		}
		c, err := client.New(client.Options{Endpoint: "http://" + a, APIKey: restartKey, RetryMax: 1})
		if err != nil {
			t.Fatal(err)
		}
		return cmd, c, a
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start within 30s")
	}
	return nil, nil, ""
}

// TestBandSurvivesSIGKILL kills the server the moment setAutoscale has
// answered 200, restarts it on the same file and finds the band there: an
// answered write is durable (WAL with synchronous=FULL).
func TestBandSurvivesSIGKILL(t *testing.T) {
	bin := buildServer(t)
	db := filepath.Join(t.TempDir(), "restart.db")
	ctx := context.Background()
	ref := api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: "bi"}

	cmd, c := startServer(t, bin, db)
	if _, err := c.CreatePool(ctx, api.CreatePoolRequest{PoolRef: ref, Size: ptr(2), RoleDistribution: &api.Roles{Writeonly: 1, Readonly: 1}}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 6; i++ {
		if _, err := c.SetAutoscale(ctx, api.SetAutoscaleRequest{PoolRef: ref, MinNodes: ptr(2), MaxNodes: ptr(10 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	_, c = startServer(t, bin, db)
	p, err := c.GetPool(ctx, "acme", "acme_sales", "bi")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Elastic || *p.MinNodes != 2 || *p.MaxNodes != 16 || p.Version != 6 {
		t.Fatalf("after SIGKILL and restart: %s, want band [2, 16] at version 6", fmt.Sprintf("elastic=%v version=%d", p.Elastic, p.Version))
	}
}

func ptr[T any](v T) *T { return &v }

// TestGracefulShutdown: SIGTERM drains and exits 0, and the data written
// before it is there on the next start.
func TestGracefulShutdown(t *testing.T) {
	bin := buildServer(t)
	db := filepath.Join(t.TempDir(), "graceful.db")
	cmd, c := startServer(t, bin, db)
	ref := api.PoolRef{Tenant: "acme", TenantDB: "db", Pool: "p"}
	if _, err := c.CreatePool(context.Background(), api.CreatePoolRequest{PoolRef: ref, Size: ptr(1)}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	_, c = startServer(t, bin, db)
	if _, err := c.GetPool(context.Background(), "acme", "db", "p"); err != nil {
		t.Fatal(err)
	}
}

func TestBadSettingStopsStartup(t *testing.T) {
	bin := buildServer(t)
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--database-url", filepath.Join(t.TempDir(), "x.db"))
	cmd.Env = append(os.Environ(), "QOD_AUTOSCALE_HARD_CAP=lots")
	out, err := cmd.CombinedOutput()
	want := `quack-on-demand.autoscale.hardCap (QOD_AUTOSCALE_HARD_CAP) is "lots"; accepted: a whole number from 1 to 1024`
	if err == nil || !regexp.MustCompile(regexp.QuoteMeta(want)).Match(out) {
		t.Fatalf("got %v: %s", err, out)
	}
}
