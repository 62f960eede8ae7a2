// Package atlas_test checks the committed guarantees atlas against what it
// is generated from: docs/atlas.md and docs/atlas/ must be the measurement
// of atlas/profiles.yaml as it is now, judged by the checker's properties as
// they are now, with at least 5 trials a cell; and every configuration the
// docs run on a private broker must have a profile here.
package atlas_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/durachk/durachk/internal/cli"
	"github.com/durachk/durachk/internal/config"
	"github.com/durachk/durachk/reports"
)

// MinTrials is the trials a cell of the committed atlas has at least.
const MinTrials = 5

// The committed atlas is not older than its profiles or the checker: a
// profile added or changed in atlas/profiles.yaml, or a property added to or
// changed in checker/properties.go, without regenerating docs/atlas fails
// here, naming each profile and what is stale about it.
func TestCommittedAtlasIsCurrent(t *testing.T) {
	want, err := cli.AtlasWanted("profiles.yaml", MinTrials)
	if err != nil {
		t.Fatal(err)
	}
	a, err := reports.LoadAtlas("../docs/atlas")
	if err != nil {
		t.Fatal(err)
	}
	if stale := a.Stale(want); len(stale) > 0 {
		t.Errorf("docs/atlas is not the measurement of atlas/profiles.yaml and the checker as they are (%d reasons):\n  %s\n"+
			"regenerate it as docs/atlas/README.md says (CPU heavy: under flock /tmp/durachk-heavy.lock)",
			len(stale), strings.Join(stale, "\n  "))
	}
}

// targetURL finds the broker URLs of a page.
var targetURL = regexp.MustCompile("(redis|rediss|postgres|postgresql|amqp|amqps|nats|mysql|sqs)://[^'`\"\\s)]*\\?[^'`\"\\s)]*")

// Every configuration a doc runs on a broker durachk starts (a URL with
// private-instance.* or private-cluster.* knobs: a configuration the doc
// measured) has a profile in the atlas that sets each of those knobs to the
// same value, so that the atlas measures it again at every regeneration.
func TestEveryDocumentedConfigurationHasAProfile(t *testing.T) {
	env := map[string]string{
		"DURACHK_PG_URL":    "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"DURACHK_REDIS_URL": "redis://127.0.0.1:6379/0",
		"DURACHK_AMQP_URL":  "amqp://guest:guest@127.0.0.1:5672/",
		"DURACHK_NATS_URL":  "nats://127.0.0.1:4222",
		"DURACHK_MYSQL_URL": "mysql://root@127.0.0.1:3306/test",
		"DURACHK_SQS_URL":   "sqs://127.0.0.1:9324?region=us-east-1&endpoint-kind=fauxqs",
	}
	old := config.Getenv
	config.Getenv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	defer func() { config.Getenv = old }()
	urls, err := cli.AtlasURLs("profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type profile struct {
		name, scheme string
		knobs        url.Values
	}
	var ps []profile
	for name, u := range urls {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ps = append(ps, profile{name, pu.Scheme, pu.Query()})
	}
	docs, _ := filepath.Glob("../docs/*.md")
	checked := 0
	for _, doc := range docs {
		if strings.HasSuffix(doc, "atlas.md") {
			continue
		}
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range targetURL.FindAllString(string(b), -1) {
			du, err := url.Parse(strings.ReplaceAll(m, "…", ""))
			if err != nil {
				continue
			}
			knobs := map[string]string{}
			for k, vs := range du.Query() {
				if strings.HasPrefix(k, "private-instance.") || strings.HasPrefix(k, "private-cluster.") {
					knobs[k] = vs[len(vs)-1]
				}
			}
			if len(knobs) == 0 {
				continue
			}
			checked++
			found := false
			for _, p := range ps {
				if p.scheme != du.Scheme {
					continue
				}
				all := true
				for k, v := range knobs {
					all = all && p.knobs.Get(k) == v
				}
				if all {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s runs %s: no profile of atlas/profiles.yaml sets %v: add one (and regenerate the atlas)", filepath.Base(doc), m, knobs)
			}
		}
	}
	if checked == 0 {
		t.Errorf("no doc names a configuration on a private broker: the check checked nothing")
	}
}
