package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Nodes selects and configures the node backend.
type Nodes struct {
	// Backend is "memory" (the default) or "process".
	Backend string
	// Command is the process backend's command template.
	Command string
	// StopGrace is how long a stopping node has between SIGTERM and SIGKILL.
	StopGrace time.Duration
}

// NodesPrefix is where the node settings sit in the YAML file.
const NodesPrefix = "quack-on-demand.nodes."

// LoadNodes layers defaults, QOD_NODE_* variables and the file.
func LoadNodes(f *File, getenv func(string) string) (Nodes, map[string]Source, error) {
	n := Nodes{Backend: "memory", StopGrace: 10 * time.Second}
	src := map[string]Source{"backend": FromDefault, "command": FromDefault, "stopGraceSec": FromDefault}
	pick := func(key, env string) (string, string, error) {
		v, name := "", ""
		if raw := strings.TrimSpace(getenv(env)); raw != "" {
			v, name, src[key] = raw, env, FromEnv
		}
		raw, where, ok, err := f.Scalar(NodesPrefix + key)
		if err != nil {
			return "", "", err
		}
		if ok {
			v, name, src[key] = strings.TrimSpace(raw), where+": "+NodesPrefix+key, FromFile
		}
		return v, name, nil
	}
	v, name, err := pick("backend", "QOD_NODE_BACKEND")
	if err != nil {
		return n, nil, err
	}
	if v != "" {
		if v != "memory" && v != "process" {
			return n, nil, fmt.Errorf("%s is %q; accepted: memory or process", name, v)
		}
		n.Backend = v
	}
	if n.Command, _, err = pick("command", "QOD_NODE_COMMAND"); err != nil {
		return n, nil, err
	}
	v, name, err = pick("stopGraceSec", "QOD_NODE_STOP_GRACE_SEC")
	if err != nil {
		return n, nil, err
	}
	if v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs < 1 || secs > 3600 {
			return n, nil, fmt.Errorf("%s is %q; accepted: a whole number of seconds from 1 to 3600", name, v)
		}
		n.StopGrace = time.Duration(secs) * time.Second
	}
	if n.Backend == "process" && n.Command == "" {
		return n, nil, fmt.Errorf("%scommand (QOD_NODE_COMMAND) is required with the process backend; accepted: a shell command line such as 'my-node --port {port}'", NodesPrefix)
	}
	return n, src, nil
}
