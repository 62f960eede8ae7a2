package sim

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

var never = func() bool { return false }

func far() time.Time { return Epoch.Add(24 * time.Hour) }

// interleaving runs three processes that each yield n times and returns the
// order in which their steps ran.
func interleaving(seed uint64, n int) []string {
	s := New(seed)
	var order []string
	for _, name := range []string{"a", "b", "c"} {
		s.Spawn(context.Background(), name, func(ctx context.Context) {
			for i := range n {
				order = append(order, fmt.Sprintf("%s%d", name, i))
				Yield(ctx)
			}
		})
	}
	s.Run(far(), never)
	return order
}

func TestSameSeedSameInterleaving(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		a, b := interleaving(seed, 20), interleaving(seed, 20)
		if len(a) != 60 {
			t.Fatalf("seed %d: %d steps ran, want 60", seed, len(a))
		}
		if !slices.Equal(a, b) {
			t.Fatalf("seed %d: two runs interleave differently:\n%v\n%v", seed, a, b)
		}
	}
}

func TestDifferentSeedsDiffer(t *testing.T) {
	first := interleaving(1, 20)
	distinct := map[string]bool{fmt.Sprint(first): true}
	for seed := uint64(2); seed <= 8; seed++ {
		distinct[fmt.Sprint(interleaving(seed, 20))] = true
	}
	if len(distinct) < 2 {
		t.Fatal("seeds 1..8 all gave the same interleaving: the scheduler ignores the seed")
	}
	if len(distinct) < 6 {
		t.Errorf("seeds 1..8 gave only %d distinct interleavings of 60 steps", len(distinct))
	}
}

func TestEachProcessKeepsItsOwnOrder(t *testing.T) {
	order := interleaving(3, 10)
	next := map[byte]int{}
	for _, step := range order {
		want := fmt.Sprintf("%c%d", step[0], next[step[0]])
		if step != want {
			t.Fatalf("step %s ran out of order, want %s", step, want)
		}
		next[step[0]]++
	}
}

func TestSleepAdvancesVirtualTime(t *testing.T) {
	s := New(1)
	var woke []time.Duration
	s.Spawn(context.Background(), "sleeper", func(ctx context.Context) {
		for _, d := range []time.Duration{5 * time.Second, 0, time.Hour} {
			if err := Sleep(ctx, d); err != nil {
				t.Errorf("Sleep: %v", err)
			}
			woke = append(woke, s.Now().Sub(Epoch))
		}
	})
	realStart := time.Now()
	s.Run(far(), never)
	if want := []time.Duration{5 * time.Second, 5 * time.Second, time.Hour + 5*time.Second}; !slices.Equal(woke, want) {
		t.Fatalf("woke at %v, want %v", woke, want)
	}
	if real := time.Since(realStart); real > 5*time.Second {
		t.Fatalf("virtual sleep of an hour took %v of real time", real)
	}
}

func TestSleepersWakeInTimeOrder(t *testing.T) {
	s := New(7)
	var order []string
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"late", 3 * time.Second}, {"early", time.Second}, {"mid", 2 * time.Second}} {
		s.Spawn(context.Background(), p.name, func(ctx context.Context) {
			_ = Sleep(ctx, p.d)
			order = append(order, p.name)
		})
	}
	s.Run(far(), never)
	if want := []string{"early", "mid", "late"}; !slices.Equal(order, want) {
		t.Fatalf("woke in order %v, want %v", order, want)
	}
}

