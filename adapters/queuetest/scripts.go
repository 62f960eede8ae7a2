package queuetest

import (
	"time"

	"github.com/durachk/durachk/adapters"
)

// Feature predicates of the alternatives.
var (
	unfenced      = func(e env) bool { return !e.caps.FencedAck }
	nackIsNew     = func(e env) bool { return e.NackIsNewMessage }
	noNackDelay   = func(e env) bool { return e.caps.DelayedNack == adapters.None }
	expiryOnLease = func(e env) bool { return e.ExpiryOnNextLease }
	extendExpired = func(e env) bool { return e.ExtendExpiredMaySucceed }
	pendingHeld   = func(e env) bool { return e.PendingInFlight }
	expiryFrees   = func(e env) bool { return e.ExpiryReleases }
	lateAmbiguous = func(e env) bool { return e.LateDeleteAmbiguous }
)

// ifFenced: the step calls with a delivery that is no longer current; on a
// queue without fenced acks (Capabilities.FencedAck false) such a call may
// succeed and change the queue, so it is not made.
var ifFenced = alt{when: unfenced, skip: true}

// ifInspectHarmless: the step inspects jobs that are queued and leased later;
// on a queue whose Inspect receives and returns them (Features.InspectRedelivers)
// it would change their later tokens and attempts, so it is not made.
var ifInspectHarmless = alt{when: func(e env) bool { return e.InspectRedelivers }, skip: true}

func needsLease(e env) string {
	if e.caps.Lease == adapters.None {
		return "the queue has no lease expiry (Capabilities.Lease none)"
	}
	return ""
}

func needsFencing(e env) string {
	if why := needsLease(e); why != "" {
		return why
	}
	if !e.caps.FencedAck {
		return "the queue does not fence acks (Capabilities.FencedAck false): a superseded delivery may still ack"
	}
	return ""
}

func needsOrder(e env) string {
	if e.Unordered && !e.caps.FIFO {
		return "the queue keeps no acceptance order (Features.Unordered)"
	}
	return ""
}

func needsExactCount(e env) string {
	if why := needsLease(e); why != "" {
		return why
	}
	for _, s := range []adapters.Support{e.caps.DeliveryCount, e.caps.Token} {
		if s != adapters.Native && s != adapters.Emulated {
			return "the queue does not count every delivery exactly (Capabilities.DeliveryCount " + string(e.caps.DeliveryCount) + ", Token " + string(e.caps.Token) + ")"
		}
	}
	return ""
}

