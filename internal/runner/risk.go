package runner

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
)

// Faults that threaten what the broker holds fire when they threaten it, not
// at a scenario time: a scenario time stretches with the machine's load
// (Stretch), the broker's own timers (an fsync once a second, a replication
// lag) do not. The controller holds such a fault back, from its planned time,
// until what it puts at risk is there (atRisk), at most riskWait in all; the
// supervisor hands it what the children's histories say (publishRisk). Node
// faults are held by the cluster's controller (cluster.go), a broker kill and
// a power cut of a private instance by the supervisor itself (supervise).

// riskWait bounds how long the controller holds back its faults, in all, for
// what they put at risk: a fault that finds nothing at risk by then fires
// anyway, and its run is not exercised.
const riskWait = 4 * time.Second

// riskTick is how often a held fault looks again: as often as the supervisor
// reads the histories.
const riskTick = 20 * time.Millisecond

// riskState is what the supervisor last read in the children's histories
// (publishRisk): whether the producer has tried an enqueue, how many
// acknowledged jobs have no outcome yet, how many leased ones, and when the
// newest first delivery and the newest acknowledgement of an enqueue were
// answered (history times, Unix nanoseconds). shift is how long the faults
// were held back in all: every later fault, the heal and the run's end move
// with it. Safe for concurrent use.
type riskState struct {
	produced   atomic.Bool
	unfinished atomic.Int64
	leased     atomic.Int64
	handedOut  atomic.Int64 // historyTail.handedOut
	acked      atomic.Int64 // historyTail.acked
	shift      atomic.Int64
}

// publishRisk hands the controllers what the history tail knows of the jobs
// at risk (called by supervise, which owns the tail).
func (r *run) publishRisk() {
	r.risk.produced.Store(r.tail.produced)
	r.risk.unfinished.Store(int64(r.tail.unfinished))
	r.risk.leased.Store(int64(r.tail.leased))
	r.risk.handedOut.Store(r.tail.handedOut)
	r.risk.acked.Store(r.tail.acked)
}

// shift is how long the controllers held their faults back.
func (r *run) shift() time.Duration { return time.Duration(r.risk.shift.Load()) }

// hold is one fault the controller keeps back for what it puts at risk.
type hold struct {
	f faults.Fault
	// delay is how long after the acknowledgement it is anchored to the
	// fault fires (faults.AnchorDelay, drawn from the seed); 0: it is not
	// anchored to one (Plan.AnchoredToAck).
	delay time.Duration
	// began is when its planned time came, before how long the faults had
	// been held back then.
	began  time.Time
	before time.Duration
	// anchor is the acknowledgement (history time) it fires delay after;
	// 0: none young enough yet. missed counts the anchors that grew older
	// than Plan.KillAfterAck before the controller could fire (a starved
	// controller): it waited for the next acknowledgement each time.
	anchor int64
	missed int
	// waited: what it waits for was not there at first; ok: it was there
	// when it fired; what: what it waits for.
	waited, ok bool
	what       string
}

// newHold holds fault i of the run's plan.
func (r *run) newHold(i int, f faults.Fault) *hold {
	h := &hold{f: f}
	if p := r.sc.Plan; p.AnchoredToAck(f) {
		h.delay = faults.AnchorDelay(r.rc.Seed, i, p.KillAfterAck)
	}
	return h
}

