// Package faults holds fault plans (data, generated from a seed) and the link
// model that the embedded target uses for network faults. Process and broker
// control for real targets live beside it.
package faults

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind of a fault.
type Kind string

const (
	// CrashAt kills the process that reaches Point for the Nth time (counted over
	// all processes), or every time a job flagged poison reaches it.
	CrashAt Kind = "crash_at"
	// PauseAt stops the process that reaches Point for the Nth time for For
	// (SIGSTOP, then SIGCONT): a zombie once its lease has expired.
	PauseAt Kind = "pause_at"
	// Kill kills worker Process at offset At (a supervisor restarts it).
	Kill Kind = "kill"
	// BrokerCrash kills the broker at At; it is back after For.
	BrokerCrash Kind = "broker_crash"
	// PowerLoss cuts the power of the broker's machine at At: the broker is
	// killed and what it never fsynced is lost (its data directory is on a lazy
	// file system); it is back after For, on what survived.
	PowerLoss Kind = "power_loss"
	// LinkDown refuses every call on Link during [At, At+For).
	LinkDown Kind = "link_down"
	// ReplyLoss applies the call and loses its reply with probability Rate during
	// [At, At+For).
	ReplyLoss Kind = "reply_loss"
	// Flap switches Link down and up in a seeded pattern during [At, At+For).
	Flap Kind = "flap"
	// Blackhole answers nothing on Link during [At, At+For): live connections
	// stall, new ones are accepted and held; both go through once it ends.
	Blackhole Kind = "blackhole"
	// Latency delays every chunk on Link by Delay plus up to Jitter (seeded).
	Latency Kind = "latency"
	// Reset cuts connections mid-stream with probability Rate per chunk.
	Reset Kind = "reset"
)

// Links of a run.
const (
	LinkBroker  = "broker"  // every process → broker
	LinkStore   = "store"   // every process → effect store
	LinkChannel = "channel" // relay → consumer
)

// Fault is one entry of a plan.
type Fault struct {
	Kind    Kind          `json:"kind"`
	Point   string        `json:"point,omitempty"`
	Nth     int           `json:"nth,omitempty"`
	Process string        `json:"process,omitempty"`
	Link    string        `json:"link,omitempty"`
	At      time.Duration `json:"at,omitempty"`
	For     time.Duration `json:"for,omitempty"`
	Rate    float64       `json:"rate,omitempty"`
	Delay   time.Duration `json:"delay,omitempty"`
	Jitter  time.Duration `json:"jitter,omitempty"`
	// Match narrows ReplyLoss to replies of requests that contain it (case
	// insensitive), e.g. "commit" on the Postgres store link: the reply of COMMIT.
	Match string `json:"match,omitempty"`
	// ID names the fault among processes that share a plan (real targets): the
	// first process to claim it fires it.
	ID int `json:"id,omitempty"`
	// Node selects the nodes of a node fault (NodeKill, NodePartition): a
	// selector (SelPrimary, SelMinority, ...) or a node's name.
	Node string `json:"node,omitempty"`
}

func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(string(f.Kind))
	if f.Point != "" {
		fmt.Fprintf(&b, " %s#%d", f.Point, f.Nth)
	}
	if f.Process != "" {
		b.WriteString(" " + f.Process)
	}
	if f.Link != "" {
		b.WriteString(" " + f.Link)
	}
	if f.Node != "" {
		b.WriteString(" " + f.Node)
	}
	if f.At > 0 || f.For > 0 {
		fmt.Fprintf(&b, " @%s+%s", f.At, f.For)
	}
	if f.Rate > 0 {
		fmt.Fprintf(&b, " %.0f%%", f.Rate*100)
	}
	return b.String()
}

