package faults

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestLinkWindows(t *testing.T) {
	plan := Plan{Faults: []Fault{
		{Kind: LinkDown, Link: LinkBroker, At: time.Second, For: time.Second},
		{Kind: ReplyLoss, Link: LinkStore, For: time.Minute, Rate: 1, Match: "COMMIT"},
		{Kind: Latency, Link: LinkChannel, For: time.Minute, Delay: 10 * time.Millisecond, Jitter: 5 * time.Millisecond},
		{Kind: Blackhole, Link: LinkBroker, At: 5 * time.Second, For: time.Second},
	}}
	links := Links(plan, t0, 1)
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"down before the window", links[LinkBroker].Down(t0.Add(500 * time.Millisecond)), false},
		{"down inside the window", links[LinkBroker].Down(t0.Add(1500 * time.Millisecond)), true},
		{"down at its end", links[LinkBroker].Down(t0.Add(2 * time.Second)), false},
		{"blackhole inside its window", links[LinkBroker].Blackhole(t0.Add(5500 * time.Millisecond)), true},
		{"reply of a matching request lost", links[LinkStore].LoseReply(t0, []byte("commit")), true},
		{"reply of another request kept", links[LinkStore].LoseReply(t0, []byte("select 1")), false},
		{"a link without faults loses nothing", links[LinkChannel].LoseReply(t0, nil), false},
		{"a missing link is never down", (*Link)(nil).Down(t0), false},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	for range 20 {
		if d := links[LinkChannel].Delay(t0); d < 10*time.Millisecond || d >= 15*time.Millisecond {
			t.Fatalf("latency %v outside [10ms, 15ms)", d)
		}
	}
}

func TestFlapIsSeededAndStartsDown(t *testing.T) {
	plan := Plan{Faults: []Fault{{Kind: Flap, Link: LinkChannel, For: 30 * time.Second}}}
	a, b := Links(plan, t0, 7)[LinkChannel], Links(plan, t0, 7)[LinkChannel]
	if !a.Down(t0) {
		t.Fatal("a flapping link starts down")
	}
	ups, downs := 0, 0
	for ms := 0; ms < 30000; ms += 100 {
		at := t0.Add(time.Duration(ms) * time.Millisecond)
		if a.Down(at) != b.Down(at) {
			t.Fatalf("one seed, two patterns at %dms", ms)
		}
		if a.Down(at) {
			downs++
		} else {
			ups++
		}
	}
	if ups == 0 || downs == 0 {
		t.Fatalf("flapping never changed: %d down, %d up", downs, ups)
	}
}

func TestArriveAll(t *testing.T) {
	p := NewPoints(Plan{Faults: []Fault{
		{Kind: CrashAt, Point: "after_lease", Nth: 2, ID: 1},
		{Kind: PauseAt, Point: "after_lease", Nth: 2, ID: 2},
		{Kind: Kill, Process: "w1"}, // not a point: ignored
	}})
	if got := p.ArriveAll("after_lease"); len(got) != 0 {
		t.Fatalf("first arrival fired %v", got)
	}
	if got := p.ArriveAll("after_lease"); len(got) != 2 {
		t.Fatalf("second arrival fired %v, want both faults", got)
	}
	if got := p.ArriveAll("after_lease"); len(got) != 0 {
		t.Fatalf("third arrival fired %v", got)
	}
}

// echo serves one line per request, recording what it received.
func echo(t *testing.T) (addr string, got func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					mu.Lock()
					lines = append(lines, strings.TrimSpace(line))
					mu.Unlock()
					if _, err := c.Write([]byte("ok " + line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

func roundTrip(c net.Conn, req string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(req + "\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestProxyForwardsAndLosesReplies(t *testing.T) {
	addr, received := echo(t)
	var now time.Time
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(d time.Duration) { mu.Lock(); now = t0.Add(d); mu.Unlock() }
	set(0)
	links := Links(Plan{Faults: []Fault{
		{Kind: ReplyLoss, Link: "l", At: time.Minute, For: time.Minute, Rate: 1, Match: "commit"},
		{Kind: LinkDown, Link: "l", At: 3 * time.Minute, For: time.Minute},
	}}, t0, 1)
	var faults []string
	var fmu sync.Mutex
	p := &Proxy{Link: links["l"], Upstream: addr, Now: clock, OnFault: func(k string) { fmu.Lock(); faults = append(faults, k); fmu.Unlock() }}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if reply, err := roundTrip(c, "select"); err != nil || reply != "ok select\n" {
		t.Fatalf("plain round trip: %q, %v", reply, err)
	}
	set(90 * time.Second) // reply loss for "commit"
	if reply, err := roundTrip(c, "select again"); err != nil || reply != "ok select again\n" {
		t.Fatalf("a request that does not match keeps its reply: %q, %v", reply, err)
	}
	if _, err := roundTrip(c, "commit"); err == nil {
		t.Fatal("the reply of commit arrived; want it lost and the connection cut")
	}
	if r := received(); r[len(r)-1] != "commit" {
		t.Fatalf("the upstream did not receive the request whose reply was lost: %v", r)
	}
	set(3*time.Minute + time.Second)   // partition
	time.Sleep(100 * time.Millisecond) // the proxy's watcher closes the listener
	// Its port stays claimed meanwhile: no other durachk process takes it
	// (ports.Claim's name for it), so a client dialing it is refused, never
	// sent to another run's proxy.
	_, port, _ := net.SplitHostPort(p.Addr())
	if claim, err := net.Listen("unix", "@durachk-port-"+port); err == nil {
		claim.Close()
		t.Error("the proxy's port is unclaimed while its link is down")
	}
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		_, rerr := roundTrip(c2, "during partition")
		c2.Close()
		if rerr == nil {
			t.Fatal("a request went through a partition")
		}
	}
	set(5 * time.Minute) // healed
	var c3 net.Conn
	for i := 0; i < 50; i++ {
		if c3, err = net.Dial("tcp", p.Addr()); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the proxy did not listen again after the partition: %v", err)
	}
	defer c3.Close()
	if reply, err := roundTrip(c3, "after"); err != nil || reply != "ok after\n" {
		t.Fatalf("after the partition: %q, %v", reply, err)
	}
	fmu.Lock()
	defer fmu.Unlock()
	if got := strings.Join(faults, ","); !strings.Contains(got, "reply_lost") || !strings.Contains(got, "partition") {
		t.Fatalf("faults reported: %s", got)
	}
	if c := p.Counters(); c.RepliesDropped != 1 {
		t.Fatalf("counters %+v: want one reply dropped", c)
	}
}
