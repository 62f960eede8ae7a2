package runnertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
