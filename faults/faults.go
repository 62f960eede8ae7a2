// Package faults holds fault plans (data, generated from a seed) and the link
// model that the embedded target uses for network faults. Process and broker
// control for real targets live beside it.
package faults

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
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
	// LinkDown refuses every call on Link during [At, At+For).
	LinkDown Kind = "link_down"
	// ReplyLoss applies the call and loses its reply with probability Rate during
	// [At, At+For).
	ReplyLoss Kind = "reply_loss"
	// Flap switches Link down and up in a seeded pattern during [At, At+For).
	Flap Kind = "flap"
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

// Window is a period during which a link misbehaves.
type Window struct {
	From, To time.Time
	Down     bool
	Rate     float64 // reply loss probability when not down
}

// Link is one connection path of a run with its fault windows. Its random
// choices come from its own seeded generator. Safe for concurrent use.
type Link struct {
	Name    string
	mu      sync.Mutex
	windows []Window
	rng     *rand.Rand
}

// Links builds every link named in plan, relative to start, seeded by seed.
func Links(plan Plan, start time.Time, seed uint64) map[string]*Link {
	links := map[string]*Link{}
	get := func(name string) *Link {
		l, ok := links[name]
		if !ok {
			l = &Link{Name: name, rng: rand.New(rand.NewPCG(seed, uint64(len(links))+1))}
			links[name] = l
		}
		return l
	}
	for _, f := range plan.Faults {
		from, to := start.Add(f.At), start.Add(f.At+f.For)
		switch f.Kind {
		case LinkDown:
			l := get(f.Link)
			l.windows = append(l.windows, Window{From: from, To: to, Down: true})
		case ReplyLoss:
			l := get(f.Link)
			l.windows = append(l.windows, Window{From: from, To: to, Rate: f.Rate})
		case Flap:
			l := get(f.Link)
			r := rand.New(rand.NewPCG(seed, 0xF1A9))
			// Down and up in turn, starting down, each for a seeded 0.5–3 s.
			for t, down := from, true; t.Before(to); down = !down {
				d := time.Duration(500+r.IntN(2500)) * time.Millisecond
				if down {
					l.windows = append(l.windows, Window{From: t, To: minTime(t.Add(d), to), Down: true})
				}
				t = t.Add(d)
			}
		}
	}
	for _, l := range links {
		sort.Slice(l.windows, func(i, j int) bool { return l.windows[i].From.Before(l.windows[j].From) })
	}
	return links
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Down reports whether the link refuses calls at now.
func (l *Link) Down(now time.Time) bool {
	if l == nil {
		return false
	}
	for _, w := range l.windows {
		if w.Down && !now.Before(w.From) && now.Before(w.To) {
			return true
		}
	}
	return false
}

// LoseReply reports whether the reply of a call completed at now is lost.
func (l *Link) LoseReply(now time.Time) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.windows {
		if !w.Down && w.Rate > 0 && !now.Before(w.From) && now.Before(w.To) {
			return l.rng.Float64() < w.Rate
		}
	}
	return false
}
