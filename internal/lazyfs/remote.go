package lazyfs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A process that serves a FUSE mount must not fork a child that touches the
// mount before it execs: Go forks with vfork, the forking thread keeps its P,
// a garbage collection then waits for it forever, and no goroutine is left to
// answer the child (measured: a broker started with its working directory on
// the mount hung durachk). So durachk serves the lazy file system from a
// process of its own, `durachk lazyfs`, which forks nothing, and drives it
// over a pipe: Remote is that process seen from durachk.

// Remote is a lazy file system served by a child process. Safe for concurrent use.
type Remote struct {
	mountpoint string
	cmd        *exec.Cmd
	in         io.WriteCloser
	out        *bufio.Reader
	stderr     *bytes.Buffer
	done       chan struct{}

	mu     sync.Mutex
	closed bool
}

// reply is one answer of the server, a JSON line.
type reply struct {
	Error string `json:"error,omitempty"`
	Quiet bool   `json:"quiet,omitempty"`
	Loss  *Loss  `json:"loss,omitempty"`
}

// StartRemote runs `bin lazyfs MOUNTPOINT DIR [journal] [ignore-fsync]` (bin
// must serve it: durachk, or a test binary that hands the arguments to
// ServeRemote) and waits until it has mounted.
func StartRemote(bin, mountpoint, dir string, opts Options) (*Remote, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	args := []string{"lazyfs", mountpoint, dir}
	if opts.Journal {
		args = append(args, "journal")
	}
	if opts.IgnoreFsync {
		args = append(args, "ignore-fsync")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = "/"
	// A process group of its own: a terminal's Ctrl-C does not take the file
	// system away from the broker before durachk's teardown; it dies with durachk.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r := &Remote{mountpoint: mountpoint, cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = r.stderr
	var err error
	if r.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	r.out = bufio.NewReader(out)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	go func() { _ = cmd.Wait(); close(r.done) }()
	if _, err := r.read(); err != nil {
		r.kill()
		return nil, err
	}
	return r, nil
}

// Pid is the server's process id (its process group's too).
func (r *Remote) Pid() int { return r.cmd.Process.Pid }

// Mountpoint is where the file system is mounted.
func (r *Remote) Mountpoint() string { return r.mountpoint }

func (r *Remote) read() (reply, error) {
	var rep reply
	line, err := r.out.ReadBytes('\n')
	if err != nil {
		return rep, fmt.Errorf("lazyfs server: %v %s", err, strings.TrimSpace(r.stderr.String()))
	}
	if err := json.Unmarshal(line, &rep); err != nil {
		return rep, fmt.Errorf("lazyfs server: %q: %w", line, err)
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

func (r *Remote) call(cmd string) (reply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return reply{}, errors.New("lazyfs: unmounted")
	}
	if _, err := io.WriteString(r.in, cmd+"\n"); err != nil {
		return reply{}, fmt.Errorf("lazyfs server: %w", err)
	}
	return r.read()
}

// Sync makes everything written so far durable (Disk.Sync).
func (r *Remote) Sync() error {
	_, err := r.call("sync")
	return err
}

// Quiesce waits until the broker wrote nothing for quiet, at most limit (Disk.Quiesce).
func (r *Remote) Quiesce(quiet, limit time.Duration) (bool, error) {
	rep, err := r.call(fmt.Sprintf("quiesce %d %d", quiet, limit))
	return rep.Quiet, err
}

// PowerLoss drops what was never synced and mounts again (FS.PowerLoss).
func (r *Remote) PowerLoss() (Loss, error) {
	rep, err := r.call("powerloss")
	if rep.Loss == nil {
		return Loss{}, err
	}
	return *rep.Loss, err
}

// Unmount unmounts and ends the server. Idempotent.
func (r *Remote) Unmount() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var err error
	if _, werr := io.WriteString(r.in, "unmount\n"); werr == nil {
		_, err = r.read()
	}
	r.in.Close()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.kill()
		err = errors.Join(err, errors.New("lazyfs server did not exit; killed"))
	}
	return err
}

func (r *Remote) kill() {
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.done
}

// ServeRemote is the main of `durachk lazyfs MOUNTPOINT DIR [journal]
// [ignore-fsync]`: it mounts, answers the commands of StartRemote's Remote on
// in and out (one line each), and unmounts when told or when in closes (durachk
// is gone).
func ServeRemote(args []string, in io.Reader, out io.Writer) error {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP)
	enc := json.NewEncoder(out)
	answer := func(rep reply, err error) {
		if err != nil {
			rep.Error = err.Error()
		}
		_ = enc.Encode(rep)
	}
	if len(args) < 2 {
		err := errors.New("usage: lazyfs MOUNTPOINT DIR [journal] [ignore-fsync]")
		answer(reply{}, err)
		return err
	}
	var opts Options
	for _, a := range args[2:] {
		switch a {
		case "journal":
			opts.Journal = true
		case "ignore-fsync":
			opts.IgnoreFsync = true
		default:
			err := fmt.Errorf("lazyfs: unknown option %q", a)
			answer(reply{}, err)
			return err
		}
	}
	f, err := Mount(args[0], args[1], opts)
	answer(reply{}, err)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "sync":
			answer(reply{}, f.Sync())
		case "quiesce":
			var quiet, limit int64
			if len(fields) == 3 {
				quiet, _ = strconv.ParseInt(fields[1], 10, 64)
				limit, _ = strconv.ParseInt(fields[2], 10, 64)
			}
			answer(reply{Quiet: f.Disk().Quiesce(time.Duration(quiet), time.Duration(limit))}, nil)
		case "powerloss":
			loss, err := f.PowerLoss()
			answer(reply{Loss: &loss}, err)
		case "unmount":
			err := f.Unmount()
			answer(reply{}, err)
			return err
		default:
			answer(reply{}, fmt.Errorf("lazyfs: unknown command %q", fields[0]))
		}
	}
	return f.Unmount()
}

// ServeIfAsked serves a lazy file system when this process was started as
// `<binary> lazyfs ...` (a test binary standing in for durachk) and exits.
func ServeIfAsked() {
	if len(os.Args) >= 2 && os.Args[1] == "lazyfs" {
		if err := ServeRemote(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}
