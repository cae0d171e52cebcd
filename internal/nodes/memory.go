package nodes

import (
	"context"
	"sync"

	"github.com/qodaperio/autoscale/internal/pool"
)

// Memory is the default backend: a pool's nodes are exactly its desired
// distribution, all routable unless marked otherwise.
type Memory struct {
	mu    sync.Mutex
	pools map[pool.Key][]Node
}

// NewMemory returns an empty memory backend.
func NewMemory() *Memory { return &Memory{pools: map[pool.Key][]Node{}} }

var _ Marker = (*Memory)(nil)

// Apply keeps the marks of nodes that stay and adds routable ones.
func (m *Memory) Apply(_ context.Context, k pool.Key, want pool.Roles) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if want.Total() == 0 {
		delete(m.pools, k)
		return nil
	}
	old := map[[2]any]Node{}
	for _, n := range m.pools[k] {
		old[[2]any{n.Role, n.Index}] = n
	}
	next := roleSlots(want)
	for i, n := range next {
		if o, ok := old[[2]any{n.Role, n.Index}]; ok {
			next[i] = o
		} else {
			next[i].Routable, next[i].State = true, "running"
		}
	}
	m.pools[k] = next
	return nil
}

func (m *Memory) UnroutableReaders(k pool.Key) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, node := range m.pools[k] {
		if isReader(node.Role) && !node.Routable {
			n++
		}
	}
	return n
}

func (m *Memory) Unroutable() map[pool.Key]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[pool.Key]int{}
	for k, ns := range m.pools {
		for _, n := range ns {
			if isReader(n.Role) && !n.Routable {
				out[k]++
			}
		}
	}
	return out
}

func (m *Memory) Nodes(k pool.Key) []Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Node{}, m.pools[k]...)
}

// SetRoutable marks one node routable or not.
func (m *Memory) SetRoutable(k pool.Key, role string, index int, routable bool) error {
	if err := checkRole(role); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, n := range m.pools[k] {
		if n.Role == role && n.Index == index {
			m.pools[k][i].Routable = routable
			m.pools[k][i].State = "running"
			if !routable {
				m.pools[k][i].State = "marked unroutable"
			}
			return nil
		}
	}
	return noNode(k, role, index)
}

func (m *Memory) Close(context.Context) error { return nil }
