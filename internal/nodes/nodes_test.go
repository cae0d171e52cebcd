package nodes

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/pool"
)

var bi = pool.Key{Tenant: "acme", TenantDB: "acme_sales", Pool: "bi"}

func TestMemoryKeepsMarksOfNodesThatStay(t *testing.T) {
	m := NewMemory()
	ctx := context.Background()
	if err := m.Apply(ctx, bi, pool.Roles{Writeonly: 1, Readonly: 2, Dual: 1}); err != nil {
		t.Fatal(err)
	}
	if err := m.SetRoutable(bi, Readonly, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := m.SetRoutable(bi, Writeonly, 0, false); err != nil {
		t.Fatal(err)
	}
	if got := m.UnroutableReaders(bi); got != 1 || m.Unroutable()[bi] != 1 || len(m.Unroutable()) != 1 {
		t.Fatalf("unroutable readers %d (%v), want 1 (a writer carries no read capacity)", got, m.Unroutable())
	}
	// Growing keeps the mark; shrinking past the marked node drops it.
	m.Apply(ctx, bi, pool.Roles{Writeonly: 1, Readonly: 3, Dual: 1})
	if got := m.UnroutableReaders(bi); got != 1 || len(m.Nodes(bi)) != 5 {
		t.Fatalf("after growing: %d unroutable, %v", got, m.Nodes(bi))
	}
	m.Apply(ctx, bi, pool.Roles{Writeonly: 1, Readonly: 1, Dual: 1})
	if got := m.UnroutableReaders(bi); got != 0 {
		t.Fatalf("after shrinking: %d unroutable", got)
	}
	if err := m.SetRoutable(bi, Readonly, 7, false); err == nil || !strings.Contains(err.Error(), "no readonly node 7") {
		t.Fatalf("missing node: %v", err)
	}
	if err := m.SetRoutable(bi, "reader", 0, false); err == nil || !strings.Contains(err.Error(), "accepted: writeonly, readonly, dual") {
		t.Fatalf("bad role: %v", err)
	}
	m.Apply(ctx, bi, pool.Roles{})
	if len(m.Nodes(bi)) != 0 {
		t.Fatal("suspended pool still has nodes")
	}
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func waitExit(t *testing.T, p *Process, k pool.Key, role string, index int) {
	t.Helper()
	p.mu.Lock()
	var c *child
	for _, x := range p.pools[k] {
		if x.node.Role == role && x.node.Index == index {
			c = x
		}
	}
	p.mu.Unlock()
	if c == nil {
		t.Fatalf("no %s node %d", role, index)
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s node %d did not exit", role, index)
	}
}

func TestProcessBackendRunsStopsAndReportsCrashes(t *testing.T) {
	dir := t.TempDir()
	// Each node writes what it was told, then waits; readonly node 1 exits
	// by itself at once the first time (a crash); dual nodes ignore SIGTERM.
	cmd := `if [ {role} = dual ]; then trap '' TERM; fi
echo "$QOD_POOL_ID $QOD_NODE_ROLE $QOD_NODE_INDEX $QOD_NODE_PORT {port}" > ` + dir + `/{role}-{index}
if [ {role}{index} = readonly1 ] && [ ! -e ` + dir + `/crashed ]; then touch ` + dir + `/crashed; exit 3; fi
while :; do sleep 1; done`
	p, err := NewProcess(ProcessOptions{Command: cmd, Grace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer p.Close(ctx)
	if err := p.Apply(ctx, bi, pool.Roles{Writeonly: 1, Readonly: 2, Dual: 1}); err != nil {
		t.Fatal(err)
	}
	nodes := p.Nodes(bi)
	if len(nodes) != 4 {
		t.Fatalf("nodes %v", nodes)
	}
	waitExit(t, p, bi, Readonly, 1)
	if got := p.UnroutableReaders(bi); got != 1 || p.Unroutable()[bi] != 1 {
		t.Fatalf("a crashed reader: %d unroutable, want 1; nodes %v", got, p.Nodes(bi))
	}
	for _, n := range p.Nodes(bi) {
		if n.Role == Readonly && n.Index == 1 && (n.Routable || !strings.Contains(n.State, "exit status 3")) {
			t.Fatalf("crashed node reads %+v", n)
		}
	}
	waitFile(t, filepath.Join(dir, "writeonly-0"))
	b, err := os.ReadFile(filepath.Join(dir, "writeonly-0"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 5 || f[0] != "acme/acme_sales/bi" || f[1] != "writeonly" || f[2] != "0" || f[3] != f[4] || f[3] == "0" {
		t.Fatalf("node environment %q", b)
	}

	// The dual node ignores SIGTERM once it has written its file.
	waitFile(t, filepath.Join(dir, "dual-0"))
	// The next change replaces the crashed node and stops the dual one,
	// which ignores SIGTERM and so is killed after the grace period.
	var dual Node
	for _, n := range nodes {
		if n.Role == Dual {
			dual = n
		}
	}
	p.mu.Lock()
	dualChild := p.pools[bi][3]
	p.mu.Unlock()
	if err := p.Apply(ctx, bi, pool.Roles{Writeonly: 1, Readonly: 2}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dualChild.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a node ignoring SIGTERM was never killed")
	}
	if alive(dual.PID) {
		t.Fatal("dual node still alive")
	}
	if !strings.Contains(dualChild.exitErr.Error(), "killed") {
		t.Fatalf("dual node ended with %v, want killed", dualChild.exitErr)
	}
	if got := p.UnroutableReaders(bi); got != 0 || len(p.Nodes(bi)) != 3 {
		t.Fatalf("after the change: %d unroutable, %v", got, p.Nodes(bi))
	}

	// Close stops everything and waits.
	pids := []int{}
	for _, n := range p.Nodes(bi) {
		pids = append(pids, n.PID)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Fatalf("pid %d alive after Close", pid)
		}
	}
}

func TestProcessBackendNeedsACommand(t *testing.T) {
	if _, err := NewProcess(ProcessOptions{Command: "  "}); err == nil || !strings.Contains(err.Error(), "command template") {
		t.Fatalf("empty command: %v", err)
	}
}

// waitFile waits for a child process to have written path: the children run
// on their own, so this polls, with a deadline.
func waitFile(t *testing.T, path string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s was never written", path)
		}
	}
}
