// Command testreport reads `go test -json` on its standard input and prints
// what `go test` prints without -json (a line per package, the output of every
// test that failed), then counts the tests that skipped, grouped by the reason
// they gave, so that a run that skipped the real-broker tests says so instead
// of passing quietly.
//
//	go test -json ./... | go run ./tools/testreport [-require-services]
//
// It exits 1 when a package failed or the stream ended without a package's
// result (a build failure, a killed test binary), and, with
// -require-services, when a test skipped because a service it needs was
// missing — a service URL not set (a reason naming a DURACHK_*_URL
// variable), or Node.js and the packages of the Node.js drivers (a reason
// starting "needs Node.js", which .ci/setup.d installs): on a machine that
// runs the services, as this project's CI does, such a skip hides a test.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	require := flag.Bool("require-services", false, "exit 1 when a test skipped because a service was missing (a DURACHK_*_URL not set, Node.js or a driver's packages)")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *require); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

// event is one record of test2json.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// A skip's reason is the last line the test logged before it skipped
// ("    x_test.go:12: DURACHK_PG_URL is not set").
var logLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)

// missingService matches a reason that names an unset service variable, or
// the Node.js runtime or packages a driver needs.
var missingService = regexp.MustCompile(`\bDURACHK_[A-Z]+_URL\b.*\bnot set\b|\bnot set\b.*\bDURACHK_[A-Z]+_URL\b|^needs \$DURACHK_|^needs Node\.js\b`)

type skip struct{ pkg, test, reason string }

func run(in io.Reader, out io.Writer, require bool) error {
	outputs := map[string][]string{} // package/test: its output lines so far
	ended := map[string]bool{}       // packages with a result
	started := map[string]bool{}
	var skips []skip
	var failed []string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Fprintln(out, string(line)) // not test2json: the go command's own words
			continue
		}
		key := e.Package + "/" + e.Test
		switch e.Action {
		case "start":
			started[e.Package] = true
		case "output":
			outputs[key] = append(outputs[key], e.Output)
		case "skip":
			if e.Test == "" {
				ended[e.Package] = true
				fmt.Fprintf(out, "?   \t%s\t[no test files]\n", e.Package)
				continue
			}
			skips = append(skips, skip{e.Package, e.Test, reason(outputs[key])})
			delete(outputs, key)
		case "pass":
			if e.Test == "" {
				ended[e.Package] = true
				fmt.Fprintf(out, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
			}
			delete(outputs, key)
		case "fail":
			if e.Test != "" {
				fmt.Fprint(out, strings.Join(outputs[key], ""))
				delete(outputs, key)
				continue
			}
			ended[e.Package] = true
			failed = append(failed, e.Package)
			fmt.Fprint(out, strings.Join(outputs[key], "")) // the package's own output: a panic, a build error
			fmt.Fprintf(out, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	var unended []string
	for p := range started {
		if !ended[p] {
			unended = append(unended, p)
		}
	}
	sort.Strings(unended)
	missing := summarize(out, skips)
	switch {
	case len(failed) > 0:
		return fmt.Errorf("%d package(s) failed: %s", len(failed), strings.Join(failed, " "))
	case len(unended) > 0:
		return fmt.Errorf("no result from %s (the test binary died?)", strings.Join(unended, " "))
	case require && missing > 0:
		return fmt.Errorf("%d test(s) skipped for a missing service: this machine runs the services (.ci/services.sh finds or starts them, .ci/setup.d installs the Node.js drivers' packages)", missing)
	}
	return nil
}

// reason is the last logged line of a skipped test's output.
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if m := logLine.FindStringSubmatch(strings.TrimRight(lines[i], "\n")); m != nil {
			return m[1]
		}
	}
	return "(no reason given)"
}

// summarize prints the skips grouped by reason, most frequent first, with
// up to three tests each, and returns how many skipped for a missing
// service.
func summarize(out io.Writer, skips []skip) int {
	if len(skips) == 0 {
		fmt.Fprintln(out, "skipped: none")
		return 0
	}
	by := map[string][]skip{}
	missing := 0
	for _, s := range skips {
		by[s.reason] = append(by[s.reason], s)
		if missingService.MatchString(s.reason) {
			missing++
		}
	}
	reasons := make([]string, 0, len(by))
	for r := range by {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if len(by[reasons[i]]) != len(by[reasons[j]]) {
			return len(by[reasons[i]]) > len(by[reasons[j]])
		}
		return reasons[i] < reasons[j]
	})
	fmt.Fprintf(out, "skipped: %d test(s), %d of them for a missing service (a URL not set, Node.js)\n", len(skips), missing)
	for _, r := range reasons {
		ss := by[r]
		var names []string
		for i, s := range ss {
			if i == 3 {
				names = append(names, "…")
				break
			}
			names = append(names, strings.TrimPrefix(s.pkg, "github.com/durachk/durachk/")+" "+s.test)
		}
		fmt.Fprintf(out, "  %3d × %s (%s)\n", len(ss), r, strings.Join(names, ", "))
	}
	return missing
}
