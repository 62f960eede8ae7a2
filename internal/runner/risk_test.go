package runner

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// riskController is a cluster controller without a cluster: what atRisk and
// holdFor read and record.
func riskController(t *testing.T, pin string) (*clusterRun, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "controller.jsonl")
	w, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	r := &run{t: &Target{}, sc: contracts.Scenario{Plan: faults.Plan{PinProducer: pin}},
		ctl: &pipeline.Env{Process: "controller", Rec: w, Now: time.Now}}
	c := &clusterRun{r: r}
	r.cl = c
	return c, path
}

// tailOf is a history tail that has read ops from a history file.
func tailOf(t *testing.T, ops ...history.Op) *historyTail {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	w, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		w.Record(op)
	}
	w.Close()
	tail := newHistoryTail()
	tail.read([]string{path})
	return tail
}

// A node fault waits for what it puts at risk: the primary's kill for an
// acknowledged job without an outcome, the partition of a pinned producer's
// node for its first enqueue; anything else waits for nothing.
func TestNodeFaultsWaitForWhatTheyPutAtRisk(t *testing.T) {
	kill := faults.Fault{Kind: faults.NodeKill, Node: faults.SelPrimary}
	cut := faults.Fault{Kind: faults.NodePartition, Node: faults.SelPinned}
	c, _ := riskController(t, faults.SelReplica)
	for _, tt := range []struct {
		name               string
		f                  faults.Fault
		produced           bool
		unfinished, leased int64
		want               bool
	}{
		{"kill, nothing acknowledged and unfinished", kill, true, 0, 0, false},
		{"kill, a job acknowledged and unfinished, none leased", kill, true, 1, 0, false},
		{"kill, a job acknowledged, unfinished and leased", kill, true, 1, 1, true},
		{"partition, the producer has sent nothing", cut, false, 3, 3, false},
		{"partition, the producer has sent", cut, true, 0, 0, true},
		{"a replica's kill waits for nothing", faults.Fault{Kind: faults.NodeKill, Node: faults.SelReplica}, false, 0, 0, true},
	} {
		c.produced.Store(tt.produced)
		c.unfinished.Store(tt.unfinished)
		c.leased.Store(tt.leased)
		if _, ok := c.atRisk(tt.f); ok != tt.want {
			t.Errorf("%s: at risk %v, want %v", tt.name, ok, tt.want)
		}
	}
	free, _ := riskController(t, "")
	if _, ok := free.atRisk(cut); !ok {
		t.Error("a partition without a pinned producer waits")
	}
}

// With Plan.KillAfterLease the primary's kill waits, besides, for a job
// handed out no longer than that before: none yet, or one older than the
// window, holds it; one handed out just now lets it fire.
func TestPrimaryKillWaitsForAFreshDelivery(t *testing.T) {
	kill := faults.Fault{Kind: faults.NodeKill, Node: faults.SelPrimary}
	c, _ := riskController(t, "")
	// A window of minutes: the test must not hang on how fast this machine
	// gets from the Store to atRisk.
	c.r.sc.Plan.KillAfterLease = time.Minute
	for _, tt := range []struct {
		name               string
		unfinished, leased int64
		handedOut          time.Duration // before now; 0: never
		want               bool
	}{
		{"nothing handed out yet", 1, 1, 0, false},
		{"the newest delivery two minutes old", 1, 1, 2 * time.Minute, false},
		{"a delivery just now", 1, 1, time.Millisecond, true},
		{"a delivery just now, nothing acknowledged and unfinished", 0, 1, time.Millisecond, false},
	} {
		c.unfinished.Store(tt.unfinished)
		c.leased.Store(tt.leased)
		c.handedOut.Store(0)
		if tt.handedOut > 0 {
			c.handedOut.Store(time.Now().Add(-tt.handedOut).UnixNano())
		}
		what, ok := c.atRisk(kill)
		if ok != tt.want {
			t.Errorf("%s: at risk %v, want %v", tt.name, ok, tt.want)
		}
		if !strings.Contains(what, "handed out less than 1m0s before") {
			t.Errorf("%s: waits for %q, which does not name the fresh delivery", tt.name, what)
		}
	}
	// The tail takes the newest first delivery of a job from the histories;
	// a second delivery of a job already leased does not count.
	tail := tailOf(t,
		history.Op{Type: history.OK, F: history.Enqueue, Process: "producer", Job: "a", T: 1},
		history.Op{Type: history.OK, F: history.Lease, Process: "w1", Job: "a", T: 5},
		history.Op{Type: history.OK, F: history.Lease, Process: "w1", Job: "a", T: 9})
	if tail.handedOut != 5 {
		t.Errorf("handed out at %d, want 5 (the job's first delivery)", tail.handedOut)
	}
}

