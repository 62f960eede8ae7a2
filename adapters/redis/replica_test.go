package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
)

// startServer runs a redis-server of the test's own on a free loopback port
// (replicaOf "": a primary), killed when the test ends.
func startServer(t *testing.T, replicaOf string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server to start a primary and a replica with")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", t.TempDir()}
	if replicaOf != "" {
		host, p, _ := strings.Cut(replicaOf, ":")
		args = append(args, "--replicaof", host, p)
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// eventually polls f until it returns nil, for up to 20 s.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

// A client on a replica opens the run's queue once the group exists there
// (XGROUP CREATE is refused with READONLY before Redis looks), and each of
// its writes is refused, definitely: a producer pinned to a replica cut off
// from its primary tries its enqueues and is refused each one. Before the
// group exists, the open is refused as unavailable.
func TestOpenOnAReplica(t *testing.T) {
	primary := startServer(t, "")
	replica := startServer(t, primary)
	ctx := context.Background()
	runID := "treplica"
	eventually(t, "the replica's link to its primary", func() error {
		q, err := Open(ctx, "redis://"+replica+"/0", "tprobe", Options{})
		if err == nil {
			q.Close()
			return errors.New("opened on a replica before any group existed")
		}
		if !strings.Contains(err.Error(), "READONLY") {
			return err // still starting
		}
		return nil
	})
	if _, err := Open(ctx, "redis://"+replica+"/0", runID, Options{}); !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("open on a replica before the group exists: %v, want unavailable", err)
	}
	p, err := Open(ctx, "redis://"+primary+"/0", runID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var r *Queue
	eventually(t, "open on the replica once the group is replicated", func() error {
		r, err = Open(ctx, "redis://"+replica+"/0", runID, Options{})
		return err
	})
	defer r.Close()
	err = r.Enqueue(ctx, adapters.Job{ID: "j1", Tenant: "acme", DocumentID: "d", Version: 1, MaxAttempts: 3, Payload: []byte("{}")})
	if !errors.Is(err, adapters.ErrUnavailable) || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("enqueue on a replica: %v, want a definite READONLY refusal", err)
	}
}
