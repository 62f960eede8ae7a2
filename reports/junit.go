package reports

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
)

// JUnit XML: one testsuite per target, one testcase per contract (classname
// durachk.<target>, name the contract id). A violation is a failure with the
// witness; an unknown verdict is an error of type unknown (never a pass); a
// skipped verdict is skipped with its reason.
//
// A run gated by a baseline (Document.Gate) is judged as its gate judged it,
// so that the check is red exactly when the gate fails: a verdict the
// baseline expects is not a failure — a pass passes, and an expected
// violation, unknown or skip is skipped, its message "expected by the
// baseline: violation: …" and the witness in its output; every difference is
// a failure of type baseline (a regression or an improvement, as the gate
// prints it, with the witness of a violation); an expected result the run did
// not produce is an error of type not_measured.

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr,omitempty"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

func secs(ms float64) string { return fmt.Sprintf("%.3f", ms/1000) }

// WriteJUnit renders the document as JUnit XML.
func WriteJUnit(w io.Writer, d *Document) error {
	top := junitSuites{Name: "durachk", Time: secs(d.Wall.DurationMS)}
	index := map[string]int{}
	suite := func(target string) *junitSuite {
		if i, ok := index[target]; ok {
			return &top.Suites[i]
		}
		ti, _ := d.Target(target)
		s := junitSuite{Name: target, Timestamp: d.Wall.StartedAt.Format("2006-01-02T15:04:05Z")}
		if d.Wall.StartedAt.IsZero() {
			s.Timestamp = ""
		}
		s.Properties = []junitProperty{
			{"seed", fmt.Sprint(d.Seed)},
			{"broker", ti.Broker},
			{"version", ti.MeasuredOn},
			{"endpoint", ti.Endpoint},
			{"fingerprint", ti.Fingerprint},
			{"durachk_version", d.Version},
			{"command", PasteCommand(d.Command, nil)},
		}
		if ti.URL != "" {
			s.Properties = append(s.Properties, junitProperty{"url", ti.URL})
		}
		index[target] = len(top.Suites)
		top.Suites = append(top.Suites, s)
		return &top.Suites[len(top.Suites)-1]
	}
	for _, ti := range d.Targets {
		suite(ti.Name)
	}
	suiteMS := map[string]float64{}
	// Within each suite, violations first, then unknowns (ReadingOrder).
	for _, i := range d.ReadingOrder() {
		r := d.Results[i]
		s := suite(r.Target)
		ms := d.WallMS(i)
		c := junitCase{Classname: "durachk." + r.Target, Name: r.Contract, Time: secs(ms)}
		exp, listed := d.Gate.Expects(r.Target, r.Contract)
		witness := ""
		switch {
		case d.Gate != nil && listed && exp == r.Verdict && r.Verdict != contracts.Pass:
			// Accepted by the baseline: the gate passes it, so does the check.
			c.Skipped = &junitSkipped{Message: oneLine("expected by the baseline: " + string(r.Verdict) + ": " + r.Reason)}
			s.Skipped++
			if r.Verdict == contracts.Violated {
				witness = witnessText(r, 40)
			}
		case d.Gate != nil && (listed && exp != r.Verdict || !listed && (r.Verdict == contracts.Violated || r.Verdict == contracts.Unknown)):
			diff := Difference{Target: r.Target, Contract: r.Contract, Expected: exp, Got: r.Verdict}
			body := r.Reason
			if r.Verdict == contracts.Violated {
				body = witnessText(r, 40)
			}
			c.Failure = &junitProblem{Message: oneLine("baseline: " + diff.String() + reasonSuffix(r.Reason)), Type: "baseline", Body: body}
			s.Failures++
		case r.Verdict == contracts.Pass:
		case r.Verdict == contracts.Violated:
			c.Failure = &junitProblem{Message: oneLine(r.Reason), Type: "violation", Body: witnessText(r, 40)}
			s.Failures++
		case r.Verdict == contracts.Skipped:
			c.Skipped = &junitSkipped{Message: oneLine(r.Reason)}
			s.Skipped++
		default: // unknown, or anything this version does not know: never a pass
			c.Error = &junitProblem{Message: oneLine(r.Reason), Type: "unknown", Body: "verdict " + string(r.Verdict) + ": " + r.Reason}
			s.Errors++
		}
		ev := d.EvidenceFor(r.Target, r.Contract)
		c.SystemOut = fmt.Sprintf("claim: %s\nscenario: %s\nplanned faults: %s\nreproduce: %s\n", r.Claim, r.Scenario,
			strings.Join(r.Planned, "; "), PasteCommand(ev.Reproduce, nil))
		if witness != "" {
			c.SystemOut += witness
		}
		if note := TrialsNote(r); note != "" {
			c.SystemOut += "trials: " + note + "\n" + TrialsText(d, r)
		}
		s.Tests++
		s.Cases = append(s.Cases, c)
		suiteMS[r.Target] += ms
	}
	for _, diff := range d.GateDifferences() {
		if diff.Got != "" {
			continue
		}
		// Expected, and not reached by a run that stopped early.
		s := suite(diff.Target)
		s.Cases = append(s.Cases, junitCase{Classname: "durachk." + diff.Target, Name: diff.Contract, Time: "0.000",
			Error: &junitProblem{Message: oneLine("baseline: " + diff.String()), Type: "not_measured", Body: diff.String()}})
		s.Tests++
		s.Errors++
	}
	if note := PartialNote(d); note != "" {
		// A partial run is never green: one error says what is missing.
		top.Suites = append(top.Suites, junitSuite{Name: "durachk run", Tests: 1, Errors: 1, Properties: []junitProperty{{"complete", "false"}},
			Cases: []junitCase{{Classname: "durachk.run", Name: "complete", Time: "0.000", Error: &junitProblem{Message: oneLine(note), Type: "partial", Body: note}}}})
	}
	for _, s := range top.Suites {
		top.Tests += s.Tests
		top.Failures += s.Failures
		top.Errors += s.Errors
		top.Skipped += s.Skipped
	}
	for i := range top.Suites {
		top.Suites[i].Time = secs(suiteMS[top.Suites[i].Name])
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(top); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// reasonSuffix is ": reason", or "" without one.
func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}

// witnessText is the violations of r, each as its witness table (at most
// max operations), facts and because lines.
func witnessText(r contracts.Result, max int) string {
	var b strings.Builder
	for i, v := range r.Violations {
		if i == 10 {
			fmt.Fprintf(&b, "… %d more violations\n", len(r.Violations)-i)
			break
		}
		more := 0
		if len(v.Witness) > max {
			more = len(v.Witness) - max
			v.Witness = v.Witness[:max]
		}
		_ = checker.WriteText(&b, v, "")
		if more > 0 {
			fmt.Fprintf(&b, "  … %d more operations in result.json\n", more)
		}
	}
	return b.String()
}
