package targets

// Private broker instances: how nothing of them outlives durachk.
//
// A private instance is a broker server that durachk starts for a run that
// kills its broker (durability.ack); helper h7's clusters start several per
// run, one PrivateProcess per node. Every PrivateProcess is held by four
// mechanisms (internal/reaper has the details):
//
//   - It is the real server binary started as a direct child of durachk, never
//     through a wrapper script that forks it (postgres, not pg_ctl;
//     redis-server; RabbitMQ's start script in its exec mode, so that the child
//     becomes beam.smp), in a process group of its own, with a parent-death
//     signal: if durachk dies, the kernel SIGKILLs the server, and its helpers
//     (backends, erl_child_setup, inet_gethost) exit with it. durachk waits on
//     it, so no zombie is left.
//   - With RunID set, it runs in a cgroup v2 of its own, durachk-<RunID>/<Name>
//     (created with CLONE_INTO_CGROUP, so that not even its first fork
//     escapes), where the machine allows: Kill then ends every process of the
//     instance through cgroup.kill, also those that left its process group.
//   - The watchdog (`durachk watchdog`, started by the runner) is told the
//     process group and cgroup; when durachk dies it kills them and removes the
//     run directory.
//   - `durachk cleanup` finds what is left by the run directory (reaper.Sweep)
//     and never touches a run whose directory lock or store lock is held.
//
// Private instances listen on 127.0.0.1 only (every port: AMQP, Erlang
// distribution, epmd, Postgres, Redis), keep their data in the run directory,
// and have a password (Redis requirepass, RabbitMQ default user, Postgres
// SCRAM, NATS user) and, for RabbitMQ, an Erlang cookie of their own, random
// per run (Secret). So do the nodes of a private cluster (cluster.go), on
// their 127.0.B.x addresses: no node, Sentinel, management API or
// replication link takes a connection without the run's credentials.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/durachk/durachk/internal/ports"
	"github.com/durachk/durachk/internal/reaper"
)

// PrivateProcess is a broker server started by the harness as a direct child
// (see above). Not safe for concurrent use.
type PrivateProcess struct {
	// Command builds the server's command line (called for every start). Its
	// Dir should be the instance's directory: cleanup finds orphans by it.
	Command func() *exec.Cmd
	// Addr is the host:port it listens on.
	Addr string
	// User, if set and durachk runs as root, is the account the server runs as
	// (Postgres refuses to run as root).
	User string
	// Ready, if set, is called after the port accepts connections and must return
	// nil once the server serves requests.
	Ready func(ctx context.Context) error
	// RunID and Name place the process in the cgroup durachk-<RunID>/<Name>
	// (Name defaults to the port). Without RunID: no cgroup.
	RunID, Name string
	// Logs are the log files (globs) the server writes: when it does not
	// start, the end of each goes into the error (a StartError) with the end
	// of its output, Secret (if set) scrubbed from them.
	Logs    []string
	Secret  string
	out     *ringBuffer // the last of its stdout and stderr (where Command sets none)
	cmd     *exec.Cmd
	done    chan error
	started bool
	cgroup  string // "" : none
	pgid    int
	paused  bool
}

