package apiserver

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/store"
)

// Key kinds.
const (
	KindAdmin  = "admin"
	KindClient = "client"
)

type scope int

const (
	anyKey      scope = iota // any valid key
	adminKey                 // an admin key: the operator's or an org's
	operatorKey              // the operator scope only
	noKey                    // open (health checks)
)

// principal is the authenticated caller.
type principal struct {
	KeyID string
	Name  string
	Org   string // "" for the operator scope
	Kind  string
	// AllowedIPs are the key's allowed_ips; for a client key they also
	// bound who may visit the hostnames its clients serve.
	AllowedIPs []netip.Prefix
}

func (p principal) operator() bool { return p.Org == "" }

// actor is how the caller is named in the audit log.
func (p principal) actor() string { return "key:" + p.Name }

type principalKey struct{}

func caller(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// HashKey is how key secrets are stored: a SHA-256 of the secret. Secrets are
// 32 random bytes, so a fast hash is enough; nothing reversible is kept.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewKeySecret returns a fresh random key secret and a short id for it.
func NewKeySecret() (id, secret string) {
	var idb [6]byte
	var sb [32]byte
	_, _ = rand.Read(idb[:])
	_, _ = rand.Read(sb[:])
	return hex.EncodeToString(idb[:]), "qod_" + hex.EncodeToString(sb[:])
}

func presentedKey(r *http.Request) string {
	if k := r.Header.Get("X-API-Key"); k != "" {
		return strings.TrimSpace(k)
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, rest, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// authenticate checks the caller's key against the scope the route needs and
// puts the principal into the request's context.
func (s *Server) authenticate(r *http.Request, need scope) error {
	if need == noKey {
		return nil
	}
	secret := presentedKey(r)
	if secret == "" {
		return api.Errorf(api.CodeUnauthorized, "no API key: send it as X-API-Key: <key> or Authorization: Bearer <key>")
	}
	k, err := s.store.KeyByHash(r.Context(), HashKey(secret))
	if errors.Is(err, store.ErrNotFound) {
		return api.Errorf(api.CodeUnauthorized, "the API key is not valid")
	}
	if err != nil {
		return err
	}
	now := s.now()
	if k.RevokedAt != nil {
		return api.Errorf(api.CodeUnauthorized, "the API key %s was revoked", k.ID)
	}
	if k.ExpiresAt != nil && !now.Before(*k.ExpiresAt) {
		return api.Errorf(api.CodeUnauthorized, "the API key %s expired at %s", k.ID, k.ExpiresAt.Format(time.RFC3339))
	}
	if len(k.AllowedIPs) > 0 && !ipAllowed(r.RemoteAddr, k.AllowedIPs) {
		return api.Errorf(api.CodeForbidden, "the API key %s may not be used from this address", k.ID)
	}
	p := principal{KeyID: k.ID, Name: k.Name, Org: k.Org, Kind: k.Kind, AllowedIPs: prefixes(k.AllowedIPs)}
	switch {
	case need == operatorKey && !p.operator():
		return api.Errorf(api.CodeForbidden, "this call needs the operator key; key %s is scoped to org %q", k.ID, k.Org)
	case need == adminKey && p.Kind != KindAdmin:
		return api.Errorf(api.CodeForbidden, "this call needs an admin key; key %s is a %s key", k.ID, k.Kind)
	}
	*r = *r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
	return nil
}

// prefixes parses stored CIDRs (they were checked when the key was made).
func prefixes(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		if pfx, err := netip.ParsePrefix(c); err == nil {
			out = append(out, pfx.Masked())
		}
	}
	return out
}

func ipAllowed(remoteAddr string, cidrs []string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, c := range cidrs {
		if pfx, err := netip.ParsePrefix(c); err == nil && pfx.Contains(addr) {
			return true
		}
	}
	return false
}

// mayManageTenant refuses a caller scoped to another org. It is decided before
// any lookup, so it says nothing about whether the pool exists.
func mayManageTenant(p principal, tenant string) error {
	if p.operator() || p.Org == tenant {
		return nil
	}
	return api.Errorf(api.CodeForbidden, "key %s is scoped to org %q and may not touch tenant %q", p.KeyID, p.Org, tenant)
}

// EnsureOperatorKey creates the operator key when the store has no key at all:
// from presetSecret when given, else a fresh random one. It returns the secret
// it created ("" when keys already existed) so the caller can print it once.
func EnsureOperatorKey(ctx context.Context, st store.Store, presetSecret string, now time.Time) (string, error) {
	n, err := st.CountKeys(ctx)
	if err != nil {
		return "", fmt.Errorf("count keys: %w", err)
	}
	if n > 0 {
		return "", nil
	}
	id, secret := NewKeySecret()
	if presetSecret != "" {
		if len(presetSecret) < 16 {
			return "", fmt.Errorf("QOD_API_KEY is %d characters long; accepted: at least 16", len(presetSecret))
		}
		secret = presetSecret
	}
	err = st.CreateKey(ctx, &store.Key{ID: id, Name: "operator", Hash: HashKey(secret), Kind: KindAdmin, CreatedAt: now})
	if errors.Is(err, store.ErrConflict) && presetSecret != "" {
		return "", nil // another replica starting beside this one created the same key
	}
	if err != nil {
		return "", fmt.Errorf("create operator key: %w", err)
	}
	return secret, nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	var req api.CreateKeyRequest
	if err := decodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Org != "" {
		if err := pool.ValidateName("org", req.Org); err != nil {
			return err
		}
	}
	switch req.Kind {
	case "":
		req.Kind = KindAdmin
	case KindAdmin, KindClient:
	default:
		return invalidRequest("kind %q is not a key kind; accepted: admin, client", clip(req.Kind))
	}
	if req.Org == "" && req.Kind != KindAdmin {
		return invalidRequest("an operator-scope key (no org) must be of kind admin")
	}
	if req.Name == "" {
		return invalidRequest("name is required: a label for the key, shown in the audit log")
	}
	if err := pool.ValidateName("name", req.Name); err != nil {
		return err
	}
	if len(req.AllowedIPs) > 64 {
		return invalidRequest("allowedIps has %d entries; accepted: at most 64", len(req.AllowedIPs))
	}
	for i, c := range req.AllowedIPs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return invalidRequest("allowedIps[%d] %q is not a CIDR; accepted: e.g. 10.0.0.0/8 or 2001:db8::/32", i, clip(c))
		}
	}
	now := s.now()
	if req.ExpiresAt != nil && !req.ExpiresAt.After(now) {
		return invalidRequest("expiresAt %s is not in the future", req.ExpiresAt.Format(time.RFC3339))
	}
	id, secret := NewKeySecret()
	k := &store.Key{ID: id, Name: req.Name, Hash: HashKey(secret), Org: req.Org, Kind: req.Kind,
		ExpiresAt: req.ExpiresAt, AllowedIPs: req.AllowedIPs, CreatedAt: now}
	if err := s.store.CreateKey(r.Context(), k); err != nil {
		return err
	}
	out := keyView(k)
	out.Secret = secret
	return writeJSON(w, http.StatusCreated, out)
}

func keyView(k *store.Key) api.Key {
	ips := k.AllowedIPs
	if ips == nil {
		ips = []string{}
	}
	return api.Key{ID: k.ID, Name: k.Name, Org: k.Org, Kind: k.Kind, ExpiresAt: k.ExpiresAt, AllowedIPs: ips, CreatedAt: k.CreatedAt}
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	if _, err := queryParams(r.URL.Query()); err != nil {
		return err
	}
	keys, err := s.store.ListKeys(r.Context())
	if err != nil {
		return err
	}
	out := make([]api.Key, 0, len(keys))
	for i := range keys {
		out = append(out, keyView(&keys[i]))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"keys": out})
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	id := muxVar(r, "id")
	if id == caller(r).KeyID {
		return api.Errorf(api.CodeConflict, "key %s is the one making this call; revoke it with another operator key", id)
	}
	err := s.store.RevokeKey(r.Context(), id, s.now())
	if errors.Is(err, store.ErrNotFound) {
		return notFound("key %q not found", clip(id))
	}
	if err != nil {
		return err
	}
	// A scaling record goes with the last key that armed it.
	s.pruneScaling(r.Context(), s.now())
	w.WriteHeader(http.StatusNoContent)
	return nil
}
