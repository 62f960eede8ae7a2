package contracts

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/durachk/durachk/history"
)

var update = flag.Bool("update", false, "rewrite the recorded histories in testdata/")

// fixture is one recorded run: its history in testdata/<name>.jsonl and its
// final state and check options in testdata/<name>.final.json. The checker
// must keep finding want in it, however the engine or the pipeline change.
type fixture struct {
	name     string
	contract string
	sabotage string     // "" for the reference pipeline
	want     []Property // empty: the run is clean
}

var fixtures = []fixture{
	{name: "fencing-zombie-no-fence-check", contract: "fencing.zombie", sabotage: "no-fence-check", want: []Property{PropStaleCommit}},
	{name: "outbox-atomic-dual-write", contract: "outbox.atomic", sabotage: "dual-write", want: []Property{PropOutboxOrphan}},
	{name: "tenant-isolation-key-without-tenant", contract: "tenant.isolation", sabotage: "key-without-tenant", want: []Property{PropTenantKey, PropTenantShared, PropSilentReuse}},
	{name: "cancel-terminal-deadline-ignored", contract: "cancel.terminal", sabotage: "deadline-ignored", want: []Property{PropAfterDeadline}},
	{name: "dlq-redacted-raw-error", contract: "dlq.redacted", sabotage: "raw-error-in-dlq", want: []Property{PropDLQLeak}},
	{name: "order-fifo-break-order", contract: "order.fifo", sabotage: "break-order", want: []Property{PropOrder}},
	{name: "lease-redelivery-clean", contract: "lease.redelivery"},
	{name: "partition-ambiguous-clean", contract: "partition.ambiguous"},
}

// recorded is the content of a .final.json file.
type recorded struct {
	Contract string       `json:"contract"`
	Sabotage string       `json:"sabotage,omitempty"`
	Seed     uint64       `json:"seed"`
	Final    Final        `json:"final"`
	Check    CheckOptions `json:"check"`
}

func fixturePaths(name string) (ops, final string) {
	return filepath.Join("testdata", name+".jsonl"), filepath.Join("testdata", name+".final.json")
}

// record runs the fixture's contract on the embedded target with seed 1 and
// writes its history and final state. Run with: go test ./contracts -run TestFixtures -update
func record(t *testing.T, fx fixture) {
	t.Helper()
	c, err := Lookup(fx.contract)
	if err != nil {
		t.Fatal(err)
	}
	run := Run{Contract: c.ID, Scenario: c.Scenario(1, DefaultJobs), Seed: 1}
	if fx.sabotage != "" {
		i := slices.IndexFunc(c.Sabotages, func(s Sabotage) bool { return s.Name == fx.sabotage })
		if i < 0 {
			t.Fatalf("%s has no sabotage %q", c.ID, fx.sabotage)
		}
		run.Sabotage = &c.Sabotages[i]
	}
	ex, err := MemTarget{}.Execute(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	opsPath, finalPath := fixturePaths(fx.name)
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := history.WriteFile(opsPath, ex.Ops); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(recorded{Contract: c.ID, Sabotage: fx.sabotage, Seed: 1, Final: ex.Final, Check: ex.Check}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(finalPath, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFixtures(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			if *update {
				record(t, fx)
			}
			opsPath, finalPath := fixturePaths(fx.name)
			ops, err := history.ReadFile(opsPath)
			if err != nil {
				t.Fatalf("%v (record it with -update)", err)
			}
			b, err := os.ReadFile(finalPath)
			if err != nil {
				t.Fatal(err)
			}
			var rec recorded
			if err := json.Unmarshal(b, &rec); err != nil {
				t.Fatalf("%s: %v", finalPath, err)
			}
			if len(ops) < 100 {
				t.Fatalf("%s holds only %d operations", opsPath, len(ops))
			}
			vs, st, unknown := Check(ops, rec.Final, rec.Check)
			got := properties(vs)
			if len(fx.want) == 0 {
				if len(vs) > 0 {
					t.Fatalf("clean recorded run of %s now has violations %v: %s", fx.contract, got, vs[0].Message)
				}
				if len(unknown) > 0 {
					t.Fatalf("clean recorded run of %s is now undecided: %v", fx.contract, unknown)
				}
				if st.Accepted < DefaultJobs {
					t.Fatalf("only %d jobs accepted", st.Accepted)
				}
				return
			}
			for _, p := range fx.want {
				if !slices.Contains(got, p) {
					t.Errorf("the checker no longer finds %s in the recorded %s run with sabotage %s (found %v)", p, fx.contract, fx.sabotage, got)
				}
			}
			for _, v := range vs {
				if slices.Contains(fx.want, v.Property) && len(v.Witness) == 0 && v.Job != "" {
					t.Errorf("%s violation without a witness: %s", v.Property, v.Message)
				}
			}
		})
	}
}
