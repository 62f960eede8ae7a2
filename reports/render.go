package reports

import (
	"fmt"
	"io"
	"strings"
)

// Formats are the renderings of a document, by --format name.
var Formats = []string{"json", "junit", "md", "html"}

// FileName is the file a format is written to in a run's output directory.
func FileName(format string) string {
	switch format {
	case "json":
		return "result.json"
	case "junit":
		return "junit.xml"
	case "md":
		return "summary.md"
	case "html":
		return "report.html"
	}
	return ""
}

// Render writes d in format (json, junit, md or html; also xml, markdown).
func Render(w io.Writer, d *Document, format string) error {
	switch strings.ToLower(format) {
	case "json":
		b, err := d.MarshalIndent()
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "junit", "xml":
		return WriteJUnit(w, d)
	case "md", "markdown":
		return WriteMarkdown(w, d)
	case "html":
		return WriteHTML(w, d)
	}
	return fmt.Errorf("format %q: want one of %s", format, strings.Join(Formats, ", "))
}
