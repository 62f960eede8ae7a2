// Package atlas_test checks the committed guarantees atlas against what it
// is generated from: docs/atlas.md and docs/atlas/ must be the measurement
// of atlas/profiles.yaml as it is now, judged by the checker's properties as
// they are now, with at least 5 trials a cell. (That every configuration
// the docs run on a private broker has a profile is internal/cli's
// TestEveryDocumentedConfigurationHasAProfile.)
package atlas_test

import (
	"strings"
	"testing"

	"github.com/durachk/durachk/internal/cli"
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
