package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/durachk/durachk/reports"
)

// Report re-renders a past run (`durachk report result.json --format F`) to
// out, or to stdout when out is empty. Format text is the table `durachk run`
// prints. A partial run (killed, interrupted) renders with a banner saying so.
func Report(path, format, out string, stdout io.Writer) error {
	if format == "" {
		format = "md"
	}
	doc, err := reports.ReadJSON(path)
	if err != nil {
		return ConfigError(err)
	}
	var b bytes.Buffer
	if strings.EqualFold(format, "text") {
		PrintTable(&b, doc)
	} else if err := reports.Render(&b, doc, format); err != nil {
		return ConfigError(err)
	}
	return emit(&b, out, stdout)
}

func emit(b *bytes.Buffer, out string, stdout io.Writer) error {
	if out == "" || out == "-" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return ConfigError(err)
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return ConfigError(err)
	}
	fmt.Fprintf(stdout, "wrote %s\n", out)
	return nil
}

// Compare renders the matrix of several runs (`durachk compare a.json b.json`):
// contracts as rows (violations and unknowns first), each target of each run
// a column with the settings that tell it from the other columns of its kind
// and its fingerprint, each cell a verdict linking to its evidence
// (report.html beside the run's result.json). format is text (default), md,
// html or json (the matrix as one document: reports.Matrix).
func Compare(paths []string, format, out string, stdout io.Writer) error {
	if len(paths) == 0 {
		return ConfigError(fmt.Errorf("compare: name one or more result.json files"))
	}
	var docs []*reports.Document
	for _, p := range paths {
		d, err := reports.ReadJSON(p)
		if err != nil {
			return ConfigError(err)
		}
		docs = append(docs, d)
	}
	m := reports.NewMatrix(docs, paths)
	m.WorstFirst()
	var b bytes.Buffer
	var err error
	switch strings.ToLower(format) {
	case "", "text":
		err = reports.WriteMatrixText(&b, m)
	case "md", "markdown":
		err = reports.WriteMatrixMarkdown(&b, m)
	case "html":
		err = reports.WriteMatrixHTML(&b, m)
	case "json":
		err = writeJSON(&b, m)
	default:
		return ConfigError(fmt.Errorf("--format %q: want text, md, html or json", format))
	}
	if err != nil {
		return ConfigError(err)
	}
	return emit(&b, out, stdout)
}