// Credential returns the SysProcAttr credential for name when running as root.
func Credential(name string) (*syscall.Credential, error) {
	if name == "" || os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("private instance: user %s: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (p *PrivateProcess) name() string {
	if p.Name != "" {
		return p.Name
	}
	_, port, _ := net.SplitHostPort(p.Addr)
	return "port-" + port
}

// Pid is the server's process id while it runs, else 0.
func (p *PrivateProcess) Pid() int {
	if !p.started {
		return 0
	}
	return p.cmd.Process.Pid
}

// start starts the server in the process's cgroup when there is one.
func (p *PrivateProcess) start(cred *syscall.Credential) (*exec.Cmd, error) {
	attr := func() *syscall.SysProcAttr {
		return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	}
	if p.RunID != "" && p.cgroup == "" {
		if cg, err := reaper.NewCgroup(p.RunID, p.name()); err == nil {
			p.cgroup = cg
			reaper.Watch(reaper.KindCgroup, cg)
		}
	}
	p.out = &ringBuffer{}
	command := func() (*exec.Cmd, func(), error) {
		cmd := p.Command()
		cmd.SysProcAttr = attr()
		started, err := capture(cmd, p.out)
		return cmd, started, err
	}
	if p.cgroup != "" {
		if f, err := reaper.OpenCgroup(p.cgroup); err == nil {
			cmd, started, err := command()
			if err != nil {
				f.Close()
				return nil, err
			}
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
			err = cmd.Start()
			f.Close()
			started()
			if err == nil {
				return cmd, nil
			}
		}
	}
	// No cgroup, or no clone3 here: start it, then move it (its first forks
	// may escape the cgroup; the process group and the watchdog still hold them).
	cmd, started, err := command()
	if err != nil {
		return nil, err
	}
	err = cmd.Start()
	started()
	if err != nil {
		return nil, err
	}
	if p.cgroup != "" {
		_ = reaper.AddProcess(p.cgroup, cmd.Process.Pid)
	}
	return cmd, nil
}

// Start starts the server and waits until it accepts connections.
func (p *PrivateProcess) Start(ctx context.Context) error {
	cred, err := Credential(p.User)
	if err != nil {
		return err
	}
	cmd, err := p.start(cred)
	if err != nil {
		return fmt.Errorf("private instance: %w", err)
	}
	p.cmd = cmd
	p.done, p.started, p.pgid, p.paused = make(chan error, 1), true, cmd.Process.Pid, false
	reaper.Watch(reaper.KindPgid, strconv.Itoa(p.pgid))
	go func() { p.done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-p.done:
			p.started = false
			p.forgetGroup()
			return p.startError(fmt.Errorf("private instance exited while starting: %v", err))
		default:
		}
		var notReady error
		if c, err := net.DialTimeout("tcp", p.Addr, 200*time.Millisecond); err == nil {
			c.Close()
			if p.Ready == nil {
				return nil
			}
			// Ready may not heed ctx (an AMQP handshake): a SIGINT does not wait for it.
			ready := make(chan error, 1)
			go func() { ready <- p.Ready(ctx) }()
			select {
			case notReady = <-ready:
			case <-ctx.Done():
				p.Kill()
				return ctx.Err()
			}
			if notReady == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			p.Kill()
			err := fmt.Errorf("private instance on %s did not come up within 60 s", p.Addr)
			if notReady != nil {
				err = fmt.Errorf("%w (it accepts connections: %v)", err, notReady)
			}
			return p.startError(err)
		}
		select {
		case <-ctx.Done():
			p.Kill()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *PrivateProcess) forgetGroup() {
	// Wait until the group is empty: children of the group that outlive the
	// leader are gone too, and the kernel has released the port.
	for i := 0; i < 250 && syscall.Kill(-p.pgid, 0) == nil; i++ {
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		time.Sleep(20 * time.Millisecond)
	}
	reaper.Forget(reaper.KindPgid, strconv.Itoa(p.pgid))
}

// Kill SIGKILLs the server's cgroup and process group, as a crash would, and
// waits until every process of it is gone.
func (p *PrivateProcess) Kill() error {
	if !p.started {
		return nil
	}
	var errs []error
	if p.cgroup != "" {
		errs = append(errs, reaper.KillCgroup(p.cgroup, 10*time.Second))
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return errors.New("private instance did not exit after SIGKILL")
	}
	p.started, p.paused = false, false
	p.forgetGroup()
	// The next start gets a fresh cgroup: Linux 6.x SIGKILLs a process cloned
	// into a cgroup that cgroup.kill was ever written to (its kill sequence
	// number is compared with the parent's), and a frozen one would stay frozen.
	return errors.Join(append(errs, p.removeCgroup())...)
}

func (p *PrivateProcess) removeCgroup() error {
	if p.cgroup == "" {
		return nil
	}
	err := reaper.RemoveCgroup(p.cgroup)
	reaper.Forget(reaper.KindCgroup, p.cgroup)
	// The run's cgroup goes too once it is empty (used without a runner); with
	// other nodes or the workers in it, rmdir fails and it stays.
	_ = syscall.Rmdir(filepath.Dir(p.cgroup))
	p.cgroup = ""
	return err
}

// Close kills the server and removes its cgroup. Idempotent.
func (p *PrivateProcess) Close() error {
	return errors.Join(p.Kill(), p.removeCgroup())
}

// Pause stops every process of the server (cgroup.freeze, else SIGSTOP of its
// process group): it keeps its connections and answers nothing.
func (p *PrivateProcess) Pause() error {
	if !p.started {
		return errors.New("private instance is not running")
	}
	p.paused = true
	if p.cgroup != "" {
		return reaper.Freeze(p.cgroup, true)
	}
	return syscall.Kill(-p.pgid, syscall.SIGSTOP)
}

// Resume ends a Pause.
func (p *PrivateProcess) Resume() error {
	if !p.started || !p.paused {
		return nil
	}
	p.paused = false
	if p.cgroup != "" {
		return reaper.Freeze(p.cgroup, false)
	}
	return syscall.Kill(-p.pgid, syscall.SIGCONT)
}

// FreePort returns a free TCP port on 127.0.0.1 (and every other address:
// ports.Free).
func FreePort() (int, error) { return ports.Free("127.0.0.1") }

// Secret returns a fresh random password of n bytes, hex-encoded: letters and
// digits only, safe in a URL and a config file. Every credential of a private
// broker or cluster (passwords, Erlang cookies) comes from here.
func Secret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	s := hex.EncodeToString(b)
	secretsSeen.Lock()
	for _, f := range secretsSeen.fs {
		f(s)
	}
	secretsSeen.Unlock()
	return s
}

// secretsSeen are told every secret Secret makes (SeeSecrets).
var secretsSeen struct {
	sync.Mutex
	fs map[int]func(string)
	n  int
}

// SeeSecrets has f told every secret Secret makes until stop is called: a
// test looks for them where they must never be (a report, a log, a file that
// outlives the run). f must not call Secret.
func SeeSecrets(f func(string)) (stop func()) {
	secretsSeen.Lock()
	defer secretsSeen.Unlock()
	if secretsSeen.fs == nil {
		secretsSeen.fs = map[int]func(string){}
	}
	id := secretsSeen.n
	secretsSeen.n++
	secretsSeen.fs[id] = f
	return func() {
		secretsSeen.Lock()
		delete(secretsSeen.fs, id)
		secretsSeen.Unlock()
	}
}

func credAttr(c *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: c}
}

