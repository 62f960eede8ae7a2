package reports

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
)

func TestDifferingSettings(t *testing.T) {
	tests := []struct {
		name string
		in   []map[string]string
		want []string
	}{
		{"none", nil, nil},
		{"one target", []map[string]string{{"appendfsync": "always"}}, nil},
		{"the same settings", []map[string]string{{"appendfsync": "always", "a": "1"}, {"a": "1", "appendfsync": "always"}}, nil},
		{"one value differs", []map[string]string{{"appendfsync": "always", "a": "1"}, {"appendfsync": "everysec", "a": "1"}}, []string{"appendfsync"}},
		{"a key one lacks", []map[string]string{{"a": "1"}, {"a": "1", "wait.replicas": "1"}}, []string{"wait.replicas"}},
		{"no settings and some", []map[string]string{nil, {"b": "2", "a": "1"}}, []string{"a", "b"}},
		{"the third differs", []map[string]string{{"a": "1"}, {"a": "1"}, {"a": "2"}}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DifferingSettings(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("DifferingSettings = %v, want %v", got, tt.want)
			}
		})
	}
}

// redisRun is a document of one Redis target with appendfsync set to fsync,
// named redis like every other: only its settings tell it apart.
func redisRun(fsync string, v contracts.Verdict) *Document {
	d := NewDocument(1, "durachk run", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tgt := fakeTarget{name: "redis", on: "redis 7.0.15 (real processes)", caps: adapters.Capabilities{Broker: "redis"}}
	d.AddTargetInfo(DescribeTarget(tgt, "redis", "redis://127.0.0.1:6379/0?private-instance.appendfsync="+fsync+"&stream.maxlen=0"))
	d.Add(contracts.Result{Target: "redis", Contract: "durability.power-loss", Verdict: v, Broker: "redis"})
	d.Add(contracts.Result{Target: "redis", Contract: "lease.redelivery", Verdict: contracts.Pass, Broker: "redis"})
	d.Complete = true
	return d
}

// Two Redis runs that differ only in appendfsync: every rendering of their
// matrix names the setting and each column's value; a setting both share is
// not named.
func TestCompareNamesTheSettingsThatDiffer(t *testing.T) {
	m := NewMatrix([]*Document{redisRun("everysec", contracts.Violated), redisRun("always", contracts.Pass)}, []string{"a/result.json", "b/result.json"})
	if !slices.Equal(m.Differing, []string{"private-instance.appendfsync"}) {
		t.Fatalf("Differing = %v, want the one setting that differs", m.Differing)
	}
	if got := m.Columns[0].Differs; !slices.Equal(got, []string{"private-instance.appendfsync=everysec"}) {
		t.Errorf("column 0 differs by %v", got)
	}
	var text, md, html bytes.Buffer
	if err := WriteMatrixText(&text, m); err != nil {
		t.Fatal(err)
	}
	if err := WriteMatrixMarkdown(&md, m); err != nil {
		t.Fatal(err)
	}
	if err := WriteMatrixHTML(&html, m); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": text.String(), "md": md.String(), "html": html.String()} {
		for _, want := range []string{"private-instance.appendfsync=everysec", "private-instance.appendfsync=always"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s names no %q:\n%s", name, want, out)
			}
		}
		// The heading of the table names the values, not only the list below it.
		head, _, _ := strings.Cut(out, "\n")
		if name == "html" {
			_, head, _ = strings.Cut(out, `<table class="matrix">`)
			head, _, _ = strings.Cut(head, "</tr>")
		}
		if !strings.Contains(head, "appendfsync=everysec") || !strings.Contains(head, "appendfsync=always") {
			t.Errorf("%s: the columns' headings do not tell them apart: %s", name, head)
		}
		if strings.Contains(head, "stream.maxlen") {
			t.Errorf("%s: the heading names a setting both columns share: %s", name, head)
		}
	}
}

func TestCompareColumnsOfOtherKindsAndVersions(t *testing.T) {
	a, b := redisRun("always", contracts.Pass), redisRun("always", contracts.Pass)
	b.Targets[0].MeasuredOn = "redis 7.2.4 (real processes)"
	c := NewDocument(1, "durachk run", time.Time{})
	c.AddTargetInfo(DescribeTarget(fakeTarget{name: "mem", on: "mem", caps: adapters.Capabilities{Broker: "mem"}}, "mem", ""))
	m := NewMatrix([]*Document{a, b, c}, nil)
	if !slices.Equal(m.Differing, []string{"broker version"}) {
		t.Errorf("Differing = %v, want the broker version alone (settings agree; mem is of another kind)", m.Differing)
	}
	if !slices.Contains(m.Columns[1].Differs, "on redis 7.2.4 (real processes)") || len(m.Columns[2].Differs) != 0 {
		t.Errorf("columns differ by %v, %v, %v", m.Columns[0].Differs, m.Columns[1].Differs, m.Columns[2].Differs)
	}
}
