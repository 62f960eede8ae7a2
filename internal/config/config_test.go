package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	Getenv = func(k string) (string, bool) {
		if k == "RABBIT_PASSWORD" {
			return "s3cr3t", true
		}
		return "", false
	}
	defer func() { Getenv = os.LookupEnv }()
	tests := []struct {
		name      string
		yaml      string
		wantURLs  []string
		wantNames []string
		wantSeed  uint64
		wantStore string
		wantErr   string
	}{
		{name: "design example", yaml: `
seed: 42
targets:
  - name: orders-rabbit
    url: amqp://guest:${RABBIT_PASSWORD}@127.0.0.1:5672/
    queue-arguments: {x-queue-type: quorum, x-delivery-limit: 5, x-dead-letter-exchange: dlx}
  - name: jobs-redis
    url: redis://127.0.0.1:6379
    stream: {maxlen: 100000, approximate: true}
    private-instance: {appendonly: "yes", appendfsync: everysec}
store: postgres://127.0.0.1:5432/test
`, wantSeed: 42, wantStore: "postgres://127.0.0.1:5432/test", wantNames: []string{"orders-rabbit", "jobs-redis"},
			wantURLs: []string{
				"amqp://guest:s3cr3t@127.0.0.1:5672/?name=orders-rabbit&queue-arguments.x-dead-letter-exchange=dlx&queue-arguments.x-delivery-limit=5&queue-arguments.x-queue-type=quorum",
				"redis://127.0.0.1:6379?name=jobs-redis&private-instance.appendfsync=everysec&private-instance.appendonly=yes&stream.approximate=true&stream.maxlen=100000",
			}},
		{name: "url with a query keeps it", yaml: "targets:\n  - url: postgres://127.0.0.1/test?sslmode=disable\n    fifo: false\n",
			wantNames: []string{""}, wantURLs: []string{"postgres://127.0.0.1/test?sslmode=disable&fifo=false"}},
		{name: "mem with knobs", yaml: "targets:\n  - {name: m, url: mem, delivery_limit: 3}\n",
			wantNames: []string{"m"}, wantURLs: []string{"mem?name=m&delivery_limit=3"}},
		{name: "unknown top-level key", yaml: "seed: 1\nstores: x\n", wantErr: `unknown key "stores"`},
		{name: "unset variable", yaml: "targets:\n  - url: amqp://g:${NOPE}@h/\n", wantErr: "NOPE is not set"},
		{name: "list knob", yaml: "targets:\n  - url: redis://h\n    save: [a, b]\n", wantErr: "save: a list is not a knob"},
		{name: "missing url", yaml: "targets:\n  - name: x\n", wantErr: "url is missing"},
		{name: "bad seed", yaml: "seed: -1\n", wantErr: "seed"},
		// Seeds are exact: the largest is kept, a fraction or one past it refused.
		{name: "seed 2^64-1", yaml: "seed: 18446744073709551615\n", wantSeed: 18446744073709551615},
		{name: "seed 1.5", yaml: "seed: 1.5\n", wantErr: `seed "1.5"`},
		{name: "seed 2^64", yaml: "seed: 18446744073709551616\n", wantErr: `seed "18446744073709551616"`},
		{name: "seed 1e3", yaml: "seed: 1e3\n", wantErr: `seed "1e3"`},
		{name: "duplicate name", yaml: "targets:\n  - {name: a, url: mem}\n  - {name: a, url: mem}\n", wantErr: `"a" used twice`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "s3cr3t") {
					t.Fatalf("err = %v, want a configuration error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var urls, names []string
			for _, tg := range c.Targets {
				urls, names = append(urls, tg.URL), append(names, tg.Name)
			}
			if !reflect.DeepEqual(urls, tc.wantURLs) || !reflect.DeepEqual(names, tc.wantNames) || c.Seed != tc.wantSeed || c.Store != tc.wantStore {
				t.Errorf("got urls %q names %q seed %d store %q\nwant urls %q names %q seed %d store %q", urls, names, c.Seed, c.Store, tc.wantURLs, tc.wantNames, tc.wantSeed, tc.wantStore)
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "durachk.yaml")
	if err := os.WriteFile(p, []byte("bogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("err = %v, want the file and the key named", err)
	}
}

// A config records the variables it refers to, with their values: a report
// writes a credential as the reference it came from.
func TestVarsReferenced(t *testing.T) {
	old := Getenv
	Getenv = func(k string) (string, bool) {
		v, ok := map[string]string{"RABBIT_PASSWORD": "s3cr3t", "HOST": "127.0.0.1"}[k]
		return v, ok
	}
	defer func() { Getenv = old }()
	c, err := Parse([]byte("targets:\n  - name: q\n    url: amqp://guest:${RABBIT_PASSWORD}@${HOST}:5672/\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Vars) != 2 || c.Vars["RABBIT_PASSWORD"] != "s3cr3t" || c.Vars["HOST"] != "127.0.0.1" {
		t.Errorf("vars %v: want RABBIT_PASSWORD and HOST with their values", c.Vars)
	}
}