// With Plan.KillAfterAck the primary's kill waits, besides, for an enqueue
// acknowledged no longer than that before: none yet, or one older, holds it;
// one just now lets it fire.
func TestPrimaryKillUnderLagWaitsForAFreshAck(t *testing.T) {
	kill := faults.Fault{Kind: faults.NodeKill, Node: faults.SelPrimary}
	c, _ := riskController(t, "")
	// A window of minutes: the test must not hang on how fast this machine
	// gets from the Store to atRisk.
	c.r.sc.Plan.KillAfterAck = time.Minute
	c.unfinished.Store(1)
	c.leased.Store(1)
	for _, tt := range []struct {
		name  string
		acked time.Duration // before now; 0: never
		want  bool
	}{
		{"nothing acknowledged yet", 0, false},
		{"the newest acknowledgement two minutes old", 2 * time.Minute, false},
		{"an acknowledgement just now", time.Millisecond, true},
	} {
		c.acked.Store(0)
		if tt.acked > 0 {
			c.acked.Store(time.Now().Add(-tt.acked).UnixNano())
		}
		what, ok := c.atRisk(kill)
		if ok != tt.want {
			t.Errorf("%s: at risk %v, want %v", tt.name, ok, tt.want)
		}
		if !strings.Contains(what, "an enqueue acknowledged less than 1m0s before") {
			t.Errorf("%s: waits for %q, which does not name the fresh acknowledgement", tt.name, what)
		}
	}
	c.r.sc.Plan.KillAfterAck = 0
	if what, ok := c.atRisk(kill); !ok || strings.Contains(what, "enqueue acknowledged") {
		t.Errorf("a kill without KillAfterAck waits for %q (at risk %v)", what, ok)
	}
	// The tail takes the newest first acknowledgement of an unfinished job's
	// enqueue from the histories; a second one of the same job does not count.
	tail := tailOf(t,
		history.Op{Type: history.OK, F: history.Enqueue, Process: "producer", Job: "a", T: 3},
		history.Op{Type: history.OK, F: history.Enqueue, Process: "producer", Job: "b", T: 7},
		history.Op{Type: history.OK, F: history.Enqueue, Process: "producer", Job: "a", T: 11})
	if tail.acked != 7 {
		t.Errorf("acknowledged at %d, want 7 (job b's first acknowledgement)", tail.acked)
	}
}

// What is at risk already: the fault fires at once. What never comes: the
// fault fires after riskWait, the plan moved by as much, and the history says
// so.
func TestHoldForFiresAnywayAfterRiskWait(t *testing.T) {
	cut := faults.Fault{Kind: faults.NodePartition, Node: faults.SelPinned}
	c, _ := riskController(t, faults.SelPrimary)
	c.produced.Store(true)
	c.holdFor(context.Background(), cut)
	if c.shift.Load() != 0 {
		t.Fatalf("held back %v with the producer's enqueue there", time.Duration(c.shift.Load()))
	}
	c, path := riskController(t, faults.SelPrimary)
	c.holdFor(context.Background(), cut)
	if got := time.Duration(c.shift.Load()); got < riskWait {
		t.Fatalf("held back %v, want %v before firing anyway", got, riskWait)
	}
	ops, err := history.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 1 || ops[0].F != history.Node || !strings.Contains(ops[0].Value, "the pinned producer's first enqueue, which did not come") {
		t.Fatalf("history %v, want the wait recorded", ops)
	}
}