// atRisk says what h's fault waits for before it fires, whether that is there
// at now, and when to look again (0: at the next read of the histories). The
// primary's kill waits for an acknowledged job without an outcome (what a
// failover to a lagging replica may lose) and a leased one (whose lease and
// token it may hand out again: where a lease waits for a synchronous
// standby, a job is acknowledged well before a worker holds it); with
// Plan.KillAfterLease, besides, for a job handed out no longer than that
// before (a delivery, its lease and its token, that the lagging replicas do
// not have yet: a kill a second after the last delivery finds every token
// replicated, and the failover hands out none again). A broker kill or a
// power cut anchored to an acknowledgement waits for an acknowledged job
// without an outcome. A partition of a plan that pins the producer waits for
// the producer's first enqueue (a producer that connects only after the cut,
// or not before the heal, puts nothing at risk). A fault anchored to an
// acknowledgement (Plan.KillAfterAck) fires h.delay after one, provided the
// newest acknowledgement is younger than KillAfterAck then: under a
// replication lag of at least that, its write is still in the lagging link;
// on a broker that syncs once a second, it is not on the disk yet. If the
// controller comes too late for it, it waits for the next acknowledgement.
// Other faults wait for nothing.
func (r *run) atRisk(h *hold, now time.Time) (what string, ok bool, next time.Duration) {
	rs, plan, f := &r.risk, r.sc.Plan, h.f
	switch {
	case f.Kind == faults.NodeKill && f.Node == faults.SelPrimary:
		what, ok = "an acknowledged job without an outcome and a lease held", rs.unfinished.Load() > 0 && rs.leased.Load() > 0
		if fresh := plan.KillAfterLease; fresh > 0 {
			what += fmt.Sprintf(", a job handed out less than %s before", fresh)
			ok = ok && now.Sub(time.Unix(0, rs.handedOut.Load())) < fresh
		}
	case (f.Kind == faults.BrokerCrash || f.Kind == faults.PowerLoss) && h.delay > 0:
		what, ok = "an acknowledged job without an outcome", rs.unfinished.Load() > 0
	case f.Kind == faults.NodePartition && plan.PinProducer != "":
		return "the pinned producer's first enqueue", rs.produced.Load(), 0
	default:
		return "", true, 0
	}
	if h.delay == 0 {
		return what, ok, 0
	}
	fresh := plan.KillAfterAck
	what += fmt.Sprintf(", then %s after an enqueue acknowledged less than %s before", h.delay, fresh)
	young := func(t int64) bool { return t > 0 && now.Sub(time.Unix(0, t)) < fresh }
	if h.anchor != 0 && !young(h.anchor) {
		if !now.Before(time.Unix(0, h.anchor).Add(h.delay)) {
			h.missed++ // it was due, and the controller came too late
		}
		h.anchor = 0
	}
	if h.anchor == 0 {
		// The newest acknowledgement, if it is young enough; else the next.
		if acked := rs.acked.Load(); young(acked) {
			h.anchor = acked
		} else {
			return what, false, 0
		}
	}
	if due := time.Unix(0, h.anchor).Add(h.delay); now.Before(due) {
		return what, false, due.Sub(now)
	}
	return what, ok, 0
}

// ready starts h's clock at its first call, and reports whether its fault
// fires now: what it waits for is there (atRisk), or the controller has held
// its faults back riskWait in all; else it records the wait in the shift and
// says when to look again.
func (r *run) ready(h *hold, now time.Time) (fire bool, next time.Duration) {
	if h.began.IsZero() {
		h.began, h.before = now, r.shift()
	}
	h.what, h.ok, next = r.atRisk(h, now)
	if !h.ok {
		h.waited = true
	}
	if !h.waited {
		return true, 0
	}
	held := h.before + now.Sub(h.began)
	r.risk.shift.Store(int64(held))
	return h.ok || held >= riskWait, next
}

// released says in the history and the log how long h's fault was held back
// and for what, and, for one anchored to an acknowledgement, how long after
// the newest acknowledgement it fires (nothing for a fault that waited for
// nothing).
func (r *run) released(h *hold, now time.Time) {
	if !h.waited && h.delay == 0 {
		return
	}
	msg := fmt.Sprintf("%s held back %s for %s", h.f.Kind, now.Sub(h.began).Round(time.Millisecond), h.what)
	if !h.ok {
		msg += ", which did not come: it fires anyway"
	} else if acked := r.risk.acked.Load(); h.delay > 0 && acked > 0 {
		msg += fmt.Sprintf(": it fires %s after the newest acknowledgement", now.Sub(time.Unix(0, acked)).Round(100*time.Microsecond))
	}
	if h.missed > 0 {
		msg += fmt.Sprintf(" (%d acknowledgement(s) grew older than %s before it could fire: the controller ran late, and waited for the next)", h.missed, r.sc.Plan.KillAfterAck)
	}
	r.ctl.Record(history.Op{Type: history.Info, F: history.Node, Value: msg})
	r.logf("%s", msg)
}

// holdFor waits, from the fault's planned time, until ready says h's fault
// fires, and records the wait (released).
func (r *run) holdFor(ctx context.Context, h *hold) {
	for {
		fire, next := r.ready(h, time.Now())
		if fire {
			r.released(h, time.Now())
			return
		}
		if next <= 0 || next > riskTick {
			next = riskTick
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}
