package nodes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/qodaperio/autoscale/internal/pool"
)

// ProcessOptions configure the process backend.
type ProcessOptions struct {
	// Command is run with /bin/sh -c for each node. {role}, {index},
	// {port} and {pool} are replaced (pool names only hold letters,
	// digits, '_', '.' and '-', so they are safe in a shell line); the
	// same facts are in the environment as QOD_NODE_ROLE, QOD_NODE_INDEX,
	// QOD_NODE_PORT, QOD_POOL_ID, QOD_TENANT, QOD_TENANT_DB and QOD_POOL.
	Command string
	// Grace is how long a stopped node has between SIGTERM and SIGKILL.
	Grace time.Duration
	// Stderr receives the nodes' output; nil discards it.
	Stderr *os.File
}

// Process runs every node as a child process of the server, in its own
// process group so that a stop reaches whatever the command started.
type Process struct {
	o     ProcessOptions
	mu    sync.Mutex
	pools map[pool.Key][]*child
	wg    sync.WaitGroup
}

type child struct {
	node     Node
	cmd      *exec.Cmd
	done     chan struct{} // closed when the process has exited
	stopping bool
	exitErr  error
}

// NewProcess returns a process backend; the command must not be empty.
func NewProcess(o ProcessOptions) (*Process, error) {
	if strings.TrimSpace(o.Command) == "" {
		return nil, errors.New("node command is empty; the process backend needs a command template such as 'my-node --port {port}'")
	}
	if o.Grace <= 0 {
		o.Grace = 10 * time.Second
	}
	return &Process{o: o, pools: map[pool.Key][]*child{}}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (p *Process) start(k pool.Key, n Node) (*child, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pick a port for %s %s node %d: %w", k, n.Role, n.Index, err)
	}
	line := strings.NewReplacer("{role}", n.Role, "{index}", strconv.Itoa(n.Index),
		"{port}", strconv.Itoa(port), "{pool}", k.String()).Replace(p.o.Command)
	cmd := exec.Command("/bin/sh", "-c", line)
	cmd.Env = append(os.Environ(),
		"QOD_NODE_ROLE="+n.Role, "QOD_NODE_INDEX="+strconv.Itoa(n.Index), "QOD_NODE_PORT="+strconv.Itoa(port),
		"QOD_POOL_ID="+k.String(), "QOD_TENANT="+k.Tenant, "QOD_TENANT_DB="+k.TenantDB, "QOD_POOL="+k.Pool)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.o.Stderr != nil {
		cmd.Stdout, cmd.Stderr = p.o.Stderr, p.o.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s %s node %d: %w", k, n.Role, n.Index, err)
	}
	n.Port, n.PID, n.Routable, n.State = port, cmd.Process.Pid, true, "running"
	c := &child{node: n, cmd: cmd, done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := cmd.Wait()
		p.mu.Lock()
		c.exitErr = err
		if !c.stopping {
			// A crash: the node stays listed, unroutable, until the
			// pool's next change replaces it.
			c.node.Routable = false
			c.node.State = "exited: " + exitText(err)
		}
		p.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// stop sends SIGTERM to the node's process group, then SIGKILL once the
// grace period has passed; it does not wait.
func (p *Process) stop(c *child) {
	c.stopping = true
	select {
	case <-c.done:
		return // already exited: its group id may belong to someone else now
	default:
	}
	pgid := -c.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTimer(p.o.Grace)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
			_ = syscall.Kill(pgid, syscall.SIGKILL)
		}
	}()
}

// Apply starts missing nodes, replaces exited ones and stops the extra ones
// (highest index first, by the slot order).
func (p *Process) Apply(_ context.Context, k pool.Key, want pool.Roles) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	have := map[[2]any]*child{}
	for _, c := range p.pools[k] {
		have[[2]any{c.node.Role, c.node.Index}] = c
	}
	var next []*child
	var started []*child
	for _, slot := range roleSlots(want) {
		id := [2]any{slot.Role, slot.Index}
		if c, ok := have[id]; ok && c.node.Routable {
			next = append(next, c)
			delete(have, id)
			continue
		}
		c, err := p.start(k, slot)
		if err != nil {
			for _, s := range started {
				p.stop(s)
			}
			return err
		}
		started = append(started, c)
		next = append(next, c)
	}
	for _, c := range have {
		p.stop(c)
	}
	if len(next) == 0 {
		delete(p.pools, k)
	} else {
		p.pools[k] = next
	}
	return nil
}

func (p *Process) UnroutableReaders(k pool.Key) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.pools[k] {
		if isReader(c.node.Role) && !c.node.Routable {
			n++
		}
	}
	return n
}

func (p *Process) Unroutable() map[pool.Key]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[pool.Key]int{}
	for k, cs := range p.pools {
		for _, c := range cs {
			if isReader(c.node.Role) && !c.node.Routable {
				out[k]++
			}
		}
	}
	return out
}

func (p *Process) Nodes(k pool.Key) []Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []Node{}
	for _, c := range p.pools[k] {
		out = append(out, c.node)
	}
	return out
}

// Close stops every node and waits until all have exited (at most the
// grace period, then SIGKILL) or ctx ends.
func (p *Process) Close(ctx context.Context) error {
	p.mu.Lock()
	for k, cs := range p.pools {
		for _, c := range cs {
			if c.node.Routable {
				p.stop(c)
			}
		}
		delete(p.pools, k)
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping nodes: %w", ctx.Err())
	}
}