// catalogue is the conformance suite. Expired leases are re-leased with the same
// short lease throughout, as the workers of a run do (a broker may measure
// expiry by the claimer's lease).
var catalogue = []Script{
	{Name: "lease then ack", Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "inspect", Want: "queued=[] inflight=[a] dead=[] ok"},
		{Op: "ack", D: 0, Want: "ok"},
		{Op: "ack", D: 0, Want: "lost", alt: []alt{ifFenced}},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[] ok", Wait: true},
	}},
	{Name: "acceptance order", needs: needsOrder, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "enqueue", Arg: "b", Want: "ok"},
		{Op: "enqueue", Arg: "c", Want: "ok"},
		{Op: "inspect", Want: "queued=[a b c] inflight=[] dead=[] ok", alt: []alt{ifInspectHarmless}},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "lease", Dur: long, Want: "b a1 t1"},
		{Op: "inspect", Want: "queued=[c] inflight=[a b] dead=[] ok", alt: []alt{ifInspectHarmless}},
		{Op: "lease", Dur: long, Want: "c a1 t1"},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "inspect", Want: "queued=[] inflight=[a b c] dead=[] ok"},
	}},
	{Name: "inspect names the queued jobs in acceptance order", needs: needsOrder, Steps: []Step{
		{Op: "enqueue", Arg: "b", Want: "ok"},
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "inspect", Want: "queued=[b a] inflight=[] dead=[] ok"},
	}},
	{Name: "groups are ignored without FIFO", needs: func(e env) string {
		if e.caps.FIFO {
			return "the queue is FIFO with FIFO off"
		}
		return needsOrder(e)
	}, Steps: []Step{
		{Op: "enqueue", Arg: "g1@g", Want: "ok"},
		{Op: "enqueue", Arg: "g2@g", Want: "ok"},
		{Op: "lease", Dur: long, Want: "g1 a1 t1"},
		{Op: "lease", Dur: long, Want: "g2 a1 t1"},
	}},
	{Name: "expired lease is redelivered", needs: needsLease, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: short, Want: "a a1 t1"},
		{Op: "sleep", Dur: past},
		{Op: "inspect", Want: "queued=[a] inflight=[] dead=[] ok", Wait: true,
			alt: []alt{{when: func(e env) bool { return expiryOnLease(e) || pendingHeld(e) }, want: "queued=[] inflight=[a] dead=[] ok"}}},
		{Op: "lease", Dur: short, Want: "a a2 t2", Wait: true},
		{Op: "ack", D: 1, Want: "ok"},
		{Op: "lease", Dur: short, Want: "none"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[] ok", Wait: true},
	}},
	{Name: "the stale holder is refused", needs: needsFencing, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: short, Want: "a a1 t1"},
		{Op: "sleep", Dur: past},
		{Op: "lease", Dur: short, Want: "a a2 t2", Wait: true},
		{Op: "ack", D: 0, Want: "stale"},
		{Op: "nack", D: 0, Want: "stale"},
		{Op: "dead", D: 0, Want: "stale"},
		{Op: "ack", D: 1, Want: "ok"},
		{Op: "ack", D: 0, Want: "lost"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[] ok", Wait: true},
	}},
	{Name: "ack after expiry without redelivery is accepted", needs: needsLease, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: short, Want: "a a1 t1"},
		{Op: "sleep", Dur: past},
		{Op: "ack", D: 0, Want: "ok", alt: []alt{{when: expiryFrees, want: "lost"}, {when: lateAmbiguous, want: "ambiguous"}}},
		{Op: "lease", Dur: short, Want: "none", alt: []alt{{when: expiryFrees, want: "a a2 t2"}}},
	}},
	{Name: "nack at once", Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "nack", D: 0, Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a2 t2", Wait: true},
		{Op: "nack", D: 0, Want: "stale", alt: []alt{ifFenced, {when: nackIsNew, want: "lost"}}},
		{Op: "ack", D: 1, Want: "ok"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[] ok", Wait: true},
	}},
	// The delay (two short leases) is the margin of the lease that follows the
	// nack and must find nothing; the sleep outlasts it by as much as past
	// outlasts a short lease.
	{Name: "nack with delay", Options: Options{NackDelay: true}, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "nack", D: 0, Dur: 2 * short, Want: "ok"},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "inspect", Want: "queued=[a] inflight=[] dead=[] ok", alt: []alt{ifInspectHarmless, {when: pendingHeld, want: "queued=[] inflight=[a] dead=[] ok"}}},
		{Op: "sleep", Dur: short + past},
		{Op: "lease", Dur: long, Want: "a a2 t2", Wait: true},
		{Op: "nack", D: 0, Want: "stale", alt: []alt{ifFenced, {when: nackIsNew, want: "lost"}}},
		{Op: "nack", D: 1, Dur: short, Want: "ok"},
		// Not polled while the delay runs out: nats-server 2.9 may then deliver
		// the job with its old count (docs/nats.md); adapters/nats tests that.
		{Op: "sleep", Dur: past},
		{Op: "lease", Dur: long, Want: "a a3 t3", Wait: true},
		{Op: "ack", D: 2, Want: "ok"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[] ok", Wait: true},
	}},
	{Name: "a nack with a long delay hides the job unless the queue cannot delay", Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "nack", D: 0, Dur: time.Hour, Want: "ok"},
		{Op: "lease", Dur: long, Want: "none", alt: []alt{{when: noNackDelay, want: "a a2 t2"}}},
		{Op: "inspect", Want: "queued=[a] inflight=[] dead=[] ok",
			alt: []alt{{when: func(e env) bool { return noNackDelay(e) || pendingHeld(e) }, want: "queued=[] inflight=[a] dead=[] ok"}}},
	}},
	// The lease (6 short) must outlive the first sleep (4) and the extension
	// the second (4): two short leases of margin each, for the calls between
	// the sleeps; a broker that measures expiry by the claimer's lease (6) or
	// resets the lease it had (JetStream's AckWait) keeps the same margin.
	// Both sleeps together (8) outlast the lease and the claimer's: whatever
	// the calls take, without the extension the lease has run out.
	{Name: "extend keeps a live lease", needs: needsLease, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: 6 * short, Want: "a a1 t1"},
		{Op: "sleep", Dur: 4 * short},
		{Op: "extend", D: 0, Dur: 12 * short, Want: "ok"},
		{Op: "sleep", Dur: 4 * short},
		// Without the extension the lease would have run out by now.
		{Op: "lease", Dur: 6 * short, Want: "none"},
		{Op: "extend", D: 0, Dur: 6 * short, Want: "ok"},
		{Op: "inspect", Want: "queued=[] inflight=[a] dead=[] ok"},
		{Op: "ack", D: 0, Want: "ok"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[] ok", Wait: true},
	}},
	{Name: "extend after expiry, redelivery or nack is refused", needs: needsLease, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: short, Want: "a a1 t1"},
		{Op: "sleep", Dur: past},
		{Op: "extend", D: 0, Dur: short, Want: "lost", alt: []alt{{when: extendExpired, want: "ok", also: true}}},
		{Op: "sleep", Dur: past}, // an extension that succeeded runs out too
		{Op: "lease", Dur: short, Want: "a a2 t2", Wait: true},
		{Op: "extend", D: 0, Dur: short, Want: "stale", alt: []alt{ifFenced}},
		{Op: "nack", D: 1, Dur: time.Hour, Want: "ok"},
		{Op: "extend", D: 1, Dur: short, Want: "lost", alt: []alt{ifFenced}},
		{Op: "lease", Dur: short, Want: "none", alt: []alt{{when: noNackDelay, want: "a a3 t3"}}},
	}},
	{Name: "dead letter moves the job", Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "enqueue", Arg: "b", Want: "ok"},
		{Op: "dead", D: 0, Want: "ok"},
		{Op: "dead", D: 0, Want: "lost", alt: []alt{ifFenced}},
		{Op: "ack", D: 0, Want: "lost", alt: []alt{ifFenced}},
		{Op: "inspect", Want: "queued=[b] inflight=[] dead=[a] ok", Wait: true, alt: []alt{ifInspectHarmless}},
		{Op: "lease", Dur: long, Want: "b a1 t1"},
		{Op: "ack", D: 1, Want: "ok"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[a] ok", Wait: true},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[a] ok"}, // Inspect leaves the dead letters as they were
	}},
	{Name: "a crash loop is counted: every redelivery is a delivery", needs: needsExactCount, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: short, Want: "a a1 t1"},
		{Op: "sleep", Dur: past},
		{Op: "lease", Dur: short, Want: "a a2 t2", Wait: true},
		{Op: "sleep", Dur: past},
		{Op: "lease", Dur: short, Want: "a a3 t3", Wait: true},
		{Op: "nack", D: 2, Want: "ok"},
		{Op: "lease", Dur: short, Want: "a a4 t4", Wait: true},
		{Op: "dead", D: 3, Want: "ok"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[a] ok", Wait: true},
	}},
	{Name: "delivery limit dead-letters on lease", Options: Options{DeliveryLimit: 2}, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "nack", D: 0, Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a2 t2", Wait: true},
		{Op: "nack", D: 1, Want: "ok"},
		{Op: "enqueue", Arg: "b", Want: "ok"},
		{Op: "lease", Dur: long, Want: "b a1 t1", Wait: true},
		{Op: "inspect", Want: "queued=[] inflight=[b] dead=[a] moved=[a:dead_lettered] ok", Wait: true},
		{Op: "ack", D: 1, Want: "lost", alt: []alt{ifFenced}},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "ack", D: 2, Want: "ok"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[a] moved=[a:dead_lettered] ok", Wait: true},
	}},
	// The broker's own dead letter is evidence; the pipeline's is in the
	// history. Inspect tells them apart.
	{Name: "the broker's dead letter is listed as moved, the pipeline's is not", Options: Options{DeliveryLimit: 2}, Steps: []Step{
		{Op: "enqueue", Arg: "a", Want: "ok"},
		{Op: "enqueue", Arg: "b", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "dead", D: 0, Want: "ok"},
		{Op: "lease", Dur: long, Want: "b a1 t1", Wait: true},
		{Op: "nack", D: 1, Want: "ok"},
		{Op: "lease", Dur: long, Want: "b a2 t2", Wait: true},
		{Op: "nack", D: 2, Want: "ok"},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[a b] moved=[b:dead_lettered] ok", Wait: true},
	}},
	{Name: "FIFO delivers a group in order, one at a time", Options: Options{FIFO: true}, Steps: []Step{
		{Op: "enqueue", Arg: "g1@g", Want: "ok"},
		{Op: "enqueue", Arg: "g2@g", Want: "ok"},
		{Op: "enqueue", Arg: "h1@h", Want: "ok"},
		{Op: "enqueue", Arg: "u", Want: "ok"},
		{Op: "enqueue", Arg: "h2@h", Want: "ok"},
		{Op: "lease", Dur: long, Want: "g1 a1 t1"},
		{Op: "lease", Dur: long, Want: "h1 a1 t1"},
		{Op: "lease", Dur: long, Want: "u a1 t1"},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "ack", D: 1, Want: "ok"},
		{Op: "lease", Dur: long, Want: "h2 a1 t1", Wait: true},
		{Op: "ack", D: 0, Want: "ok"},
		{Op: "lease", Dur: long, Want: "g2 a1 t1", Wait: true},
	}},
	{Name: "FIFO nack redelivers the head before the rest of its group", Options: Options{FIFO: true}, Steps: []Step{
		{Op: "enqueue", Arg: "a@g", Want: "ok"},
		{Op: "enqueue", Arg: "b@g", Want: "ok"},
		{Op: "enqueue", Arg: "c", Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a1 t1"},
		{Op: "lease", Dur: long, Want: "c a1 t1"},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "nack", D: 0, Want: "ok"},
		{Op: "lease", Dur: long, Want: "a a2 t2", Wait: true},
		{Op: "ack", D: 2, Want: "ok"},
		{Op: "ack", D: 1, Want: "ok"},
		{Op: "lease", Dur: long, Want: "b a1 t1", Wait: true},
		{Op: "ack", D: 3, Want: "ok"},
		{Op: "inspect", Want: "queued=[] inflight=[] dead=[] ok", Wait: true},
	}},
	{Name: "FIFO head redelivered after expiry before the rest of its group", Options: Options{FIFO: true}, needs: needsLease, Steps: []Step{
		{Op: "enqueue", Arg: "g1@g", Want: "ok"},
		{Op: "enqueue", Arg: "g2@g", Want: "ok"},
		{Op: "lease", Dur: short, Want: "g1 a1 t1"},
		{Op: "sleep", Dur: past},
		{Op: "lease", Dur: long, Want: "g1 a2 t2", Wait: true},
		{Op: "nack", D: 1, Dur: time.Hour, Want: "ok"},
		{Op: "lease", Dur: long, Want: "none"},
		{Op: "inspect", Want: "queued=[g1 g2] inflight=[] dead=[] ok"},
	}},
	{Name: "FIFO with a delivery limit moves on past a dead head", Options: Options{FIFO: true, DeliveryLimit: 1}, Steps: []Step{
		{Op: "enqueue", Arg: "g1@g", Want: "ok"},
		{Op: "enqueue", Arg: "g2@g", Want: "ok"},
		{Op: "lease", Dur: long, Want: "g1 a1 t1"},
		{Op: "nack", D: 0, Want: "ok"},
		{Op: "lease", Dur: long, Want: "g2 a1 t1", Wait: true},
		{Op: "inspect", Want: "queued=[] inflight=[g2] dead=[g1] moved=[g1:dead_lettered] ok", Wait: true},
	}},
}
