// Package pgtest gives tests a PostgreSQL to talk to: the cluster named by
// QOD_TEST_POSTGRES_URL when set (.ci/run starts one), or else a throwaway
// cluster of its own, made with initdb and pg_ctl in a temporary directory
// and listening only on a Unix socket there. Each caller gets a fresh
// database in it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Cluster is a running PostgreSQL.
type Cluster struct {
	// URL reaches the cluster's maintenance database.
	URL  string
	dir  string
	stop func() error
}

var (
	once    sync.Once
	shared  *Cluster
	initErr error
	dbs     atomic.Int64
)

// Shared returns the cluster for this test process, starting it on first
// use. Stop it with StopShared from TestMain.
func Shared() (*Cluster, error) {
	once.Do(func() {
		if url := os.Getenv("QOD_TEST_POSTGRES_URL"); url != "" {
			shared = &Cluster{URL: url, stop: func() error { return nil }}
			return
		}
		shared, initErr = Start()
	})
	return shared, initErr
}

// StopShared stops the cluster Shared started, if any.
func StopShared() {
	if shared != nil {
		shared.Stop()
	}
}

// run runs a PostgreSQL program; as root, as the postgres user (initdb
// refuses root).
func run(name string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if u, err := user.Current(); err == nil && u.Uid == "0" {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Start makes and starts a new cluster in a temporary directory.
func Start() (*Cluster, error) {
	if _, err := exec.LookPath("initdb"); err != nil {
		return nil, errors.New("pgtest: initdb is not on PATH; install PostgreSQL 15 or set QOD_TEST_POSTGRES_URL")
	}
	dir, err := os.MkdirTemp("", "pg")
	if err != nil {
		return nil, err
	}
	if u, err := user.Current(); err == nil && u.Uid == "0" {
		if out, err := exec.Command("chown", "postgres", dir).CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: chown %s: %v %s", dir, err, out)
		}
	}
	data := filepath.Join(dir, "data")
	if _, err := run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	opts := fmt.Sprintf("-k %s -c listen_addresses='' -c max_connections=200", dir)
	if _, err := run("pg_ctl", "-D", data, "-o", opts, "-w", "-l", filepath.Join(dir, "log"), "start"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &Cluster{URL: fmt.Sprintf("postgres://postgres@/postgres?host=%s&sslmode=disable", dir), dir: dir}
	c.stop = func() error {
		_, err := run("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
		os.RemoveAll(dir)
		return err
	}
	return c, nil
}

// Stop stops the cluster and removes its files.
func (c *Cluster) Stop() error { return c.stop() }

// NewDatabase creates an empty database and returns its URL.
func (c *Cluster) NewDatabase(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("qodtest_%d_%d", os.Getpid(), dbs.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtest: create database: %w", err)
	}
	return withDatabase(c.URL, name), nil
}

// withDatabase replaces the database in a postgres:// URL.
func withDatabase(url, name string) string {
	rest := strings.TrimPrefix(url, "postgres://")
	slash := strings.Index(rest, "/")
	if slash < 0 {
		return "postgres://" + rest + "/" + name
	}
	query := ""
	if q := strings.Index(rest[slash:], "?"); q >= 0 {
		query = rest[slash+q:]
	}
	return "postgres://" + rest[:slash] + "/" + name + query
}
