package cli

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/durachk/durachk/contracts"
)

// TestTrialSetKeepsWhatTheResultNeeds: trials arriving in any order give
// the result contracts.Aggregate gives of all of them kept whole, while at
// most three (the first violating, the first unknown, the last) keep their
// details and recordings.
func TestTrialSetKeepsWhatTheResultNeeds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		verdicts string // one letter a trial: p(ass), v(iolated), u(nknown)
	}{
		{"all pass", "pppppppp"},
		{"one violation", "pppvpppp"},
		{"violations and unknowns", "puvpuvpp"},
		{"unknown first", "upppppuv"},
		{"one trial", "v"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole []contracts.Result
			for i, v := range tc.verdicts {
				r := contracts.Result{Contract: "c", Target: "mem", Seed: uint64(i + 1), Verdict: map[rune]contracts.Verdict{'p': contracts.Pass, 'v': contracts.Violated, 'u': contracts.Unknown}[v],
					Reason: fmt.Sprintf("reason %d", i), HistoryLen: 100 + i}
				r.Trials = []contracts.Trial{{Seed: r.Seed, Verdict: r.Verdict, Reason: r.Reason}}
				whole = append(whole, r)
			}
			want := contracts.Aggregate(whole)
			for seed := uint64(1); seed <= 5; seed++ {
				var s trialSet
				for _, k := range rand.New(rand.NewPCG(seed, 0)).Perm(len(whole)) {
					s.add(k, whole[k], &recorder{})
				}
				if len(s.recs) > 3 {
					t.Errorf("order %d: %d trials kept whole, want at most 3", seed, len(s.recs))
				}
				var runs []contracts.Result
				for k := range len(whole) {
					runs = append(runs, s.runs[k])
				}
				got := contracts.Aggregate(runs)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("order %d: %+v, want %+v", seed, got, want)
				}
			}
		})
	}
}

// TestTasksAreLazy: tasks come one at a time in the order they start (a
// private RabbitMQ node's first, the trials of a contract together), and a
// billion trials cost nothing until they are taken.
func TestTasksAreLazy(t *testing.T) {
	mem, err := resolveMem("mem")
	if err != nil {
		t.Fatal(err)
	}
	amqp := &target{Target: mem.Target, spec: "amqp://x", info: mem.info}
	amqp.info.Kind = "amqp"
	cs, err := contracts.Select([]string{"tenant.isolation", "durability.ack"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for tk := range tasks([]*target{mem, amqp}, cs, 2) {
		got = append(got, fmt.Sprintf("%s/%s/%d/%d", tk.t.info.Kind, tk.c.ID, tk.trial, tk.slot))
	}
	want := []string{"amqp/durability.ack/0/3", "amqp/durability.ack/1/3", "mem/durability.ack/0/1", "mem/durability.ack/1/1",
		"mem/tenant.isolation/0/0", "mem/tenant.isolation/1/0", "amqp/tenant.isolation/0/2", "amqp/tenant.isolation/1/2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	n := 0
	for tk := range tasks([]*target{mem, amqp}, cs, 1_000_000_000) {
		if tk.trial != n {
			t.Fatalf("task %d is trial %d", n, tk.trial)
		}
		if n++; n == 1000 {
			break
		}
	}
}