func TestSleepOutsideSimulation(t *testing.T) {
	start := time.Now()
	if err := Sleep(context.Background(), 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 5*time.Millisecond {
		t.Fatal("Sleep outside a simulation did not sleep")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep with a cancelled context = %v", err)
	}
	Yield(context.Background()) // does nothing, must not block
	if Current(context.Background()) != nil {
		t.Fatal("Current outside a simulation is not nil")
	}
}

func TestKillStopsAProcess(t *testing.T) {
	s := New(1)
	ticks := 0
	victim := s.Spawn(context.Background(), "victim", func(ctx context.Context) {
		for {
			ticks++
			_ = Sleep(ctx, time.Second)
		}
	})
	s.Spawn(context.Background(), "killer", func(ctx context.Context) {
		_ = Sleep(ctx, 3500*time.Millisecond)
		if !victim.Alive() {
			t.Error("victim dead before the kill")
		}
		s.Kill(victim)
		if victim.Alive() {
			t.Error("victim alive after Kill")
		}
	})
	s.Run(Epoch.Add(time.Minute), never)
	if ticks != 4 { // at 0, 1, 2 and 3 s
		t.Fatalf("victim ticked %d times, want 4", ticks)
	}
}

func TestExitRunsNoFurtherCode(t *testing.T) {
	s := New(1)
	after, deferred := false, false
	var p *Proc
	p = s.Spawn(context.Background(), "crasher", func(ctx context.Context) {
		defer func() { deferred = true }()
		if Current(ctx) != p {
			t.Error("Current does not return the running process")
		}
		Yield(ctx)
		Exit(ctx)
		after = true
	})
	other := 0
	s.Spawn(context.Background(), "other", func(ctx context.Context) {
		for range 5 {
			other++
			Yield(ctx)
		}
	})
	s.Run(far(), never)
	if after {
		t.Fatal("code after Exit ran")
	}
	if !deferred {
		t.Fatal("deferred calls of an exited process did not run")
	}
	if p.Alive() {
		t.Fatal("exited process is alive")
	}
	if other != 5 {
		t.Fatalf("the other process ran %d steps, want 5", other)
	}
}

func TestPauseDelays(t *testing.T) {
	s := New(1)
	var at []time.Duration
	worker := s.Spawn(context.Background(), "worker", func(ctx context.Context) {
		for range 4 {
			at = append(at, s.Now().Sub(Epoch))
			_ = Sleep(ctx, time.Second)
		}
	})
	s.Spawn(context.Background(), "controller", func(ctx context.Context) {
		_ = Sleep(ctx, 1500*time.Millisecond)
		s.Pause(worker, 10*time.Second)
	})
	s.Run(far(), never)
	// Steps at 0 s and 1 s; the step due at 2 s waits until the pause ends at 11.5 s.
	if want := []time.Duration{0, time.Second, 11500 * time.Millisecond, 12500 * time.Millisecond}; !slices.Equal(at, want) {
		t.Fatalf("worker ran at %v, want %v", at, want)
	}
}

func TestPauseShorterThanSleepKeepsSleep(t *testing.T) {
	s := New(1)
	var woke time.Duration
	sleeper := s.Spawn(context.Background(), "sleeper", func(ctx context.Context) {
		_ = Sleep(ctx, 10*time.Second)
		woke = s.Now().Sub(Epoch)
	})
	s.Spawn(context.Background(), "controller", func(ctx context.Context) {
		_ = Sleep(ctx, time.Second)
		s.Pause(sleeper, time.Second)
	})
	s.Run(far(), never)
	if woke != 10*time.Second {
		t.Fatalf("a short pause changed the wake-up: %v, want 10s", woke)
	}
}

func TestPauseRunnableProcess(t *testing.T) {
	s := New(1)
	var at []time.Duration
	target := s.Spawn(context.Background(), "target", func(ctx context.Context) {
		for range 100 {
			at = append(at, s.Now().Sub(Epoch))
			Yield(ctx)
		}
	})
	s.Spawn(context.Background(), "pauser", func(ctx context.Context) {
		s.Pause(target, 4*time.Second)
	})
	s.Run(far(), never)
	if len(at) != 100 {
		t.Fatalf("target ran %d steps, want 100", len(at))
	}
	// Steps before the pause ran at 0 s, every step after it at 4 s.
	paused := slices.Index(at, 4*time.Second)
	if paused < 0 {
		t.Fatalf("the pause of a runnable process did not delay it: %v", at)
	}
	for i, d := range at {
		if (i < paused && d != 0) || (i >= paused && d != 4*time.Second) {
			t.Fatalf("step %d ran at %v", i, d)
		}
	}
}

func TestRunEndsAtUntil(t *testing.T) {
	s := New(1)
	ticks := 0
	s.Spawn(context.Background(), "ticker", func(ctx context.Context) {
		for {
			ticks++
			_ = Sleep(ctx, time.Second)
		}
	})
	s.Run(Epoch.Add(10*time.Second), never)
	if ticks != 11 { // 0 … 10 s inclusive
		t.Fatalf("ticked %d times, want 11", ticks)
	}
	if now := s.Now().Sub(Epoch); now != 10*time.Second {
		t.Fatalf("virtual clock at %v after Run, want 10s", now)
	}
}

func TestRunEndsWhenStopSaysSo(t *testing.T) {
	s := New(1)
	ticks := 0
	s.Spawn(context.Background(), "ticker", func(ctx context.Context) {
		for {
			ticks++
			_ = Sleep(ctx, time.Second)
		}
	})
	s.Run(far(), func() bool { return ticks >= 3 })
	if ticks != 3 {
		t.Fatalf("ticked %d times, want 3", ticks)
	}
}

func TestRunEndsWhenNothingCanRun(t *testing.T) {
	s := New(1)
	s.Spawn(context.Background(), "short", func(ctx context.Context) { _ = Sleep(ctx, time.Second) })
	done := make(chan struct{})
	go func() { s.Run(far(), never); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once every process finished")
	}
	if s.Now() != Epoch.Add(time.Second) {
		t.Fatalf("clock at %v", s.Now())
	}
}

func TestSpawnFromInsideAProcess(t *testing.T) {
	s := New(1)
	childRan := false
	s.Spawn(context.Background(), "parent", func(ctx context.Context) {
		s.Spawn(ctx, "child", func(ctx context.Context) {
			if Current(ctx).Name != "child" {
				t.Error("child context names the wrong process")
			}
			childRan = true
		})
	})
	s.Run(far(), never)
	if !childRan {
		t.Fatal("a process spawned by a process never ran")
	}
}

func TestRandIsSeeded(t *testing.T) {
	a, b := New(9).Rand().Uint64(), New(9).Rand().Uint64()
	if a != b {
		t.Fatal("same seed, different Rand")
	}
	if New(10).Rand().Uint64() == a {
		t.Fatal("different seeds, same Rand")
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for seed := uint64(1); seed <= 20; seed++ {
		s := New(seed)
		var ps []*Proc
		for i := range 30 {
			ps = append(ps, s.Spawn(context.Background(), fmt.Sprint("p", i), func(ctx context.Context) {
				switch i % 4 {
				case 0: // sleeps forever: ended by until
					for {
						_ = Sleep(ctx, time.Second)
					}
				case 1: // exits
					Yield(ctx)
					Exit(ctx)
				case 2: // finishes
					Yield(ctx)
				case 3: // parks, gets killed
					for {
						_ = Sleep(ctx, 500*time.Millisecond)
					}
				}
			}))
		}
		s.Spawn(context.Background(), "killer", func(ctx context.Context) {
			_ = Sleep(ctx, 2*time.Second)
			for i := 3; i < len(ps); i += 4 {
				s.Kill(ps[i])
			}
		})
		// A process spawned but never scheduled: Run stops at once.
		s2 := New(seed)
		s2.Spawn(context.Background(), "never", func(ctx context.Context) { t.Error("ran") })
		s2.Run(far(), func() bool { return true })
		s.Run(Epoch.Add(10*time.Second), never)
	}
	var after int
	for range 100 { // goroutines that handed the baton back may still be returning
		after = runtime.NumGoroutine()
		if after <= before+2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if after > before+2 {
		buf := make([]byte, 1<<16)
		n := runtime.Stack(buf, true)
		t.Fatalf("goroutines before %d, after %d: leak\n%s", before, after, buf[:n])
	}
}