// Plan is a named list of faults.
type Plan struct {
	Name   string  `json:"name"`
	Faults []Fault `json:"faults"`
	// PinProducer, on a replicated target, connects the producer straight to
	// the node this selector names when the run starts, and keeps it there:
	// a client on that node's side of a partition, or on a deposed primary.
	PinProducer string `json:"pin_producer,omitempty"`
	// KillAfterLease, if set, holds the primary's kill (NodeKill of
	// SelPrimary) until a worker was handed a job no longer than this
	// before it: with replication lagging by more, that delivery (its lease
	// and token) is on no replica yet when the primary dies.
	KillAfterLease time.Duration `json:"kill_after_lease,omitempty"`
	// KillAfterAck, if set, anchors the faults that threaten what the
	// broker acknowledged to an acknowledgement: the primary's kill, a
	// broker kill (BrokerCrash) and a power cut (PowerLoss) wait, from their
	// time, for an enqueue the broker acknowledged, and fire AnchorDelay
	// after it, provided the newest acknowledgement is still younger than
	// KillAfterAck then. With replication lagging by more, that write is
	// still in the lagging link; on a broker that syncs its log every second,
	// it is not on the disk yet. A scenario time does not stretch the
	// broker's own timers: an anchor keeps the fault where it threatens the
	// write whatever the machine's load.
	KillAfterAck time.Duration `json:"kill_after_ack,omitempty"`
}

// AnchorDelay is how long after the acknowledgement it is anchored to
// (Plan.KillAfterAck, within) the i-th fault of a plan fires: drawn from
// the run's seed, in whole milliseconds from 1 ms to half of within, so that
// seeds try the cut at different distances from the write while the
// acknowledgement stays young.
func AnchorDelay(seed uint64, i int, within time.Duration) time.Duration {
	ms := max(int64(within/2/time.Millisecond), 1)
	r := rand.New(rand.NewPCG(seed, 0xac0+uint64(i)))
	return time.Duration(1+r.Int64N(ms)) * time.Millisecond
}

// AnchoredToAck reports whether fault f of plan p fires relative to an
// acknowledgement (Plan.KillAfterAck): the primary's kill, a broker kill or
// a power cut, in a plan that sets it.
func (p Plan) AnchoredToAck(f Fault) bool {
	if p.KillAfterAck <= 0 {
		return false
	}
	return f.Kind == BrokerCrash || f.Kind == PowerLoss || (f.Kind == NodeKill && f.Node == SelPrimary)
}

// Points tracks crash and pause points: which arrival fires which fault. Safe for
// concurrent use.
type Points struct {
	mu     sync.Mutex
	counts map[string]int
	faults []Fault
}

// NewPoints arms the CrashAt and PauseAt faults of plan.
func NewPoints(plan Plan) *Points {
	p := &Points{counts: map[string]int{}}
	for _, f := range plan.Faults {
		if f.Kind == CrashAt || f.Kind == PauseAt {
			p.faults = append(p.faults, f)
		}
	}
	return p
}

// Arrive counts an arrival at point and returns the fault it fires, if any.
func (p *Points) Arrive(point string) (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[point]++
	n := p.counts[point]
	for _, f := range p.faults {
		if f.Point == point && f.Nth == n {
			return f, true
		}
	}
	return Fault{}, false
}

// ArriveAll counts an arrival at point and returns every fault planned for it.
func (p *Points) ArriveAll(point string) []Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[point]++
	n := p.counts[point]
	var out []Fault
	for _, f := range p.faults {
		if f.Point == point && f.Nth == n {
			out = append(out, f)
		}
	}
	return out
}

// Window is a period during which a link misbehaves in one way.
type Window struct {
	From, To time.Time
	Kind     Kind
	Rate     float64 // ReplyLoss, Reset: probability per reply / per chunk
	Delay    time.Duration
	Jitter   time.Duration
	Match    string // ReplyLoss: only replies to requests containing it (lower case)
}

func (w Window) covers(now time.Time) bool { return !now.Before(w.From) && now.Before(w.To) }

// Link is one connection path of a run with its fault windows. Its random
// choices come from its own seeded generator. Safe for concurrent use.
type Link struct {
	Name    string
	mu      sync.Mutex
	windows []Window
	rng     *rand.Rand
	cut     atomic.Bool // held down by Cut, whatever the windows say
}

// Links builds every link named in plan, relative to start, seeded by seed.
func Links(plan Plan, start time.Time, seed uint64) map[string]*Link {
	return Schedule(Prepare(plan, seed), plan, start, seed)
}

