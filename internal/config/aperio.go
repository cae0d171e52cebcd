package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Aperio holds the server-side Aperio settings, named as the Aperio
// reference names them: each APERIO_* variable is also a key of the file,
// lowercased without the prefix (outbound.* nested). The hook loop and the
// edge read them.
type Aperio struct {
	// Scaling honors scaling declarations; off, they are refused with a
	// message saying so.
	Scaling bool
	// ScalingAllowHTTP permits plain-http hook endpoints.
	ScalingAllowHTTP bool
	// ScalingAllowPrivate permits hook endpoints on private, loopback and
	// link-local addresses.
	ScalingAllowPrivate bool
	// OutboundAllowlist: host globs and CIDRs the server may call; empty
	// means no restriction.
	OutboundAllowlist []string
	// OutboundBlockPrivate: with no allowlist, refuse internal destinations.
	OutboundBlockPrivate bool
	// ScalingRecordTTL drops records nothing re-announced for this long.
	ScalingRecordTTL time.Duration
	// EdgeListenAddr is where the edge proxy listens.
	EdgeListenAddr string
	// EventWebhooks receive every event (scaling_*, PoolScaled) as a JSON
	// POST, through the outbound fence.
	EventWebhooks []string
	// ColdStartMaxPending bounds the requests held per hostname.
	ColdStartMaxPending int
	// EdgeMaxConcurrent bounds the requests the edge serves at once (held
	// requests do not count).
	EdgeMaxConcurrent int
}

// DefaultAperio returns the documented defaults.
func DefaultAperio() Aperio {
	return Aperio{ScalingRecordTTL: 30 * 24 * time.Hour, EdgeListenAddr: "127.0.0.1:20980", ColdStartMaxPending: 1000, EdgeMaxConcurrent: 10000, OutboundAllowlist: []string{}, EventWebhooks: []string{}}
}

// aperioKey is one Aperio setting: its file key and variable.
type aperioKey struct{ key, env string }

// AperioKeys lists the Aperio settings in the order --print-config shows them.
var AperioKeys = []aperioKey{
	{"scaling", "APERIO_SCALING"},
	{"scaling_allow_http", "APERIO_SCALING_ALLOW_HTTP"},
	{"scaling_allow_private", "APERIO_SCALING_ALLOW_PRIVATE"},
	{"outbound.allowlist", "APERIO_OUTBOUND_ALLOWLIST"},
	{"outbound.block_private", "APERIO_OUTBOUND_BLOCK_PRIVATE"},
	{"scaling_record_ttl", "APERIO_SCALING_RECORD_TTL"},
	{"edge_listen_addr", "APERIO_EDGE_LISTEN_ADDR"},
	{"event_webhooks", "APERIO_EVENT_WEBHOOKS"},
	{"cold_start_max_pending", "APERIO_COLD_START_MAX_PENDING"},
	{"edge_max_concurrent", "APERIO_EDGE_MAX_CONCURRENT"},
}

// Key and Env name the setting.
func (k aperioKey) Key() string { return k.key }
func (k aperioKey) Env() string { return k.env }

var hostGlob = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$|^\*$`)

// LoadAperio layers the defaults, the APERIO_* variables and the file.
func LoadAperio(f *File, getenv func(string) string) (Aperio, map[string]Source, error) {
	a := DefaultAperio()
	src := map[string]Source{}
	for _, k := range AperioKeys {
		src[k.key] = FromDefault
		var raw, name string
		var list []string
		isList := k.key == "outbound.allowlist" || k.key == "event_webhooks"
		if v := strings.TrimSpace(getenv(k.env)); v != "" {
			raw, name, src[k.key] = v, k.env, FromEnv
			if isList {
				list = splitList(v)
			}
		}
		if isList {
			if l, ok := f.List(k.key); ok {
				list, name, src[k.key] = l, f.Path+": "+k.key, FromFile
			}
		} else {
			v, where, ok, err := f.Scalar(k.key)
			if err != nil {
				return a, nil, err
			}
			if ok {
				raw, name, src[k.key] = strings.TrimSpace(v), where+": "+k.key, FromFile
			}
		}
		if src[k.key] == FromDefault {
			continue
		}
		if err := a.set(k.key, name, raw, list); err != nil {
			return a, nil, err
		}
	}
	return a, src, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func parseFlag(name, raw string) (bool, error) {
	switch strings.ToLower(raw) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%s is %q; accepted: 1 or 0 (true or false)", name, raw)
}

func (a *Aperio) set(key, name, raw string, list []string) error {
	var err error
	switch key {
	case "scaling":
		a.Scaling, err = parseFlag(name, raw)
	case "scaling_allow_http":
		a.ScalingAllowHTTP, err = parseFlag(name, raw)
	case "scaling_allow_private":
		a.ScalingAllowPrivate, err = parseFlag(name, raw)
	case "outbound.block_private":
		a.OutboundBlockPrivate, err = parseFlag(name, raw)
	case "outbound.allowlist":
		for _, e := range list {
			if _, perr := netip.ParsePrefix(e); perr == nil {
				continue
			}
			if len(e) > 253 || !hostGlob.MatchString(e) {
				return fmt.Errorf("%s has %q; accepted: host names, host globs such as *.example.com, and CIDRs such as 10.0.0.0/8", name, clipValue(e))
			}
		}
		a.OutboundAllowlist = list
	case "event_webhooks":
		for _, e := range list {
			u, perr := url.Parse(e)
			if perr != nil || !u.IsAbs() || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
				return fmt.Errorf("%s has %q; accepted: absolute http(s) URLs without credentials", name, clipValue(e))
			}
		}
		a.EventWebhooks = list
	case "scaling_record_ttl":
		secs, perr := strconv.ParseInt(raw, 10, 64)
		if perr != nil || secs < 60 || secs > 10*365*24*3600 {
			return fmt.Errorf("%s is %q; accepted: whole seconds from 60 to 315360000", name, clipValue(raw))
		}
		a.ScalingRecordTTL = time.Duration(secs) * time.Second
	case "edge_listen_addr":
		if _, _, perr := splitHostPort(raw); perr != nil {
			return fmt.Errorf("%s is %q; accepted: host:port such as 127.0.0.1:20980", name, clipValue(raw))
		}
		a.EdgeListenAddr = raw
	case "cold_start_max_pending", "edge_max_concurrent":
		n, perr := strconv.Atoi(raw)
		if perr != nil || n < 1 || n > 1_000_000 {
			return fmt.Errorf("%s is %q; accepted: a whole number from 1 to 1000000", name, clipValue(raw))
		}
		if key == "cold_start_max_pending" {
			a.ColdStartMaxPending = n
		} else {
			a.EdgeMaxConcurrent = n
		}
	}
	return err
}

func splitHostPort(s string) (string, int, error) {
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return "", 0, fmt.Errorf("no port")
	}
	p, err := strconv.Atoi(s[i+1:])
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port")
	}
	return s[:i], p, nil
}

func clipValue(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
