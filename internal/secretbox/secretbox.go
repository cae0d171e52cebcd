// Package secretbox encrypts the secrets the server must keep but never
// show (scaling-hook secrets), so that a dump of the database alone does not
// reveal them: AES-256-GCM with a server key that lives outside the
// database.
package secretbox

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the server key's length in bytes.
const KeySize = 32

// Box seals and opens secrets with one key.
type Box struct{ aead cipher.AEAD }

// New returns a box for a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("the secret key is %d bytes; accepted: exactly %d (base64 of 32 random bytes)", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plain with a fresh nonce; the nonce leads the result. The
// additional data binds the ciphertext to its owner (a record id), so it
// cannot be moved to another row.
func (b *Box) Seal(plain, owner []byte) ([]byte, error) {
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return b.aead.Seal(nonce, nonce, plain, owner), nil
}

// Open decrypts what Seal returned for the same owner.
func (b *Box) Open(sealed, owner []byte) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n+b.aead.Overhead() {
		return nil, errors.New("secretbox: sealed secret is too short")
	}
	plain, err := b.aead.Open(nil, sealed[:n], sealed[n:], owner)
	if err != nil {
		return nil, errors.New("secretbox: the secret does not open with this server key (was the key changed?)")
	}
	return plain, nil
}

// ParseKey decodes a base64 key.
func ParseKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("the secret key is not base64; accepted: base64 of 32 random bytes (openssl rand -base64 32)")
	}
	if len(k) != KeySize {
		return nil, fmt.Errorf("the secret key is %d bytes; accepted: exactly %d (openssl rand -base64 32)", len(k), KeySize)
	}
	return k, nil
}

// LoadOrCreate reads the base64 key in path, creating the file (mode 0600)
// with a fresh key when it does not exist. It reports whether it created it.
func LoadOrCreate(path string) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, err := ParseKey(string(b))
		if err != nil {
			return nil, false, fmt.Errorf("secret key file %s: %w", path, err)
		}
		return k, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("secret key file: %w", err)
	}
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("secret key file: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n"); err != nil {
		return nil, false, err
	}
	return k, true, f.Sync()
}
