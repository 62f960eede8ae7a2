package pipeline

import (
	"errors"
	"strings"
	"testing"
)

func TestBuildKey(t *testing.T) {
	tests := []struct {
		name    string
		tenant  string
		doc     string
		version int
		want    string // "" when an error is wanted
	}{
		{name: "valid", tenant: "acme", doc: "doc-001", version: 1, want: "acme:doc-001:v1"},
		{name: "valid high version", tenant: "globex", doc: "inv/42", version: 17, want: "globex:inv/42:v17"},
		{name: "tenant with digits and dash", tenant: "a1-b2", doc: "d", version: 3, want: "a1-b2:d:v3"},
		{name: "tenant two chars (shortest)", tenant: "ab", doc: "d", version: 1, want: "ab:d:v1"},
		{name: "tenant 33 chars (longest)", tenant: "a" + strings.Repeat("b", 32), doc: "d", version: 1, want: "a" + strings.Repeat("b", 32) + ":d:v1"},
		{name: "document id with colon", tenant: "acme", doc: "x:v9", version: 2, want: "acme:x:v9:v2"},
		{name: "tenant 34 chars", tenant: "a" + strings.Repeat("b", 33), doc: "d", version: 1},
		{name: "tenant 1 char", tenant: "a", doc: "d", version: 1},
		{name: "tenant empty", tenant: "", doc: "d", version: 1},
		{name: "tenant uppercase", tenant: "Acme", doc: "d", version: 1},
		{name: "tenant uppercase inside", tenant: "acMe", doc: "d", version: 1},
		{name: "tenant leading digit", tenant: "1acme", doc: "d", version: 1},
		{name: "tenant leading dash", tenant: "-acme", doc: "d", version: 1},
		{name: "tenant with colon", tenant: "ac:me", doc: "d", version: 1},
		{name: "tenant with underscore", tenant: "ac_me", doc: "d", version: 1},
		{name: "tenant with trailing newline", tenant: "acme\n", doc: "d", version: 1},
		{name: "tenant with space", tenant: "ac me", doc: "d", version: 1},
		{name: "empty document", tenant: "acme", doc: "", version: 1},
		{name: "version 0", tenant: "acme", doc: "d", version: 0},
		{name: "version -1", tenant: "acme", doc: "d", version: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BuildKey(tt.tenant, tt.doc, tt.version)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("BuildKey(%q, %q, %d) = %q, want an error", tt.tenant, tt.doc, tt.version, got)
				}
				if !errors.Is(err, ErrInvalidKey) {
					t.Fatalf("BuildKey error %v does not wrap ErrInvalidKey", err)
				}
				if got != "" {
					t.Fatalf("BuildKey returned key %q together with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("BuildKey(%q, %q, %d): %v", tt.tenant, tt.doc, tt.version, err)
			}
			if got != tt.want {
				t.Fatalf("BuildKey = %q, want %q", got, tt.want)
			}
			tenant, ok := KeyTenant(got)
			if !ok || tenant != tt.tenant {
				t.Fatalf("KeyTenant(%q) = %q, %v; want %q, true", got, tenant, ok, tt.tenant)
			}
		})
	}
}

func TestKeyTenant(t *testing.T) {
	tests := []struct {
		name   string
		key    string
		want   string
		wantOK bool
	}{
		{name: "built key", key: "acme:doc-1:v1", want: "acme", wantOK: true},
		{name: "document with colons", key: "acme:a:b:c:v12", want: "acme", wantOK: true},
		{name: "document ending in :v", key: "acme:x:v:v2", want: "acme", wantOK: true},
		{name: "key without tenant", key: "doc-001:v1"},
		{name: "uppercase tenant", key: "Acme:doc:v1"},
		{name: "no colon", key: "acme"},
		{name: "empty", key: ""},
		{name: "empty document", key: "acme::v1"},
		{name: "no version", key: "acme:doc"},
		{name: "version 0", key: "acme:doc:v0"},
		{name: "negative version", key: "acme:doc:v-1"},
		{name: "non-numeric version", key: "acme:doc:vx"},
		{name: "empty version", key: "acme:doc:v"},
		{name: "one-letter tenant", key: "a:doc:v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := KeyTenant(tt.key)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("KeyTenant(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func FuzzBuildKey(f *testing.F) {
	f.Add("acme", "doc-001", 1)
	f.Add("globex", "a:b:v3", 7)
	f.Add("a", "d", 1)
	f.Add("Acme", "d", 1)
	f.Add("acme", "", 1)
	f.Add("acme", "d", 0)
	f.Add("acme", ":v", 1)
	f.Add("acme", "d:v", -5)
	f.Add("ab", "\x00", 1<<40)
	f.Fuzz(func(t *testing.T, tenant, doc string, version int) {
		key, err := BuildKey(tenant, doc, version)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("BuildKey(%q, %q, %d): error %v does not wrap ErrInvalidKey", tenant, doc, version, err)
			}
			if key != "" {
				t.Fatalf("BuildKey returned %q with error %v", key, err)
			}
			return
		}
		if !tenantRE.MatchString(tenant) || doc == "" || version < 1 {
			t.Fatalf("BuildKey(%q, %q, %d) accepted invalid parts: %q", tenant, doc, version, key)
		}
		got, ok := KeyTenant(key)
		if !ok || got != tenant {
			t.Fatalf("KeyTenant(BuildKey(%q, %q, %d) = %q) = %q, %v; want %q, true", tenant, doc, version, key, got, ok, tenant)
		}
	})
}

func TestIncarnation(t *testing.T) {
	tests := []struct {
		delivery, slot string
		inc            int
	}{
		{"w2/7", "w2", 0},
		{"w2.3/1", "w2", 3},
		{"w2.10/4", "w2", 10},
		{"relay", "relay", 0},
		{"host.example/9", "host.example", 0}, // not a number: part of the name
		{".3/1", ".3", 0},
		{"w1.-1/2", "w1.-1", 0},
	}
	for _, tt := range tests {
		slot, inc := Incarnation(DeliveryProcess(tt.delivery))
		if slot != tt.slot || inc != tt.inc {
			t.Errorf("Incarnation(DeliveryProcess(%q)) = %q, %d; want %q, %d", tt.delivery, slot, inc, tt.slot, tt.inc)
		}
	}
}
