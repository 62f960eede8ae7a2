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
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/pipeline"
)

// riskController is a controller without children: what atRisk and holdFor
// read and record.
func riskController(t *testing.T, pin string) (*run, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "controller.jsonl")
	w, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	r := &run{t: &Target{}, sc: contracts.Scenario{Plan: faults.Plan{PinProducer: pin}},
		ctl: &pipeline.Env{Process: "controller", Rec: w, Now: time.Now}}
	return r, path
}

// atRiskNow is atRisk of a fresh hold of f, now.
func atRiskNow(r *run, f faults.Fault) (string, bool) {
	what, ok, _ := r.atRisk(r.newHold(0, f), time.Now())
	return what, ok
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
		c.risk.produced.Store(tt.produced)
		c.risk.unfinished.Store(tt.unfinished)
		c.risk.leased.Store(tt.leased)
		if _, ok := atRiskNow(c, tt.f); ok != tt.want {
			t.Errorf("%s: at risk %v, want %v", tt.name, ok, tt.want)
		}
	}
	free, _ := riskController(t, "")
	if _, ok := atRiskNow(free, cut); !ok {
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
	c.sc.Plan.KillAfterLease = time.Minute
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
		c.risk.unfinished.Store(tt.unfinished)
		c.risk.leased.Store(tt.leased)
		c.risk.handedOut.Store(0)
		if tt.handedOut > 0 {
			c.risk.handedOut.Store(time.Now().Add(-tt.handedOut).UnixNano())
		}
		what, ok := atRiskNow(c, kill)
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

// With Plan.KillAfterAck a fault anchored to an acknowledgement (the
// primary's kill, a broker kill, a power cut) fires its drawn delay after
// one, while the newest is younger than KillAfterAck: none yet, or only a
// stale one, holds it; one the controller comes too late for is given up for
// the next, and the history says so.
func TestAnchoredFaultFiresAfterAnAck(t *testing.T) {
	const fresh = 100 * time.Millisecond
	t0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, f := range []faults.Fault{{Kind: faults.NodeKill, Node: faults.SelPrimary}, {Kind: faults.BrokerCrash}, {Kind: faults.PowerLoss}} {
		t.Run(string(f.Kind), func(t *testing.T) {
			r, path := riskController(t, "")
			r.sc.Plan.KillAfterAck = fresh
			r.risk.unfinished.Store(1)
			r.risk.leased.Store(1)
			h := r.newHold(0, f)
			d := h.delay
			if d < time.Millisecond || d > fresh/2 {
				t.Fatalf("anchor delay %v, want 1ms to %v", d, fresh/2)
			}
			step := func(now time.Time, want bool) time.Duration {
				t.Helper()
				if h.began.IsZero() {
					h.began = now
				}
				what, ok, next := r.atRisk(h, now)
				if ok != want {
					t.Fatalf("at %v: at risk %v (%s), want %v", now.Sub(t0), ok, what, want)
				}
				if !strings.Contains(what, "after an enqueue acknowledged less than 100ms before") {
					t.Fatalf("waits for %q, which does not name the acknowledgement", what)
				}
				h.what, h.ok, h.waited = what, ok, h.waited || !ok
				return next
			}
			step(at(0), false) // nothing acknowledged yet
			r.risk.acked.Store(at(-2 * fresh).UnixNano())
			step(at(0), false) // only a stale acknowledgement
			r.risk.acked.Store(at(0).UnixNano())
			if next := step(at(d/2), false); next != d-d/2 {
				t.Errorf("anchored at 0, at %v: look again in %v, want %v", d/2, next, d-d/2)
			}
			// The controller ran late: the acknowledgement it was due to
			// fire after is stale; it waits for the next.
			step(at(fresh+time.Millisecond), false)
			if h.missed != 1 {
				t.Errorf("missed %d acknowledgements, want 1", h.missed)
			}
			r.risk.acked.Store(at(200 * time.Millisecond).UnixNano())
			step(at(200*time.Millisecond+d), true)
			r.released(h, at(200*time.Millisecond+d))
			ops, err := history.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(ops) != 1 || !strings.Contains(ops[0].Value, "1 acknowledgement(s) grew older than 100ms before it could fire") ||
				!strings.Contains(ops[0].Value, "it fires "+d.String()+" after the newest acknowledgement") {
				t.Errorf("history %v, want the anchor and the missed acknowledgement recorded", ops)
			}
		})
	}
	// Without KillAfterAck a broker kill or a power cut fires at its time.
	r, _ := riskController(t, "")
	for _, k := range []faults.Kind{faults.BrokerCrash, faults.PowerLoss} {
		if h := r.newHold(0, faults.Fault{Kind: k}); h.delay != 0 {
			t.Errorf("%s without KillAfterAck: anchored %v after an acknowledgement", k, h.delay)
		}
		if what, ok := atRiskNow(r, faults.Fault{Kind: k}); !ok || what != "" {
			t.Errorf("%s without KillAfterAck waits for %q (at risk %v)", k, what, ok)
		}
	}
	// The draw is the seed's: the same seed, the same delay; seeds differ.
	seen := map[time.Duration]bool{}
	for seed := range uint64(20) {
		d := faults.AnchorDelay(seed, 3, fresh)
		if d != faults.AnchorDelay(seed, 3, fresh) || d < time.Millisecond || d > fresh/2 {
			t.Fatalf("seed %d: delay %v, want one delay from 1ms to %v", seed, d, fresh/2)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("20 seeds drew %d delays", len(seen))
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
	c.risk.produced.Store(true)
	c.holdFor(context.Background(), c.newHold(0, cut))
	if c.shift() != 0 {
		t.Fatalf("held back %v with the producer's enqueue there", c.shift())
	}
	c, path := riskController(t, faults.SelPrimary)
	c.holdFor(context.Background(), c.newHold(0, cut))
	if got := c.shift(); got < riskWait {
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

// timedCluster is a cluster whose nodes decide by a timeout what a cut-off
// node does (targets.PartitionTimer).
type timedCluster struct {
	neverSettles
	timeout time.Duration
}

func (c *timedCluster) PartitionTimeout() (time.Duration, string) {
	return c.timeout, "a test timeout"
}

// A partition of a cluster with a timeout lasts past it, in wall time: its
// heal comes no earlier than the timeout plus the margin after the cut,
// stretched with the run's clock, and the history notes what it must
// outlast; a timeout longer than a run holds a partition is not crossed,
// and the history says so; a cluster without one changes nothing.
func TestPartitionOutlastsTheTopologysTimeout(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cl      targets.Cluster
		scale   float64
		want    time.Duration // the earliest heal after the cut; 0: none
		history string
	}{
		{"a 10s timeout", &timedCluster{timeout: 10 * time.Second}, DefaultScale, 12 * time.Second, "partition must outlast 10s: a test timeout"},
		{"a 10s timeout, the clock stretched 4×", &timedCluster{timeout: 10 * time.Second}, 4 * DefaultScale, 18 * time.Second, "partition must outlast 10s: a test timeout"},
		{"an hour", &timedCluster{timeout: time.Hour}, DefaultScale, 0, "the partition does not outlast 1h0m0s: a test timeout is longer than a run holds a partition (30s)"},
		{"no timeout", &neverSettles{}, DefaultScale, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, path := riskController(t, "")
			r.t.Scale = tt.scale
			r.start = time.Now().Add(-5 * time.Second) // the cut comes 5 s into the run
			c := &clusterRun{r: r, cl: tt.cl}
			earliest, ok := c.outlast()
			if ok != (tt.want > 0) {
				t.Fatalf("outlasts %v, want %v", ok, tt.want > 0)
			}
			if ok && (earliest-5*time.Second < tt.want || earliest-5*time.Second > tt.want+time.Second) {
				t.Errorf("the heal at the earliest %v after the cut, want %v", earliest-5*time.Second, tt.want)
			}
			ops, err := history.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.history == "" && len(ops) > 0:
				t.Errorf("history %v, want nothing noted", ops)
			case tt.history != "" && (len(ops) != 1 || !strings.HasPrefix(ops[0].Value, tt.history)):
				t.Errorf("history %v, want %q", ops, tt.history)
			}
		})
	}
}
