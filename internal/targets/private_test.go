package targets

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/internal/reaper"
)

// listeners returns the TCP addresses (ip:port) that the given processes
// listen on, read from /proc: every socket inode of their fds, matched against
// /proc/net/tcp{,6} in state LISTEN.
func listeners(t *testing.T, pids []int) []string {
	t.Helper()
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] {
				continue
			}
			out = append(out, hexAddr(fs[1]))
		}
		file.Close()
	}
	sort.Strings(out)
	return out
}

// hexAddr decodes /proc/net/tcp's address form (little-endian hex IP:port).
func hexAddr(s string) string {
	h, p, _ := strings.Cut(s, ":")
	port, _ := strconv.ParseUint(p, 16, 16)
	b := make([]byte, len(h)/2)
	for i := range b {
		v, _ := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		b[i] = byte(v)
	}
	if len(b) == 4 {
		return fmt.Sprintf("%d.%d.%d.%d:%d", b[3], b[2], b[1], b[0], port)
	}
	// IPv6: four little-endian 32-bit words.
	ip := make(net.IP, 16)
	for w := 0; w < 4; w++ {
		for i := 0; i < 4; i++ {
			ip[4*w+i] = b[4*w+3-i]
		}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
}

// groupPids lists the live processes of process group pgid.
func groupPids(pgid int) []int {
	var out []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || zombieProc(pid) {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/stat")
		if err != nil {
			continue
		}
		fs := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if len(fs) > 2 && fs[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

func zombieProc(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// commName is the process's name (Debian's redis-server is a link to
// redis-check-rdb: its exe says nothing).
func commName(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// runDir makes a directory like a run's: under the system's temporary
// directory (t.TempDir's parents are closed to the broker's own account).
func runDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "durachk-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Each private broker is its real server binary, a direct child of durachk; it
// listens on loopback only; it has a password (a URL without it is refused);
// Pause freezes it; Kill leaves no process of it and Restart brings it back;
// Stop leaves no process of it and no cgroup. DURACHK_NO_CGROUP=1 runs the
// same on process groups only.
func TestPrivateInstances(t *testing.T) {
	t.Parallel() // brokers of its own, on ports of their own
	tests := []struct {
		kind, url, exe string
		procs          func(Instance) []*PrivateProcess
	}{
		{"postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres",
			func(i Instance) []*PrivateProcess { return []*PrivateProcess{&i.(*privateServer).PrivateProcess} }},
		{"redis", "redis://127.0.0.1:6379/0", "redis-server",
			func(i Instance) []*PrivateProcess { return []*PrivateProcess{&i.(*privateServer).PrivateProcess} }},
		{"mysql", "mysql://root@127.0.0.1:3306/test", "mariadbd",
			func(i Instance) []*PrivateProcess { return []*PrivateProcess{&i.(*privateServer).PrivateProcess} }},
		{"amqp", "amqp://guest:guest@127.0.0.1:5672/", "beam.smp",
			func(i Instance) []*PrivateProcess {
				r := i.(*privateRabbit)
				return []*PrivateProcess{&r.PrivateProcess, &r.epmd}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			spec, err := Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if err := CanKillBroker(spec); err != nil {
				t.Skip(err)
			}
			spec.RunID = "tpriv" + randSuffix()
			dir := runDir(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			inst, pspec, err := StartPrivate(ctx, spec, dir)
			if err != nil {
				t.Fatal(err)
			}
			stopped := false
			defer func() {
				if !stopped {
					_ = inst.Stop()
				}
			}()
			procs := tt.procs(inst)
			server := procs[0]
			if got := commName(server.Pid()); got != tt.exe {
				t.Errorf("the child durachk started is %s, want the server %s itself", got, tt.exe)
			}
			var all []int
			for _, p := range procs {
				all = append(all, groupPids(p.pgid)...)
			}
			ls := listeners(t, all)
			if len(ls) == 0 {
				t.Fatalf("no listening socket found for processes %v", all)
			}
			for _, l := range ls {
				// epmd adds ::1 to the loopback address it is given.
				h, _, _ := net.SplitHostPort(l)
				if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
					t.Errorf("private %s listens on %s, want loopback only (all: %v)", tt.kind, l, ls)
				}
			}
			u, _ := url.Parse(pspec.URL)
			if pw, ok := u.User.Password(); !ok || len(pw) < 16 {
				t.Errorf("private %s URL has no password of its own", tt.kind)
			}
			// Without the password the broker refuses the connection.
			nopw := *u
			nopw.User = url.User(u.User.Username())
			if tt.kind == "redis" {
				nopw.User = nil
			}
			if err := readyKinds[tt.kind](ctx, Spec{Kind: tt.kind, URL: nopw.String()}); err == nil {
				t.Errorf("private %s accepts a connection without its password", tt.kind)
			}
			if err := readyKinds[tt.kind](ctx, pspec); err != nil {
				t.Errorf("private %s refuses its own URL: %v", tt.kind, err)
			}
			if r, ok := inst.(*privateRabbit); ok {
				assertRabbitNodeLockedDown(t, r, *u)
			}
			ready := func() error { return readyKinds[tt.kind](ctx, pspec) }
			// Pause freezes the server: it answers nothing until Resume.
			pz := inst.(Pauser)
			if err := pz.Pause(); err != nil {
				t.Fatal(err)
			}
			if err := Ready(ctx, pspec); err == nil {
				t.Errorf("paused private %s still answers", tt.kind)
			}
			if err := pz.Resume(); err != nil {
				t.Fatal(err)
			}
			if err := ready(); err != nil {
				t.Errorf("resumed private %s does not answer: %v", tt.kind, err)
			}
			// Kill takes every process of the server; Restart brings it back on
			// its data, port and password.
			pgid := server.pgid
			if err := inst.Kill(); err != nil {
				t.Fatal(err)
			}
			if left := groupPids(pgid); len(left) > 0 {
				t.Errorf("processes of %s left after Kill: %v", tt.kind, left)
			}
			if err := Ready(ctx, pspec); err == nil {
				t.Errorf("killed private %s still answers", tt.kind)
			}
			if err := inst.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ready(); err != nil {
				t.Errorf("restarted private %s does not answer: %v", tt.kind, err)
			}
			cg := server.cgroup
			if err := inst.Stop(); err != nil {
				t.Fatal(err)
			}
			stopped = true
			for _, p := range procs {
				if left := groupPids(p.pgid); len(left) > 0 {
					t.Errorf("processes of %s left after Stop: %v", tt.kind, left)
				}
			}
			if left := reaper.ProcessesOf(dir); len(left) > 0 {
				t.Errorf("processes of the run directory left after Stop: %v", left)
			}
			if cg != "" {
				if _, err := os.Stat(cg); err == nil {
					t.Errorf("cgroup %s left after Stop", cg)
				}
			} else {
				t.Logf("no cgroup on this machine: process groups only")
			}
		})
	}
}
