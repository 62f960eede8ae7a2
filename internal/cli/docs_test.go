package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)

// TestDocsStayInTheRepository: every relative link of the README and the
// docs names a file of this repository; nothing points outside it (the
// project explains itself).
func TestDocsStayInTheRepository(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"), filepath.Join(root, "compose", "README.md"),
		filepath.Join(root, "examples", "README.md"), filepath.Join(root, "reports", "SCHEMA.md"))
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		if strings.Contains(string(b), "../shared") {
			t.Errorf("%s points into ../shared, outside the repository", rel)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			p := filepath.Clean(filepath.Join(filepath.Dir(doc), target))
			if !strings.HasPrefix(p, root+string(filepath.Separator)) {
				t.Errorf("%s links to %s, outside the repository", rel, target)
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links to %s, which does not exist", rel, target)
			}
		}
	}
}
