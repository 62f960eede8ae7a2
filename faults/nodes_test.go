package faults

import (
	"bufio"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSelectNodes(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	tests := []struct {
		sel, primary string
		wantLen      int
		want         []string // exact, when set
		not          string   // never selected
		err          string
	}{
		{sel: SelPrimary, primary: "n2", want: []string{"n2"}},
		{sel: SelPrimary, err: "no primary"},
		{sel: SelReplica, primary: "n1", wantLen: 1, not: "n1"},
		{sel: SelOne, wantLen: 1},
		{sel: SelMinority, wantLen: 1},
		{sel: SelMajority, wantLen: 2},
		{sel: SelAll, want: nodes},
		{sel: "n3", want: []string{"n3"}},
		{sel: "n9", err: "not a selector"},
	}
	for _, tt := range tests {
		t.Run(tt.sel+"/"+tt.primary, func(t *testing.T) {
			for seed := uint64(1); seed <= 5; seed++ {
				got, err := SelectNodes(tt.sel, nodes, tt.primary, rand.New(rand.NewPCG(seed, 1)))
				if tt.err != "" {
					if err == nil || !strings.Contains(err.Error(), tt.err) {
						t.Fatalf("got %v, %v; want an error with %q", got, err, tt.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if tt.want != nil && !slices.Equal(got, tt.want) {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
				if tt.wantLen > 0 && len(got) != tt.wantLen {
					t.Fatalf("got %v, want %d nodes", got, tt.wantLen)
				}
				if tt.not != "" && slices.Contains(got, tt.not) {
					t.Fatalf("got %v, which holds %s", got, tt.not)
				}
			}
		})
	}
	// One seed, one choice.
	a, _ := SelectNodes(SelMinority, nodes, "", rand.New(rand.NewPCG(7, 1)))
	b, _ := SelectNodes(SelMinority, nodes, "", rand.New(rand.NewPCG(7, 1)))
	if !slices.Equal(a, b) {
		t.Fatalf("one seed chose %v and %v", a, b)
	}
	// A two-node topology still has a one-node minority.
	if got, _ := SelectNodes(SelMinority, []string{"n1", "n2"}, "", rand.New(rand.NewPCG(1, 1))); len(got) != 1 {
		t.Fatalf("minority of two: %v", got)
	}
}

func TestNeedsNodes(t *testing.T) {
	tests := []struct {
		plan Plan
		want bool
	}{
		{Plan{Faults: []Fault{{Kind: Kill, Process: "w1"}}}, false},
		{Plan{Faults: []Fault{{Kind: Latency, Link: LinkBroker}}}, false},
		{Plan{Faults: []Fault{{Kind: Latency, Link: LinkReplication}}}, true},
		{Plan{Faults: []Fault{{Kind: NodeKill, Node: SelPrimary}}}, true},
		{Plan{PinProducer: SelPrimary}, true},
	}
	for i, tt := range tests {
		if got := tt.plan.NeedsNodes(); got != tt.want {
			t.Errorf("%d: NeedsNodes = %v, want %v", i, got, tt.want)
		}
	}
}

// A cut node link partitions every proxy that names it silently: a live
// connection stalls (nothing is closed), a new one is accepted and never
// answered, and what was held arrives after the heal.
func TestProxyNodeCut(t *testing.T) {
	addr, _ := echo(t)
	node := NodeLink("n1")
	p := &Proxy{Upstream: addr, Also: []*Link{node}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, "before"); err != nil {
		t.Fatal(err)
	}
	node.Cut(true)
	got := make(chan string, 1)
	go func() {
		r, _ := roundTrip(c, "during")
		got <- r
	}()
	select {
	case r := <-got:
		t.Fatalf("a reply through the partition: %q", r)
	case <-time.After(300 * time.Millisecond):
	}
	c2, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatalf("a new connection was refused (a silent partition accepts and never answers): %v", err)
	}
	defer c2.Close()
	_ = c2.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c2.Write([]byte("new\n")); err == nil {
		if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
			t.Fatal("a new connection was answered during the partition")
		}
	}
	node.Cut(false)
	select {
	case r := <-got:
		if r != "ok during\n" {
			t.Fatalf("after the heal the held request got %q", r)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the held request was not delivered after the heal")
	}
	// The connection opened during the partition goes through now, with what
	// its client sent meanwhile.
	_ = c2.SetDeadline(time.Now().Add(2 * time.Second))
	if r, err := bufio.NewReader(c2).ReadString('\n'); err != nil || r != "ok new\n" {
		t.Fatalf("the connection opened during the partition, after the heal: %q, %v", r, err)
	}
}

// A blackhole stalls a live connection (nothing arrives, nothing is cut) and
// the held bytes arrive once it ends, as TCP retransmission would deliver them.
func TestProxyBlackholeStallsLiveConnections(t *testing.T) {
	addr, _ := echo(t)
	start := time.Now()
	links := Links(Plan{Faults: []Fault{{Kind: Blackhole, Link: LinkReplication, At: 200 * time.Millisecond, For: 400 * time.Millisecond}}}, start, 1)
	p := &Proxy{Link: links[LinkReplication], Upstream: addr}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, "before"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(250 * time.Millisecond)))
	sent := time.Now()
	r, err := roundTrip(c, "held")
	if err != nil || r != "ok held\n" {
		t.Fatalf("the held request: %q, %v", r, err)
	}
	if waited := time.Since(sent); waited < 250*time.Millisecond {
		t.Fatalf("the reply came after %v, inside the blackhole", waited)
	}
	if p.Counters().Stalled == 0 {
		t.Fatal("no stall counted")
	}
}

func TestSetUpstreamMovesConnections(t *testing.T) {
	a, gotA := echo(t)
	b, gotB := echo(t)
	p := &Proxy{Upstream: a}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, "to a"); err != nil {
		t.Fatal(err)
	}
	p.SetUpstream(b)
	if _, err := roundTrip(c, "lost"); err == nil {
		t.Fatal("a connection to the old upstream survived the switch")
	}
	c.Close()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(c2, "to b"); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(gotA(), "to a") || !slices.Contains(gotB(), "to b") || slices.Contains(gotA(), "to b") {
		t.Fatalf("a got %v, b got %v", gotA(), gotB())
	}
}