// privateServer is a private broker of one process (Postgres, Redis, NATS)
// with its data in dir: restarted on the same data, removed with it on Stop.
type privateServer struct {
	PrivateProcess
	dir string
	url string
}

func (p *privateServer) URL() string                       { return p.url }
func (p *privateServer) Restart(ctx context.Context) error { return p.Start(ctx) }
func (p *privateServer) Stop() error {
	err := p.Close()
	return errors.Join(err, os.RemoveAll(p.dir))
}

// StartError is a private broker process that did not start. What it said
// (the last of its output and of its log files) travels with the error: the
// run directory that held them goes with the run.
type StartError struct {
	Name string // the process: "redis", "rabbit", a node's name
	Err  error
	Logs []Log
}

// Log is the last part of one log of a private process.
type Log struct {
	Name string // "output" (its stdout and stderr) or the file's name
	Data []byte
}

// tailLines is how many of a log's last lines an error quotes.
const tailLines = 8

func (e *StartError) Error() string {
	if t := e.Tail(tailLines); t != "" {
		return fmt.Sprintf("%v; its last log lines: %s", e.Err, t)
	}
	return e.Err.Error()
}

func (e *StartError) Unwrap() error { return e.Err }

// Tail is the last n non-empty lines of the process's logs (of the log that
// has any, the files before the output), each clipped, joined with " | ".
func (e *StartError) Tail(n int) string {
	logs := slices.Clone(e.Logs)
	// A broker's own log says more than its console.
	slices.SortStableFunc(logs, func(a, b Log) int { return cmp.Compare(boolRank(a.Name == "output"), boolRank(b.Name == "output")) })
	for _, l := range logs {
		var lines []string
		for _, line := range strings.Split(string(l.Data), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				if len(line) > 240 {
					line = line[:240] + "…"
				}
				lines = append(lines, line)
			}
		}
		if len(lines) > 0 {
			return strings.Join(lines[max(len(lines)-n, 0):], " | ")
		}
	}
	return ""
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// logKeep is how much of each log a StartError keeps: the end.
const logKeep = 64 << 10

// ringBuffer keeps the last logKeep bytes written to it. Safe for
// concurrent use.
type ringBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *ringBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - logKeep; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *ringBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.buf)
}

// capture points the standard output and error cmd has none for at a pipe
// whose reader keeps the last of it in out. The child gets the pipe's file
// itself (no copying goroutine that Wait would wait for: a helper process
// that inherits it must not keep Wait from returning). The returned function
// closes the parent's end of the writer once the child has started.
func capture(cmd *exec.Cmd, out *ringBuffer) (func(), error) {
	if cmd.Stdout != nil && cmd.Stderr != nil {
		return func() {}, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	if cmd.Stdout == nil {
		cmd.Stdout = w
	}
	if cmd.Stderr == nil {
		cmd.Stderr = w
	}
	go func() {
		_, _ = io.Copy(out, r)
		r.Close()
	}()
	return func() { w.Close() }, nil
}

// startError is err with what the process said: its output and the end of
// each of its log files, the secret scrubbed.
func (p *PrivateProcess) startError(err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	var logs []Log
	if p.out != nil {
		// What the process wrote last may still be in the pipe.
		time.Sleep(50 * time.Millisecond)
		if b := p.out.Bytes(); len(b) > 0 {
			logs = append(logs, Log{Name: "output", Data: b})
		}
	}
	for _, g := range p.Logs {
		files, _ := filepath.Glob(g)
		for _, f := range files {
			if b := readTail(f, logKeep); len(b) > 0 {
				logs = append(logs, Log{Name: filepath.Base(f), Data: b})
			}
		}
	}
	if p.Secret != "" {
		for i := range logs {
			logs[i].Data = bytes.ReplaceAll(logs[i].Data, []byte(p.Secret), []byte("xxxxx"))
		}
	}
	return &StartError{Name: p.name(), Err: err, Logs: logs}
}

// readTail reads the last n bytes of a file (nil if it cannot).
func readTail(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	k, _ := f.ReadAt(b, off)
	return b[:k]
}
