package driver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/durachk/durachk/adapters"
)

// Proc is one worker process speaking the protocol. Safe for concurrent use.
type Proc struct {
	Hello  Hello
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	wmu    sync.Mutex
	mu     sync.Mutex
	nextID int64
	wait   map[int64]chan Msg // requests awaiting their answer
	// Reports is where the worker's reports arrive (role worker); closed when
	// the worker's stdout ends.
	Reports chan Msg
	done    chan struct{} // closed when the process has exited
	exitErr error
	stderr  tail
}

// tail keeps the last bytes a worker wrote to stderr, for its error.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// helloLimit bounds the wait for a worker's hello (a JIT-compiled runtime on
// a busy machine starts slowly).
const helloLimit = 30 * time.Second

// Start runs command (argv split on spaces, no shell) in dir, writes cfg as
// its first line and reads its hello. The process dies with its parent
// (parent-death signal) and runs in a process group of its own, so that a
// pause stops all of it; it exits when its stdin closes.
func Start(ctx context.Context, command, dir string, cfg Config) (*Proc, error) {
	argv := strings.Fields(command)
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: worker.command is empty", ErrProtocol)
	}
	cfg.Type, cfg.V = "config", Version
	line, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	p := &Proc{wait: map[int64]chan Msg{}, Reports: make(chan Msg, 64), done: make(chan struct{})}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DURACHK_WORKER_PROTOCOL=1")
	cmd.Stderr = &p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("worker %s: %w", argv[0], err)
	}
	p.cmd = cmd
	hello := make(chan []byte, 1)
	go p.read(stdout, hello)
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	if err := p.write(line); err != nil {
		p.Kill()
		return nil, p.failed(err)
	}
	select {
	case b, ok := <-hello:
		if !ok {
			p.Kill()
			return nil, p.failed(errors.New("exited before its hello"))
		}
		if err := json.Unmarshal(b, &p.Hello); err != nil || p.Hello.Type != "hello" {
			p.Kill()
			return nil, fmt.Errorf("%w: %s: first line is no hello: %.200s", ErrProtocol, argv[0], b)
		}
	case <-time.After(helloLimit):
		p.Kill()
		return nil, p.failed(fmt.Errorf("no hello within %s", helloLimit))
	case <-ctx.Done():
		p.Kill()
		return nil, ctx.Err()
	}
	switch {
	case p.Hello.Error != "":
		p.Stop()
		return nil, fmt.Errorf("%w: %s refused its configuration: %s", ErrProtocol, argv[0], p.Hello.Error)
	case p.Hello.V != Version:
		p.Stop()
		return nil, fmt.Errorf("%w: %s speaks version %d, durachk %d", ErrProtocol, argv[0], p.Hello.V, Version)
	case cfg.Sabotage != "" && !contains(p.Hello.Sabotages, cfg.Sabotage):
		p.Stop()
		return nil, fmt.Errorf("%w: %s has no sabotage %q (it has %v)", ErrProtocol, argv[0], cfg.Sabotage, p.Hello.Sabotages)
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// failed names the worker's error with the end of its stderr.
func (p *Proc) failed(err error) error {
	if s := p.stderr.String(); s != "" {
		return fmt.Errorf("%w: worker: %v: %s", adapters.ErrUnavailable, err, s)
	}
	return fmt.Errorf("%w: worker: %v", adapters.ErrUnavailable, err)
}

// read hands the first line to hello, answers to their waiters and every
// other message to Reports.
func (p *Proc) read(r io.Reader, hello chan<- []byte) {
	defer func() {
		p.mu.Lock()
		for id, ch := range p.wait {
			close(ch)
			delete(p.wait, id)
		}
		p.mu.Unlock()
		close(p.Reports)
	}()
	br := bufio.NewReaderSize(r, 64<<10)
	first := true
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > MaxLine {
			return
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if first {
				hello <- t
				first = false
			} else {
				var m Msg
				if json.Unmarshal(t, &m) == nil {
					p.dispatch(m)
				}
			}
		}
		if err != nil {
			if first {
				close(hello)
			}
			return
		}
	}
}

func (p *Proc) dispatch(m Msg) {
	if m.Type == TypeAnswer {
		p.mu.Lock()
		ch := p.wait[m.Re]
		delete(p.wait, m.Re)
		p.mu.Unlock()
		if ch != nil {
			ch <- m
		}
		return
	}
	p.Reports <- m
}

func (p *Proc) write(line []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, err := p.stdin.Write(append(line, '\n'))
	return err
}

// Send writes m (an answer) to the worker.
func (p *Proc) Send(m Msg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return p.write(b)
}

// Answer answers report m: ok with the fields of with, or err.
func (p *Proc) Answer(m Msg, with Msg, err error) error {
	with.Type, with.Re = TypeAnswer, m.ID
	if err != nil {
		with.Error = &Error{Code: codeOf(err), Message: err.Error()}
	} else {
		with.OK = true
	}
	return p.Send(with)
}

// Call sends request m and waits for its answer; the answer's error comes
// back as the adapters' sentinels. A worker that exits meanwhile leaves the
// outcome unknown (ErrAmbiguous).
func (p *Proc) Call(ctx context.Context, m Msg) (Msg, error) {
	ch := make(chan Msg, 1)
	p.mu.Lock()
	p.nextID++
	m.ID = p.nextID
	p.wait[m.ID] = ch
	p.mu.Unlock()
	if err := p.Send(m); err != nil {
		p.forget(m.ID)
		return Msg{}, fmt.Errorf("%w: %s: %v", adapters.ErrAmbiguous, m.Type, err)
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return Msg{}, fmt.Errorf("%w: %s: the worker exited", adapters.ErrAmbiguous, m.Type)
		}
		if a.Error != nil {
			return a, a.Error.Err()
		}
		return a, nil
	case <-ctx.Done():
		p.forget(m.ID)
		return Msg{}, fmt.Errorf("%w: %s: %w", adapters.ErrAmbiguous, m.Type, ctx.Err())
	}
}

func (p *Proc) forget(id int64) {
	p.mu.Lock()
	delete(p.wait, id)
	p.mu.Unlock()
}

// Signal sends sig to the worker's process group.
func (p *Proc) Signal(sig syscall.Signal) {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// Kill kills the worker's process group and waits for it.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// stopGrace is how long a worker has to exit once its stdin closed.
const stopGrace = 2 * time.Second

// Stop closes the worker's stdin and SIGTERMs it, and kills its process
// group if it has not exited within stopGrace.
func (p *Proc) Stop() error {
	p.wmu.Lock()
	p.stdin.Close()
	p.wmu.Unlock()
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
	}
	p.Signal(syscall.SIGKILL) // what it forked, too
	<-p.done
	return nil
}

// Done is closed when the worker has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitErr is how the worker exited, once Done is closed, with its last
// lines of stderr.
func (p *Proc) ExitErr() error {
	if p.exitErr == nil {
		return nil
	}
	return p.failed(p.exitErr)
}
