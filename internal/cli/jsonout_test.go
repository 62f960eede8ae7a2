package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
)

// list, doctor and compare with --format json write one JSON document each,
// which parses and says what their text says.
func TestCommandsJSON(t *testing.T) {
	ctx := context.Background()
	t.Run("list", func(t *testing.T) {
		var b bytes.Buffer
		if err := List(ctx, &b, RunOptions{Format: "json"}); err != nil {
			t.Fatal(err)
		}
		var got []struct {
			ID, Kind, Claim string
			Targets         []struct {
				Target    string
				Supported bool
				Why       string
			}
		}
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%v:\n%s", err, b.String())
		}
		if len(got) != len(contracts.Catalogue)+len(contracts.SeedScenarios) {
			t.Fatalf("%d entries, want every contract and seed scenario", len(got))
		}
		skipped := 0
		for _, e := range got {
			if e.ID == "" || e.Claim == "" || len(e.Targets) != 1 || e.Targets[0].Target != "mem" {
				t.Errorf("entry %+v: want id, claim and the mem target", e)
			}
			if !e.Targets[0].Supported {
				skipped++
				if e.Targets[0].Why == "" {
					t.Errorf("%s: unsupported on mem without a reason", e.ID)
				}
			}
		}
		if skipped == 0 {
			t.Errorf("no contract unsupported on mem: the replicated ones are")
		}
	})
	t.Run("doctor", func(t *testing.T) {
		var b bytes.Buffer
		if err := Doctor(ctx, RunOptions{Format: "json"}, &b); err != nil {
			t.Fatal(err)
		}
		var got []struct {
			Target    string
			Reachable bool
			Info      struct {
				Name       string
				MeasuredOn string `json:"measured_on"`
			}
			BrokerKill string                           `json:"broker_kill"`
			WillSkip   []struct{ Contract, Why string } `json:"will_skip"`
		}
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%v:\n%s", err, b.String())
		}
		if len(got) != 1 || !got[0].Reachable || got[0].Info.Name != "mem" || !strings.HasPrefix(got[0].Info.MeasuredOn, "mem") ||
			got[0].BrokerKill == "" || len(got[0].WillSkip) == 0 {
			t.Errorf("doctor: %+v", got)
		}
		b.Reset()
		if err := Doctor(ctx, RunOptions{Format: "yaml"}, &b); Code(err) != ExitConfig || b.Len() > 0 {
			t.Errorf("--format yaml: %v (exit %d), wrote %q: want a configuration error, nothing written", err, Code(err), b.String())
		}
	})
	t.Run("compare", func(t *testing.T) {
		var paths []string
		for _, target := range []string{"mem?name=plain", "mem?name=dl1&delivery_limit=1"} {
			dir := t.TempDir()
			if _, _, err := runCLI(t, RunOptions{Targets: []string{target}, Contracts: []string{"lease.redelivery"}, Seed: 1, Out: dir, Formats: []string{"json"}}); err != nil && Code(err) != ExitViolation {
				t.Fatal(err)
			}
			paths = append(paths, filepath.Join(dir, "result.json"))
		}
		var b bytes.Buffer
		if err := Compare(paths, "json", "", &b); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Contracts []string
			Columns   []struct{ Target string }
			Cells     [][]struct{ Verdict, Text, Link string }
			Differing []string
		}
		if err := json.Unmarshal(b.Bytes(), &got); err != nil {
			t.Fatalf("%v:\n%s", err, b.String())
		}
		if len(got.Contracts) != 1 || len(got.Columns) != 2 || got.Columns[1].Target != "dl1" || len(got.Differing) == 0 {
			t.Fatalf("matrix %+v: want one row, two columns that differ", got)
		}
		pass, dl1 := got.Cells[0][0], got.Cells[0][1]
		if pass.Verdict != "pass" || dl1.Verdict != "violation" || !strings.HasPrefix(dl1.Text, "moved_by_broker ×") || dl1.Link == "" {
			t.Errorf("cells %+v: want pass, and a violation named by its property and count with a link", got.Cells[0])
		}
	})
}
