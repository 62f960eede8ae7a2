package targets

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCancelGroupEndsTheToolsServer: a tool that starts a server child of its
// own, holding the tool's output (as mariadb-install-db's bootstrap mariadbd
// and initdb's postgres), ends at once with its context, server and all:
// killing the tool alone left the child running and CombinedOutput waiting
// for it (here 30 s; a MariaDB install 2 to 3.6 s beside two busy loops).
func TestCancelGroupEndsTheToolsServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The "server": a child of the tool's shell that inherits its output,
	// read by CombinedOutput as the installers' is.
	pidFile := filepath.Join(t.TempDir(), "server.pid")
	cmd := exec.CommandContext(ctx, "sh", "-c", "sleep 30 & echo $! > "+pidFile+"; wait")
	cancelGroup(cmd)
	done := make(chan error, 1)
	go func() {
		_, err := cmd.CombinedOutput()
		done <- err
	}()
	var server int
	for deadline := time.Now().Add(10 * time.Second); server == 0; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			server, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the tool did not start its server")
		}
	}
	defer syscall.Kill(server, syscall.SIGKILL) // before the fix it outlived the test
	began := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting for the tool 5 s after its context ended")
	}
	took := time.Since(began)
	// Dead at once: gone, or a zombie waiting for init.
	if b, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(server)).Output(); err == nil && !strings.HasPrefix(strings.TrimSpace(string(b)), "Z") {
		t.Errorf("the tool's server (pid %d) runs on after its context ended: %s", server, b)
	}
	if took > time.Second {
		t.Errorf("the tool ended %s after its context, want at once", took)
	}
	t.Logf("ended %s after its context", took.Round(time.Millisecond))
}
