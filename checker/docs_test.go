package checker

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the property section of docs/checker.md")

const (
	propsBegin = "<!-- properties:begin -->"
	propsEnd   = "<!-- properties:end -->"
)

// propertyDocs is the property section of docs/checker.md, as the code says it.
func propertyDocs() string {
	var b strings.Builder
	b.WriteString(propsBegin + "\n")
	b.WriteString("Generated from `checker.Properties` (`go test ./checker -run TestPropertyDocs -update-docs` regenerates it).\n\n")
	for _, s := range Properties {
		fmt.Fprintf(&b, "### `%s`\n\n", s.Name)
		fmt.Fprintf(&b, "- **Claim:** %s.\n", s.Claim)
		fmt.Fprintf(&b, "- **Detection:** %s.\n", s.Detection)
		fmt.Fprintf(&b, "- **Witness:** %s.\n", s.Witness)
		fmt.Fprintf(&b, "- **Sabotage:** %s.\n", s.Sabotage)
		if s.FinalState {
			b.WriteString("- Rests on the final state: unknown without one.\n")
		}
		b.WriteString("\n")
	}
	b.WriteString(propsEnd)
	return b.String()
}

// docs/checker.md lists every property as the code describes it.
func TestPropertyDocs(t *testing.T) {
	path := filepath.Join("..", "docs", "checker.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, propsBegin), strings.Index(doc, propsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %s … %s section", path, propsBegin, propsEnd)
	}
	want := propertyDocs()
	if *updateDocs {
		doc = doc[:i] + want + doc[j+len(propsEnd):]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc[i:j+len(propsEnd)] != want {
		t.Errorf("%s's property section differs from checker.Properties; run\n  go test ./checker -run TestPropertyDocs -update-docs", path)
	}
}
