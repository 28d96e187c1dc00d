package kindcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Command is one external program to run: the binary, its arguments, and
// where its output goes. It is plain data so a DryRunner can print it.
type Command struct {
	// Path is the binary to run (a path, or a name looked up in $PATH).
	Path string
	Args []string
	// Dir is the working directory; empty means the caller's.
	Dir string
	// Env, when not nil, is added to the caller's environment.
	Env []string
	// LogFile, for long-running processes, receives stdout and stderr.
	// Empty means they are discarded.
	LogFile string
}

// String renders the command as a shell line, quoted so it can be pasted.
func (c Command) String() string {
	var b strings.Builder
	for _, e := range c.Env {
		b.WriteString(shellQuote(e))
		b.WriteByte(' ')
	}
	b.WriteString(shellQuote(c.Path))
	for _, a := range c.Args {
		b.WriteByte(' ')
		b.WriteString(shellQuote(a))
	}
	if c.LogFile != "" {
		b.WriteString(" >")
		b.WriteString(shellQuote(c.LogFile))
		b.WriteString(" 2>&1")
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell when it holds anything but the
// characters that never need quoting.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Process is a started long-running command.
type Process interface {
	// Pid is the operating-system process id (0 in a dry run).
	Pid() int
	// Done is closed once the process has exited and been reaped.
	Done() <-chan struct{}
	// Err is the exit error once Done is closed.
	Err() error
	// Stop asks the process (and its process group) to exit, waits up to
	// grace, then kills it, and returns once it has been reaped.
	Stop(grace time.Duration) error
}

// Runner is the one way this package runs other programs. ExecRunner runs
// them; DryRunner prints them.
type Runner interface {
	// Start starts a long-running process (etcd, kube-apiserver).
	Start(cmd Command) (Process, error)
	// Run runs a command to completion and returns its combined output
	// (kubectl).
	Run(ctx context.Context, cmd Command) ([]byte, error)
}

// ExecRunner runs commands as child processes, each in its own process
// group so Stop reaches anything it forks, and (on Linux) with a parent-death
// signal so that even a test binary killed with SIGKILL leaves no orphan
// API servers behind.
type ExecRunner struct{}

var _ Runner = ExecRunner{}

// Start implements Runner.
func (ExecRunner) Start(c Command) (Process, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	if c.Env != nil {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	var logf *os.File
	if c.LogFile != "" {
		f, err := os.OpenFile(c.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, err
		}
		logf = f
		cmd.Stdout, cmd.Stderr = f, f
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		if logf != nil {
			logf.Close()
		}
		return nil, fmt.Errorf("start %s: %w", c.Path, err)
	}
	p := &execProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Run implements Runner.
func (ExecRunner) Run(ctx context.Context, c Command) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Dir = c.Dir
	if c.Env != nil {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = sysProcAttr()
	err := cmd.Run()
	return out.Bytes(), err
}

type execProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // written before done is closed
}

func (p *execProcess) Pid() int              { return p.cmd.Process.Pid }
func (p *execProcess) Done() <-chan struct{} { return p.done }

func (p *execProcess) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

func (p *execProcess) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	// SIGTERM lets kube-apiserver and etcd shut down cleanly (etcd flushes
	// its WAL); the whole group gets it in case either ever forks.
	_ = signalGroup(p.cmd.Process, false)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := signalGroup(p.cmd.Process, true); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("process %d did not exit after SIGKILL", p.Pid())
	}
}

// DryRunner prints each command instead of running it, and remembers them,
// so `qm cluster up --dry-run` and golden tests show exactly what a real run
// would execute.
type DryRunner struct {
	// Out receives one line per command (may be nil).
	Out io.Writer

	mu       sync.Mutex
	commands []Command
}

var _ Runner = (*DryRunner)(nil)

// Commands returns the commands recorded so far.
func (d *DryRunner) Commands() []Command {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Command(nil), d.commands...)
}

// Notef prints a comment line, for the steps that are not commands (waiting
// for readiness, installing CRDs) so the dry run still tells the whole story.
func (d *DryRunner) Notef(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Out != nil {
		fmt.Fprintf(d.Out, "# "+format+"\n", args...)
	}
}

// Start implements Runner: it records the command and returns a process
// that runs until stopped.
func (d *DryRunner) Start(c Command) (Process, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.commands = append(d.commands, c)
	if d.Out != nil {
		fmt.Fprintf(d.Out, "%s &\n", c)
	}
	return &dryProcess{runner: d, name: c.Path, done: make(chan struct{})}, nil
}

// Run implements Runner: it records the command and returns no output.
func (d *DryRunner) Run(_ context.Context, c Command) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.commands = append(d.commands, c)
	if d.Out != nil {
		fmt.Fprintf(d.Out, "%s\n", c)
	}
	return nil, nil
}

type dryProcess struct {
	runner *DryRunner
	name   string
	once   sync.Once
	done   chan struct{}
}

func (p *dryProcess) Pid() int              { return 0 }
func (p *dryProcess) Done() <-chan struct{} { return p.done }
func (p *dryProcess) Err() error            { return nil }

func (p *dryProcess) Stop(time.Duration) error {
	p.once.Do(func() {
		p.runner.Notef("stop %s (SIGTERM to its process group, SIGKILL after the grace period)", p.name)
		close(p.done)
	})
	return nil
}
