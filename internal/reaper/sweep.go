package reaper

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runIDRE is the run id of targets.CheckRunID.
var runIDRE = regexp.MustCompile(`^[a-z0-9]{4,24}$`)

// runDirRE matches the temporary directory of a run: durachk-<runid>-<n>
// (os.MkdirTemp's pattern "durachk-<runid>-").
var runDirRE = regexp.MustCompile(`^durachk-([a-z0-9]{4,24})-[0-9]+$`)

// DirPattern is the os.MkdirTemp pattern of runID's directory.
func DirPattern(runID string) string { return "durachk-" + runID + "-" }

// LockName is the file in a run's directory whose lock says the run is live.
const LockName = "run.lock"

// youngDir is how long a run directory without a lock file is left alone: the
// run that made it may not have locked it yet.
const youngDir = time.Minute

// LockDir marks dir as the directory of a live run until release: an
// exclusive flock(2) on dir/run.lock, which the kernel drops when the process
// dies. The file descriptor is close-on-exec: no child inherits the lock.
func LockDir(dir string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// dirLive reports whether a live process holds dir's lock, or dir is too young
// to tell.
func dirLive(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR, 0)
	if err != nil {
		st, serr := os.Stat(dir)
		return serr == nil && time.Since(st.ModTime()) < youngDir
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// Sweep removes what dead runs left on this machine: their processes (found by
// their run cgroup, or by a command line naming the run directory, or by a
// broker process whose working directory is in it), their cgroups and their
// temporary directories. A run is live, and left alone, while its directory's
// lock is held (LockDir) or live(runID) says so (the effect store's run
// lock, which also covers runs of other machines). It returns one line per
// thing removed.
func Sweep(live func(runID string) bool) ([]string, error) {
	dirs := map[string]string{}
	tmp := os.TempDir()
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		if m := runDirRE.FindStringSubmatch(e.Name()); m != nil && e.IsDir() {
			dirs[m[1]] = filepath.Join(tmp, e.Name())
		}
	}
	cgroups := runCgroups()
	ids := map[string]bool{}
	for id := range dirs {
		ids[id] = true
	}
	for id := range cgroups {
		ids[id] = true
	}
	sorted := keys(ids)
	var removed []string
	var errs []error
	for _, id := range sorted {
		dir, cg := dirs[id], cgroups[id]
		if dir == "" && cg != "" {
			// A run under another TMPDIR: its processes name its directory.
			dir = cgroupRunDir(cg, id)
		}
		if dir != "" && dirLive(dir) {
			continue
		}
		if live != nil && live(id) {
			continue
		}
		if cg != "" {
			for _, p := range cgroupProcs(cg) {
				removed = append(removed, fmt.Sprintf("process %d (%s) of run %s", p, comm(p), id))
			}
			if err := RemoveCgroup(cg); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, "cgroup "+cg)
			}
		}
		if dir != "" {
			for _, p := range ProcessesOf(dir) {
				name := comm(p)
				if err := syscall.Kill(p, syscall.SIGKILL); err == nil {
					removed = append(removed, fmt.Sprintf("process %d (%s) of run %s", p, name, id))
				}
			}
			waitGone(dir, 10*time.Second)
			for _, mp := range DetachMounts(dir) {
				removed = append(removed, "mount "+mp)
			}
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, "temporary directory "+dir)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// cgroupRunDir finds the run directory of run id that a process of its cgroup
// works in or names on its command line, or "".
func cgroupRunDir(cg, id string) string {
	for _, pid := range cgroupProcs(cg) {
		cwd, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		for _, s := range append([]string{cwd}, strings.Split(string(cmdline), "\x00")...) {
			if d := runDirIn(s, id); d != "" {
				return d
			}
		}
	}
	return ""
}

// runDirIn returns the run directory of id that path s is in, or "".
func runDirIn(s, id string) string {
	s = strings.Trim(s, `"'`)
	i := strings.Index(s, "/"+DirPattern(id))
	if i < 0 || !strings.HasPrefix(s, "/") {
		return ""
	}
	end := strings.IndexByte(s[i+1:], '/')
	d := s
	if end >= 0 {
		d = s[:i+1+end]
	}
	if !runDirRE.MatchString(filepath.Base(d)) {
		return ""
	}
	if st, err := os.Stat(d); err != nil || !st.IsDir() {
		return ""
	}
	return d
}

func waitGone(dir string, d time.Duration) {
	deadline := time.Now().Add(d)
	for len(ProcessesOf(dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// brokerExes are the programs that Sweep kills for having their working
// directory in a run directory (their command line does not name it: Redis
// and Postgres backends rewrite theirs). Anything else there — a shell someone
// opened in the directory — is left alone.
var brokerExes = map[string]bool{"postgres": true, "postmaster": true, "redis-server": true, "redis-sentinel": true,
	"beam.smp": true, "epmd": true, "erl_child_setup": true, "inet_gethost": true, "heart": true}

// ProcessesOf lists the processes of a run directory (other than this one):
// those whose command line names dir, durachk workers and broker processes
// whose working directory is in it, and zombies of those are skipped.
func ProcessesOf(dir string) []int {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	procs, _ := os.ReadDir("/proc")
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() || zombie(pid) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if namesDir(cmdline, dir) {
			out = append(out, pid)
			continue
		}
		cwd, err := os.Readlink("/proc/" + p.Name() + "/cwd")
		if err != nil || (cwd != dir && !strings.HasPrefix(cwd, dir+"/")) {
			continue
		}
		args := bytes.Split(cmdline, []byte{0})
		if brokerExes[comm(pid)] || (len(args) > 1 && string(args[1]) == "worker") {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

// namesDir reports whether a NUL-separated command line contains dir as a
// whole path (dir itself or a path below it), not as a prefix of another name.
func namesDir(cmdline []byte, dir string) bool {
	s := string(cmdline)
	for i := 0; ; {
		j := strings.Index(s[i:], dir)
		if j < 0 {
			return false
		}
		end := i + j + len(dir)
		if end == len(s) || s[end] == '/' || s[end] == 0 || s[end] == ' ' || s[end] == '"' || s[end] == '\'' {
			return true
		}
		i = end
	}
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

func cgroupProcs(dir string) []int {
	var out []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	sort.Ints(out)
	return out
}
