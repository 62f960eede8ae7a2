package targets

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"time"
)

// PrivateProcess is a broker server started by the harness as a direct child in
// a process group of its own, so that Kill takes the server and every process it
// forked, and Pdeathsig takes it if durachk itself dies. It is waited on, so no
// orphan is left to be reaped slowly. Not safe for concurrent use.
type PrivateProcess struct {
	// Command builds the server's command line (called for every start).
	Command func() *exec.Cmd
	// Addr is the host:port it listens on.
	Addr string
	// User, if set and durachk runs as root, is the account the server runs as
	// (Postgres refuses to run as root).
	User string
	// Ready, if set, is called after the port accepts connections and must return
	// nil once the server serves requests.
	Ready   func(ctx context.Context) error
	cmd     *exec.Cmd
	done    chan error
	started bool
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

// Start starts the server and waits until it accepts connections.
func (p *PrivateProcess) Start(ctx context.Context) error {
	cmd := p.Command()
	cred, err := Credential(p.User)
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("private instance: %w", err)
	}
	p.cmd, p.done, p.started = cmd, make(chan error, 1), true
	go func() { p.done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-p.done:
			p.started = false
			return fmt.Errorf("private instance exited while starting: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", p.Addr, 200*time.Millisecond); err == nil {
			c.Close()
			if p.Ready == nil || p.Ready(ctx) == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			p.Kill()
			return fmt.Errorf("private instance on %s did not come up within 60 s", p.Addr)
		}
		select {
		case <-ctx.Done():
			p.Kill()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill SIGKILLs the server's process group and waits for the server to exit.
func (p *PrivateProcess) Kill() error {
	if !p.started {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return errors.New("private instance did not exit after SIGKILL")
	}
	p.started = false
	// Children of the group that outlive the leader are gone too once the group
	// is empty; give the kernel a moment to release the port.
	for i := 0; i < 50 && syscall.Kill(-p.cmd.Process.Pid, 0) == nil; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func credAttr(c *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: c}
}
