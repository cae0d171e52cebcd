package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClientPrintConfigLayersFileAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "aperio.yaml")
	os.WriteFile(file, []byte("server:\n  token: ${TOK}\nservices:\n  - hostname: app.localhost\n    target: http://127.0.0.1:3000\nscaling:\n  url: https://scale.example.com/hook\n  max: 4\nmax_concurrent: 8\n"), 0o600)
	t.Setenv("TOK", "secret-token")
	t.Setenv("APERIO_SCALING_MAX", "6")
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"client", "--config", file, "--print-config"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scaling.max                  6", "env", "max_concurrent               8", "server.token                 (set)", "services[0].hostname         app.localhost"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("missing %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "secret-token") {
		t.Fatal("the token was printed")
	}
}

func TestClientRefusesBadSettings(t *testing.T) {
	t.Setenv("APERIO_SERVER_TOKEN", "k")
	t.Setenv("APERIO_HOSTNAME", "app.localhost")
	t.Setenv("APERIO_TARGET", "http://127.0.0.1:3000")
	t.Setenv("APERIO_IDLE_TIMEOUT", "soon")
	cmd := newRootCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"client"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), `APERIO_IDLE_TIMEOUT: "soon" is not accepted; accepted: a duration`) {
		t.Fatalf("got %v", err)
	}
}
