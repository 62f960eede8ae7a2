package runnertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var built struct {
	once sync.Once
	bin  string
	err  error
}

// Binary builds the durachk command once per test binary and returns its
// path, for tests that run it as a user does (and kill it). The package's
// TestMain calls RemoveBinary after the tests.
func Binary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "durachk-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "durachk")
		if b, err := exec.Command("go", "build", "-o", built.bin, "github.com/durachk/durachk/cmd/durachk").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, b)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// RemoveBinary removes what Binary built, if anything.
func RemoveBinary() {
	if built.bin != "" {
		os.RemoveAll(filepath.Dir(built.bin))
	}
}

// Processes lists the live processes whose program, or the script its
// runtime runs (node main.js), is path, as "pid: command line"; zombies hold
// nothing and are left out, and so is a process that only names path in an
// argument (durachk's own --target ...&worker.command=path).
func Processes(path string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if !slices.Contains(args[:min(len(args), 2)], path) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue
			}
		}
		out = append(out, e.Name()+": "+strings.Join(args, " "))
	}
	return out
}
