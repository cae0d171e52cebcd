package secretbox

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	key := bytes.Repeat([]byte{7}, KeySize)
	b, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := b.Seal([]byte("s3cret"), []byte("sh_1"))
	s2, _ := b.Seal([]byte("s3cret"), []byte("sh_1"))
	if bytes.Equal(s1, s2) || bytes.Contains(s1, []byte("s3cret")) {
		t.Fatal("sealing is not randomized, or leaks the secret")
	}
	if p, err := b.Open(s1, []byte("sh_1")); err != nil || string(p) != "s3cret" {
		t.Fatalf("open: %q %v", p, err)
	}
	if _, err := b.Open(s1, []byte("sh_2")); err == nil {
		t.Fatal("a secret moved to another record opened")
	}
	other, _ := New(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.Open(s1, []byte("sh_1")); err == nil || !strings.Contains(err.Error(), "was the key changed") {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := b.Open([]byte{1, 2}, nil); err == nil {
		t.Fatal("a truncated secret opened")
	}
	if _, err := New([]byte("short")); err == nil {
		t.Fatal("a short key was accepted")
	}
}

func TestLoadOrCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "server.key")
	k1, created, err := LoadOrCreate(path)
	if err != nil || !created || len(k1) != KeySize {
		t.Fatalf("create: %v %v", created, err)
	}
	info, _ := os.Stat(path)
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", info.Mode().Perm())
	}
	k2, created, err := LoadOrCreate(path)
	if err != nil || created || !bytes.Equal(k1, k2) {
		t.Fatalf("reload: %v %v", created, err)
	}
	os.WriteFile(path, []byte("not base64!"), 0o600)
	if _, _, err := LoadOrCreate(path); err == nil || !strings.Contains(err.Error(), "not base64") {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := ParseKey("c2hvcnQ="); err == nil || !strings.Contains(err.Error(), "5 bytes") {
		t.Fatalf("short key: %v", err)
	}
}
