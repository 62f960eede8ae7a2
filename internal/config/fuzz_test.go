package config

import (
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
)

var configSeeds = []string{
	`seed: 42
targets:
  - name: orders-rabbit
    url: amqp://guest:${RABBIT_PASSWORD}@127.0.0.1:5672/
    queue-arguments: {x-queue-type: quorum, x-delivery-limit: 5, x-dead-letter-exchange: dlx}
  - name: jobs-redis
    url: redis://127.0.0.1:6379
    stream: {maxlen: 100000, approximate: true}
    private-instance: {appendonly: "yes", appendfsync: everysec}
store: postgres://127.0.0.1:5432/test
`,
	"targets:\n  - {name: m, url: mem, delivery_limit: 3}\n",
	"targets:\n  - url: postgres://127.0.0.1/test?sslmode=disable\n    fifo: false\n",
	"targets: []\n",
	"targets:\n  - url: a\n    url: b\n",
	"a: &a {x: 1, y: 1}\nb: &b {p: *a, q: *a}\ntargets:\n  - url: mem\n    k: *b\n",
	"targets:\n  - url: mem\n    k: [1, 2]\n",
	"seed: 1\n---\nseed: 2\n",
	"targets:\n  - url: redis://h\n    stream: {maxlen: 1}\n    stream.maxlen: 2\n",
	"store: \"${UNSET}\"\n",
	"",
	"# only a comment\n",
	"- a\n- b\n",
}

// FuzzParse: the yaml loader never panics; what it refuses is a one-line
// ErrConfig; what it accepts has targets with a URL each, unique names, and
// knobs that all made it into the URL.
func FuzzParse(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	Getenv = func(k string) (string, bool) {
		if k == "RABBIT_PASSWORD" {
			return "s3cr3t-pw", true
		}
		return "", false
	}
	f.Cleanup(func() { Getenv = os.LookupEnv })
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("Parse(%q): error %q is not an ErrConfig", b, err)
			}
			if msg := err.Error(); strings.ContainsAny(msg, "\n\r") || len(msg) > 2000 || strings.Contains(msg, "s3cr3t-pw") {
				t.Fatalf("Parse(%q): error is not one bounded line without secrets: %q", b, msg)
			}
			return
		}
		names := map[string]bool{}
		for i, tg := range c.Targets {
			if tg.URL == "" {
				t.Fatalf("Parse(%q): targets[%d] has no URL", b, i)
			}
			if tg.Name != "" && names[tg.Name] {
				t.Fatalf("Parse(%q): name %q twice", b, tg.Name)
			}
			names[tg.Name] = true
			if len(tg.Knobs) > maxKnobNodes {
				t.Fatalf("Parse(%q): %d knobs", b, len(tg.Knobs))
			}
			for k := range tg.Knobs {
				if !strings.Contains(tg.URL, k) && !strings.Contains(tg.URL, url.QueryEscape(k)) {
					t.Fatalf("Parse(%q): knob %q is not in the URL %q", b, k, tg.URL)
				}
			}
		}
	})
}
