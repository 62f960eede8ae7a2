package queuetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
)

// URL returns the broker URL in the environment variable env, or skips the test
// with the reason (and an example) when it is unset.
func URL(t testing.TB, env, example string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		t.Skipf("%s is not set: these tests need a broker, e.g. %s=%s", env, env, example)
	}
	return u
}

// RunID returns a fresh run id for a test ("t" + 12 hex digits): the namespace
// every adapter derives its schema, keys or queue names from.
func RunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b)
}

// ExclusiveLeases enqueues jobs through q, then leases from workers goroutines
// at once, each on the queue open returns for it (the same q where one queue
// serves many goroutines), with a long lease, until no job is left; it fails
// the test if a job was handed out twice under a live lease or one was never
// handed out.
func ExclusiveLeases(t *testing.T, q adapters.Queue, open func(t *testing.T) adapters.Queue, jobs, workers int) {
	t.Helper()
	ctx := context.Background()
	for i := range jobs {
		if err := q.Enqueue(ctx, Job("j"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range workers {
		w := open(t)
		wg.Go(func() {
			for {
				d, err := w.Lease(ctx, time.Minute)
				if errors.Is(err, adapters.ErrNoJob) {
					return
				}
				if err != nil {
					t.Errorf("lease: %v", err)
					return
				}
				mu.Lock()
				seen[d.Job.ID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != jobs {
		t.Errorf("%d distinct jobs leased, want %d", len(seen), jobs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("job %s leased %d times under a live lease", id, n)
		}
	}
}

// Unreachable checks that opening a queue on a loopback port nobody listens on
// fails with adapters.ErrUnavailable and without the password in the error.
// url builds the broker URL for host:port with the given password; open opens
// a queue on it.
func Unreachable(t *testing.T, url func(addr, password string) string, open func(ctx context.Context, url string) error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const pw = "s3cret-Passw0rd"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = open(ctx, url(addr, pw))
	if !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("open = %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("error contains the password: %v", err)
	}
}

// BreakOrderScript is a script of the order.fifo negative control (an
// adapter's BreakOrder option, delivering newest first), which every adapter
// offering it must follow step for step as adapters/mem does.
type BreakOrderScript struct {
	Name  string
	FIFO  bool
	Steps []Step
}

// BreakOrderScripts are the scripts of BreakOrder, without and with FIFO.
func BreakOrderScripts() []BreakOrderScript {
	const long = time.Minute
	return []BreakOrderScript{
		{Name: "BreakOrder delivers newest first", Steps: []Step{
			{Op: "enqueue", Arg: "a", Want: "ok"},
			{Op: "enqueue", Arg: "b@g", Want: "ok"},
			{Op: "enqueue", Arg: "c@g", Want: "ok"},
			{Op: "lease", Dur: long, Want: "c a1 t1"},
			{Op: "lease", Dur: long, Want: "b a1 t1"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
		}},
		{Name: "BreakOrder with FIFO blocks on the newest of a group", FIFO: true, Steps: []Step{
			{Op: "enqueue", Arg: "a@g", Want: "ok"},
			{Op: "enqueue", Arg: "b@g", Want: "ok"},
			{Op: "lease", Dur: long, Want: "b a1 t1"},
			{Op: "lease", Dur: long, Want: "none"},
			{Op: "ack", D: 0, Want: "ok"},
			{Op: "lease", Dur: long, Want: "a a1 t1"},
		}},
	}
}
