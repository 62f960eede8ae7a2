package ports

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// TestFreePortIsFreeEverywhere: a port held on another loopback address
// (where this machine's private clusters listen) is not free: RabbitMQ's
// distribution port check binds the wildcard address and would fail.
func TestFreePortIsFreeEverywhere(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	defer l.Close()
	held := l.Addr().(*net.TCPAddr).Port
	if freeEverywhere(held) {
		t.Errorf("port %d held on 127.0.0.2 is called free", held)
	}
	// The port is free on 127.0.0.1: what FreePort checked before.
	if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(held)); err != nil {
		t.Skipf("the port is taken on 127.0.0.1 too: %v", err)
	} else {
		l2.Close()
	}
	for range 50 {
		port, err := Free("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if !freeEverywhere(port) || port == held {
			t.Fatalf("Free returned %d, not free on every address", port)
		}
	}
}

// A private broker's port comes from below the kernel's ephemeral range
// (which any outgoing connection may take before the broker binds it), is
// free on every address, and is never handed out twice in a row: a cluster
// draws every node's ports before any node binds one. FreePortOn gives the
// same, bindable on its address.
func TestFreePortsAreStableAndDistinct(t *testing.T) {
	lo, hi := stablePorts()
	if hi <= lo {
		t.Skipf("the ephemeral range starts at %d: no room below it", hi)
	}
	seen := map[int]bool{}
	for i := range 300 {
		get := func() (int, error) { return Free("127.0.0.1") }
		if i%2 == 1 {
			get = func() (int, error) { return Free("127.0.0.2") }
		}
		port, err := get()
		if err != nil {
			t.Fatal(err)
		}
		if port < lo || port >= hi {
			t.Fatalf("port %d is outside %d–%d (the kernel's ephemeral range starts at %d)", port, lo, hi-1, hi)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	d := drawnPorts{at: map[int]reservation{}}
	if !d.take(9871) || d.take(9871) {
		t.Error("a port handed out is handed out again at once")
	}
	// Another process (as another process would: its own drawn) cannot take
	// it while this one holds it.
	other := drawnPorts{at: map[int]reservation{}}
	if other.take(9871) {
		t.Error("a port reserved by one drawnPorts is handed out by another")
	}
	r := d.at[9871]
	r.at = time.Now().Add(-11 * time.Minute)
	d.at[9871] = r
	if !d.take(9871) {
		t.Error("a port handed out eleven minutes ago is still held back")
	}
	d.at[9871].release()
	if !other.take(9871) {
		t.Error("a released port cannot be taken by another")
	}
	other.at[9871].release()
}

// A claimed port is held until released, whatever the time: no other claim
// and no draw of Free takes it meanwhile, even while nothing listens on it
// (a proxy whose link is down).
func TestClaimHoldsUntilReleased(t *testing.T) {
	port, release, err := Claim("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := stablePorts()
	if hi > lo && (port < lo || port >= hi) {
		t.Fatalf("claimed port %d is outside %d–%d", port, lo, hi-1)
	}
	if _, ok := claimPort(port); ok {
		t.Fatalf("port %d claimed twice", port)
	}
	if drawn.take(port) {
		t.Fatalf("port %d drawn while claimed", port)
	}
	release()
	c, ok := claimPort(port)
	if !ok {
		t.Fatalf("port %d not free to claim after its release", port)
	}
	c.Close()
}
