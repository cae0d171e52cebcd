// Package nodes runs a pool's nodes. The server tells a Backend the role
// distribution each pool should have after every change, and asks it which
// read-capable nodes are not routable (the sweep's capacity leaves them out).
//
// Two backends ship: Memory, where the desired distribution is the truth and
// nodes are marked unroutable by hand (tests, drills, and a control plane
// whose nodes run elsewhere), and Process, where every node is a child
// process of the server.
package nodes

import (
	"context"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/pool"
)

// Role names, as in a pool's role distribution.
const (
	Writeonly = "writeonly"
	Readonly  = "readonly"
	Dual      = "dual"
)

// Node is one node of a pool.
type Node struct {
	Role     string `json:"role"`
	Index    int    `json:"index"`
	Routable bool   `json:"routable"`
	// State says why a node is not routable ("marked unroutable", "exited:
	// exit status 1"), or "running".
	State string `json:"state"`
	Port  int    `json:"port,omitempty"`
	PID   int    `json:"pid,omitempty"`
}

// Backend runs nodes.
type Backend interface {
	// Apply makes pool k run want (all zero: no node, as when suspended
	// or deleted). It is called inside the mutation gate: an error refuses
	// the change.
	Apply(ctx context.Context, k pool.Key, want pool.Roles) error
	// UnroutableReaders counts k's readonly and dual nodes that are not
	// routable.
	UnroutableReaders(k pool.Key) int
	// Unroutable is the same for every pool at once, listing only pools
	// that have an unroutable reader: a sweep asks once, not per pool.
	Unroutable() map[pool.Key]int
	// Nodes lists k's nodes by role and index.
	Nodes(k pool.Key) []Node
	// Close stops every node.
	Close(ctx context.Context) error
}

// Marker is a backend whose nodes can be marked unroutable through the API.
type Marker interface {
	SetRoutable(k pool.Key, role string, index int, routable bool) error
}

// roleSlots lists a distribution's nodes as (role, index) in a stable order.
func roleSlots(r pool.Roles) []Node {
	var out []Node
	for _, rc := range []struct {
		role string
		n    int
	}{{Writeonly, r.Writeonly}, {Readonly, r.Readonly}, {Dual, r.Dual}} {
		for i := range rc.n {
			out = append(out, Node{Role: rc.role, Index: i})
		}
	}
	return out
}

func isReader(role string) bool { return role == Readonly || role == Dual }

func checkRole(role string) error {
	switch role {
	case Writeonly, Readonly, Dual:
		return nil
	}
	return api.Errorf(api.CodeInvalidRequest, "role %q is not a role; accepted: writeonly, readonly, dual", role)
}

func noNode(k pool.Key, role string, index int) error {
	return api.Errorf(api.CodeNotFound, "pool %s has no %s node %d", k, role, index)
}