// Prepare builds every link named in plan without its windows, for what must
// hold the links before the run's start is known (a cluster's proxies);
// Schedule fills them in.
func Prepare(plan Plan, seed uint64) map[string]*Link {
	links := map[string]*Link{}
	for _, f := range plan.Faults {
		switch f.Kind {
		case LinkDown, Blackhole, ReplyLoss, Latency, Reset, Flap:
			if _, ok := links[f.Link]; !ok {
				links[f.Link] = &Link{Name: f.Link, rng: rand.New(rand.NewPCG(seed, uint64(len(links))+1))}
			}
		}
	}
	return links
}

// Schedule sets the windows of plan's link faults, relative to start, on the
// links Prepare built (links may be in use). It returns links.
func Schedule(links map[string]*Link, plan Plan, start time.Time, seed uint64) map[string]*Link {
	if links == nil {
		links = Prepare(plan, seed)
	}
	windows := map[string][]Window{}
	for _, f := range plan.Faults {
		from, to := start.Add(f.At), start.Add(f.At+f.For)
		switch f.Kind {
		case LinkDown, Blackhole, ReplyLoss, Latency, Reset:
			windows[f.Link] = append(windows[f.Link], Window{From: from, To: to, Kind: f.Kind, Rate: f.Rate, Delay: f.Delay, Jitter: f.Jitter, Match: strings.ToLower(f.Match)})
		case Flap:
			r := rand.New(rand.NewPCG(seed, 0xF1A9))
			// Down and up in turn, starting down, each for a seeded 0.5–3 s.
			for t, down := from, true; t.Before(to); down = !down {
				d := time.Duration(500+r.IntN(2500)) * time.Millisecond
				if down {
					windows[f.Link] = append(windows[f.Link], Window{From: t, To: minTime(t.Add(d), to), Kind: LinkDown})
				}
				t = t.Add(d)
			}
		}
	}
	for name, ws := range windows {
		l := links[name]
		if l == nil {
			l = &Link{Name: name, rng: rand.New(rand.NewPCG(seed, uint64(len(links))+1))}
			links[name] = l
		}
		sort.Slice(ws, func(i, j int) bool { return ws[i].From.Before(ws[j].From) })
		l.mu.Lock()
		l.windows = ws
		l.mu.Unlock()
	}
	return links
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (l *Link) active(now time.Time, k Kind) *Window {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.windows {
		if w := l.windows[i]; w.Kind == k && w.covers(now) {
			return &w
		}
	}
	return nil
}

// Down reports whether the link is partitioned at now: new connections are
// refused and calls fail before they are applied.
func (l *Link) Down(now time.Time) bool { return l.active(now, LinkDown) != nil }

// Blackhole reports whether the link accepts and never answers at now.
func (l *Link) Blackhole(now time.Time) bool { return l.IsCut() || l.active(now, Blackhole) != nil }

func (l *Link) chance(now time.Time, k Kind) bool {
	w := l.active(now, k)
	if w == nil || w.Rate <= 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.Float64() < w.Rate
}

// LoseReply reports whether a reply completed at now is lost (seeded), for a
// request described by req (its bytes on a proxy, the operation's name on the
// embedded target); a window with Match loses only replies to matching requests.
func (l *Link) LoseReply(now time.Time, req []byte) bool {
	w := l.active(now, ReplyLoss)
	if w == nil || w.Rate <= 0 {
		return false
	}
	if w.Match != "" && !bytes.Contains(bytes.ToLower(req), []byte(w.Match)) {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.Float64() < w.Rate
}

// Reset reports whether the connection is cut mid-stream at now (seeded).
func (l *Link) Reset(now time.Time) bool { return l.chance(now, Reset) }

// Delay is the latency to add at now, with seeded jitter.
func (l *Link) Delay(now time.Time) time.Duration {
	w := l.active(now, Latency)
	if w == nil {
		return 0
	}
	d := w.Delay
	if w.Jitter > 0 {
		l.mu.Lock()
		d += time.Duration(l.rng.Int64N(int64(w.Jitter)))
		l.mu.Unlock()
	}
	return d
}

// Names returns the link names of a plan's network faults.
func (p Plan) LinkNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range p.Faults {
		if f.Link != "" && !seen[f.Link] {
			seen[f.Link] = true
			out = append(out, f.Link)
		}
	}
	return out
}
