package reports

import (
	"bytes"
	"html"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
)

// TestSettingDescribe: each source reads as the reports write it.
func TestSettingDescribe(t *testing.T) {
	tests := []struct {
		s    Setting
		want string
	}{
		{Setting{Name: "appendonly", Value: "no", Source: SourceServer}, "appendonly=no (server)"},
		{Setting{Name: "save", Value: "", Source: SourceServer}, `save="" (server)`},
		{Setting{Name: "save", Value: "3600 1", Source: SourceKnob}, `save="3600 1" (knob)`},
		{Setting{Name: "appendfsync", Value: "always", Source: SourceKnob, ServerValue: "everysec"}, "appendfsync=always (knob; the server has everysec)"},
		{Setting{Name: "appendfsync", Value: "everysec", Source: SourceDefault, Note: "not readable from the server (CONFIG disabled or renamed)"},
			"appendfsync: not readable from the server (CONFIG disabled or renamed): default everysec used"},
		{Setting{Name: "sync_interval", Value: "60s", Source: SourceServer, Note: "nats-server 2.9.10 fsyncs every 60 s"}, "sync_interval=60s (server: nats-server 2.9.10 fsyncs every 60 s)"},
		{Setting{Name: "fsync", Value: "on", Source: SourceDefault}, "fsync=on (default)"},
	}
	for _, tt := range tests {
		if got := tt.s.Describe(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.s, got, tt.want)
		}
	}
}

// durabilityDoc is a run of durability.ack (violated), durability.power-loss
// (passed) and lease.redelivery on a Redis whose private instance took d.
func durabilityDoc(d *Durability) *Document {
	doc := NewDocument(1, "durachk run", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tgt := fakeTarget{name: "redis", on: "redis 7.2.4 (real processes)", caps: adapters.Capabilities{Broker: "redis"}}
	ti := DescribeTarget(tgt, "redis", "redis://127.0.0.1:6379/0")
	ti.Durability = d
	ti.Fingerprint = Fingerprint(ti)
	doc.AddTargetInfo(ti)
	doc.Add(contracts.Result{Target: "redis", Contract: "durability.ack", Verdict: contracts.Violated, Reason: "lost ×3: job-001 acknowledged, then gone",
		Broker: "redis", Planned: []string{"broker_crash @3s+2s"}})
	doc.Add(contracts.Result{Target: "redis", Contract: "durability.power-loss", Verdict: contracts.Pass, Broker: "redis", Planned: []string{"power_loss @6s+2s"}})
	doc.Add(contracts.Result{Target: "redis", Contract: "lease.redelivery", Verdict: contracts.Violated, Reason: "lost ×1", Broker: "redis",
		Planned: []string{"kill after_lease#1 w1"}})
	doc.Complete = true
	return doc
}

// TestDurabilityInReports: every rendering of a durability result names the
// settings its private instance ran with and where each came from (an
// unreadable one as such), and the version when the target's differs; a
// result that did not run on the private instance is not given them.
func TestDurabilityInReports(t *testing.T) {
	d := &Durability{Private: "redis 7.0.15", Server: "redis 7.2.4", Settings: []Setting{
		{Name: "appendonly", Value: "no", Source: SourceServer},
		{Name: "appendfsync", Value: "everysec", Source: SourceDefault, Note: "not readable from the server (CONFIG disabled or renamed)"},
		{Name: "save", Value: "", Source: SourceKnob, ServerValue: "3600 1"},
	}}
	doc := durabilityDoc(d)
	want := []string{"appendonly=no (server)", "appendfsync: not readable from the server (CONFIG disabled or renamed): default everysec used",
		`save="" (knob; the server has "3600 1")`, "on a private redis 7.0.15", "the target runs redis 7.2.4"}
	line := doc.DurabilityLine(doc.Results[0])
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("line %q lacks %q", line, w)
		}
	}
	if l := doc.DurabilityLine(doc.Results[2]); l != "" {
		t.Errorf("lease.redelivery (no broker fault) given %q", l)
	}
	for _, format := range []string{"md", "html", "json"} {
		var b bytes.Buffer
		if err := Render(&b, doc, format); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if format == "html" {
			out = html.UnescapeString(out)
		}
		if format == "json" {
			want = []string{`"name": "appendonly"`, `"source": "server"`, `"private": "redis 7.0.15"`, `"server_value": "3600 1"`}
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s lacks %q", format, w)
			}
		}
		if format == "md" && !strings.Contains(out, "**Durability settings:** on a private redis 7.0.15") {
			t.Errorf("md: the violation's details do not name the durability settings:\n%s", out)
		}
	}
	lines := doc.DurabilityLines()
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "redis: durability.ack, durability.power-loss ran on a private redis 7.0.15 with appendonly=no (server)") {
		t.Errorf("DurabilityLines %q", lines)
	}
	same := &Durability{Private: "redis 7.0.15", Server: "redis 7.0.15"}
	if l := same.Line(); strings.Contains(l, "the target runs") || !strings.Contains(l, "no setting of it is read") {
		t.Errorf("one version, no settings: %q", l)
	}
}

// TestFingerprintHasDurability: two servers configured otherwise are two
// configurations; where a value came from is not; a target without a
// private instance keeps the fingerprint it had.
func TestFingerprintHasDurability(t *testing.T) {
	base := TargetInfo{Kind: "redis", MeasuredOn: "redis 7.0.15", Endpoint: "local", Settings: map[string]string{"stream.maxlen": "5"}}
	fp := func(ds ...Setting) string {
		ti := base
		ti.Durability = &Durability{Private: "redis 7.0.15", Settings: ds}
		return Fingerprint(ti)
	}
	no := fp(Setting{Name: "appendonly", Value: "no", Source: SourceServer})
	yes := fp(Setting{Name: "appendonly", Value: "yes", Source: SourceServer})
	if no == yes {
		t.Errorf("appendonly no and yes have one fingerprint %s", no)
	}
	if knob := fp(Setting{Name: "appendonly", Value: "no", Source: SourceKnob}); knob != no {
		t.Errorf("the same value from a knob: %s, from the server %s", knob, no)
	}
	if Fingerprint(base) == no {
		t.Error("the private instance's settings do not enter the fingerprint")
	}
	// sha256("kind=redis\nversion=redis 7.0.15\nendpoint=local\nsetting.stream.maxlen=5\n"),
	// as before durability settings entered it.
	if got := Fingerprint(base); got != "512102623736" {
		t.Errorf("a target without a private instance: fingerprint %s, want the one it had", got)
	}
}

// TestDurabilitySourceValidated: a document whose setting names no source
// durachk writes is not one durachk wrote.
func TestDurabilitySourceValidated(t *testing.T) {
	for _, src := range []string{SourceServer, "guessed"} {
		doc := durabilityDoc(&Durability{Private: "redis 7.0.15", Settings: []Setting{{Name: "appendonly", Value: "no", Source: src}}})
		b, err := doc.MarshalIndent()
		if err != nil {
			t.Fatal(err)
		}
		_, err = DecodeJSON(b)
		if (err == nil) != (src == SourceServer) || (err != nil && !strings.Contains(err.Error(), `source "guessed"`)) {
			t.Errorf("source %q: %v", src, err)
		}
	}
}
