// Package sim runs cooperative processes on a virtual clock, one at a time, in an
// order chosen by a seeded generator: the same seed gives the same interleaving,
// the same history and the same verdict. Each process is a goroutine that runs only
// while it holds the baton; it gives the baton back in Yield, Sleep or on exit.
//
// A Sim is not safe for concurrent use from outside its processes: create it,
// Spawn the first processes, then call Run from one goroutine.
package sim

import (
	"context"
	"math/rand/v2"
	"runtime"
	"time"
)

type state int

const (
	runnable state = iota
	sleeping
	dead
	done
)

// Sim is the scheduler and the virtual clock.
type Sim struct {
	now   time.Time
	rng   *rand.Rand
	procs []*Proc
	baton chan struct{}
	// ended counts processes whose goroutine returned since the last compact.
	ended int
}

// Proc is one simulated process.
type Proc struct {
	Name   string
	s      *Sim
	st     state
	wake   time.Time
	resume chan bool
	ctx    context.Context
	// finished is set once the goroutine has returned; a killed process that is
	// still parked in yield is dead but not finished.
	finished bool
}

type procKey struct{}

// Epoch is the virtual time at which every simulation starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// New returns a simulation whose scheduling choices come from seed.
func New(seed uint64) *Sim {
	return &Sim{now: Epoch, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), baton: make(chan struct{})}
}

// Now is the virtual time.
func (s *Sim) Now() time.Time { return s.now }

// Spawn starts fn as a new runnable process. It may be called before Run or from
// inside a running process.
func (s *Sim) Spawn(ctx context.Context, name string, fn func(ctx context.Context)) *Proc {
	p := &Proc{Name: name, s: s, resume: make(chan bool)}
	p.ctx = context.WithValue(ctx, procKey{}, p)
	s.procs = append(s.procs, p)
	go func() {
		if !<-p.resume {
			p.st, p.finished = done, true
			s.ended++
			s.baton <- struct{}{}
			return
		}
		defer func() {
			if p.st != dead {
				p.st = done
			}
			p.finished = true
			s.ended++
			s.baton <- struct{}{}
		}()
		fn(p.ctx)
	}()
	return p
}

// Current returns the process that ctx belongs to, or nil outside a simulation.
func Current(ctx context.Context) *Proc {
	p, _ := ctx.Value(procKey{}).(*Proc)
	return p
}

func (p *Proc) yield() {
	p.s.baton <- struct{}{}
	if !<-p.resume {
		runtime.Goexit()
	}
}

// Yield lets the scheduler run another process first. Outside a simulation it
// does nothing.
func Yield(ctx context.Context) {
	if p := Current(ctx); p != nil {
		p.yield()
	}
}

// Sleep advances the caller's virtual time by d; outside a simulation it sleeps
// for real, returning early with ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	p := Current(ctx)
	if p == nil {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.st = sleeping
	p.wake = p.s.now.Add(d)
	p.yield()
	return nil
}

// Exit ends the calling process at once, as a SIGKILL would: nothing after the
// call runs. Deferred calls of the process do run; processes must keep them free
// of effects on brokers and stores.
func Exit(ctx context.Context) {
	p := Current(ctx)
	if p == nil {
		panic("sim.Exit called outside a simulated process")
	}
	p.st = dead
	runtime.Goexit()
}

// Kill ends p: it is never scheduled again.
func (s *Sim) Kill(p *Proc) {
	if p.st != done {
		p.st = dead
	}
}

// Pause keeps p from running for d of virtual time (SIGSTOP, then SIGCONT).
func (s *Sim) Pause(p *Proc, d time.Duration) {
	if p.st == dead || p.st == done {
		return
	}
	w := s.now.Add(d)
	if p.st != sleeping || p.wake.Before(w) {
		p.wake = w
	}
	p.st = sleeping
}

// Alive reports whether p has neither exited nor been killed.
func (p *Proc) Alive() bool { return p.st == runnable || p.st == sleeping }

// Rand is the simulation's seeded generator, for processes that need randomness
// in step with the schedule.
func (s *Sim) Rand() *rand.Rand { return s.rng }

// Run schedules processes until stop returns true, no process can run, or the
// virtual clock would pass until. Every process still alive is then ended.
func (s *Sim) Run(until time.Time, stop func() bool) {
	var ready []*Proc
	for !stop() {
		ready = ready[:0]
		for _, p := range s.procs {
			if p.st == runnable {
				ready = append(ready, p)
			}
		}
		if len(ready) == 0 {
			var next time.Time
			for _, p := range s.procs {
				if p.st == sleeping && (next.IsZero() || p.wake.Before(next)) {
					next = p.wake
				}
			}
			if next.IsZero() || next.After(until) {
				break
			}
			s.now = next
			for _, p := range s.procs {
				if p.st == sleeping && !p.wake.After(next) {
					p.st = runnable
				}
			}
			continue
		}
		p := ready[s.rng.IntN(len(ready))]
		p.resume <- true
		<-s.baton
		s.compact()
	}
	for _, p := range s.procs {
		if !p.finished {
			p.st = dead
			p.resume <- false
			<-s.baton
		}
	}
	s.procs = nil
}

// compact drops finished processes so that a long run does not slow down;
// it looks only once a quarter of them may have finished, so that a step
// costs no scan of every process.
func (s *Sim) compact() {
	if len(s.procs) < 64 || s.ended < len(s.procs)/4 {
		return
	}
	s.ended = 0
	kept := s.procs[:0]
	for _, p := range s.procs {
		if !p.finished {
			kept = append(kept, p)
		}
	}
	s.procs = kept
}
