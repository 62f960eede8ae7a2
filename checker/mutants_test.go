package checker

import (
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var runMutants = flag.Bool("mutants", false, "build each mutant of the table in mutants_test.go and require the test it names to fail (minutes; go test ./checker -run TestMutants -mutants -v)")

// mutant is one hand-made bug: old replaced by new in file (from the module
// root) removes or alters one branch a property's detection, the verdict
// merge, the engine's judge or selftest rests on. The tests run names must
// go red with it.
type mutant struct {
	name     string
	file     string
	old, new string
	pkg      string // the package whose tests catch it
	run      string // go test -run pattern of those tests
}

// TestMutants keeps the table honest: every mutant's text is in its file
// exactly once, so the table cannot rot into mutants that mutate nothing.
// With -mutants it builds each one (go build -overlay: the tree is never
// written) and requires the tests it names to pass without it and fail with
// it.
func TestMutants(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range mutants {
		if seen[m.name] {
			t.Errorf("two mutants named %q", m.name)
		}
		seen[m.name] = true
		b, err := os.ReadFile(filepath.Join(root, m.file))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(b), m.old); n != 1 {
			t.Errorf("mutant %q: %s holds its text %d times, want once: %q", m.name, m.file, n, m.old)
		}
		if m.old == m.new || m.run == "" || m.pkg == "" {
			t.Errorf("mutant %q changes nothing or names no test", m.name)
		}
		for _, part := range strings.Split(m.run, "/") {
			if _, err := regexp.Compile(part); err != nil {
				t.Errorf("mutant %q: -run %q: %v", m.name, m.run, err)
			}
		}
	}
	if !*runMutants {
		return
	}
	goTest := func(t *testing.T, pkg, run, overlay string) (string, bool) {
		args := []string{"test", "-count=1", "-run", run}
		if overlay != "" {
			args = append(args, "-overlay", overlay)
		}
		cmd := exec.Command("go", append(args, pkg)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), "build failed") || strings.Contains(string(out), "setup failed") {
			t.Fatalf("go test %s -run %s does not build:\n%s", pkg, run, out)
		}
		return string(out), err == nil
	}
	// Without a mutant, every test a mutant names passes: once per package,
	// the tests named there, whole.
	tops := map[string][]string{}
	for _, m := range mutants {
		top, _, _ := strings.Cut(m.run, "/")
		if !slices.Contains(tops[m.pkg], top) {
			tops[m.pkg] = append(tops[m.pkg], top)
		}
	}
	for pkg, ts := range tops {
		if out, ok := goTest(t, pkg, strings.Join(ts, "|"), ""); !ok {
			t.Fatalf("without a mutant, go test %s -run '%s' fails already:\n%s", pkg, strings.Join(ts, "|"), out)
		}
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			path := filepath.Join(root, m.file)
			b, _ := os.ReadFile(path)
			dir := t.TempDir()
			mutated := filepath.Join(dir, filepath.Base(path))
			if err := os.WriteFile(mutated, []byte(strings.Replace(string(b), m.old, m.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			ov, _ := json.Marshal(map[string]map[string]string{"Replace": {path: mutated}})
			overlay := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(overlay, ov, 0o644); err != nil {
				t.Fatal(err)
			}
			out, ok := goTest(t, m.pkg, m.run, overlay)
			if ok || !strings.Contains(out, "--- FAIL") {
				t.Errorf("mutant survived: %s -run '%s' stays green with %s: %q → %q", m.pkg, m.run, m.file, m.old, m.new)
				return
			}
			var failed []string
			for _, l := range strings.Split(out, "\n") {
				if l = strings.TrimSpace(l); strings.HasPrefix(l, "--- FAIL") {
					failed = append(failed, strings.Fields(l)[2])
				}
			}
			t.Logf("killed by %s", strings.Join(failed, ", "))
		})
	}
}

// tc is the -run pattern of hand-written cases of TestCheckProperties.
func tc(names ...string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = regexp.QuoteMeta(strings.ReplaceAll(n, " ", "_"))
	}
	return "^TestCheckProperties$/^(" + strings.Join(q, "|") + ")$"
}

const (
	ck  = "checker/checker.go"
	fin = "checker/finish.go"
	eng = "contracts/engine.go"
	sft = "contracts/selftest.go"
)

// mutants: every branch a property's Detection text names, the merge of
// answers, the engine's judge and selftest's Caught, each removed or altered
// once, with the tests that catch it. The first eight are the branches issue
// 19 found no test for.
var mutants = []mutant{
	{"work after a deadline checked on a job's first execution only", ck,
		"if j.meta.Deadline > 0 && op.T > j.meta.Deadline+c.weak.DeadlineSlack", "if j.meta.Deadline > 0 && j.spent == 0 && op.T > j.meta.Deadline+c.weak.DeadlineSlack",
		"./checker", tc("work after the deadline on a retried job")},
	{"a lease after the pipeline's dead-letter is no resurrection", ck,
		"if j.deadOK != nil && j.enqueues < 2 && c.want(Resurrected) {", "if false && j.deadOK != nil && j.enqueues < 2 && c.want(Resurrected) {",
		"./checker", tc("a dead-lettered job delivered again by the broker")},
	{"an audited reprocess passes at any version, also as the old job", fin,
		"if known && nj.meta.Version == j.meta.Version+1 && a.NewJob != j.id {", "if known {",
		"./checker", tc("an audited reprocess to a new job at version+2", "an audited reprocess whose new job is the dead job itself")},
	{"an audited reprocess passes at a version above version+1", fin,
		"nj.meta.Version == j.meta.Version+1", "nj.meta.Version >= j.meta.Version+1",
		"./checker", tc("an audited reprocess to a new job at version+2")},
	{"a reprocess as the old job itself is not said to be one", fin,
		"if a.NewJob == j.id {", "if false {",
		"./checker", tc("an audited reprocess whose new job is the dead job itself")},
	{"a reason code embedded in error text passes as a code", fin,
		"return s == ReasonAgeExceeded || slices.Contains(pipeline.ReasonCodes, s)",
		"return strings.HasPrefix(s, ReasonAgeExceeded) || slices.ContainsFunc(pipeline.ReasonCodes, func(c string) bool { return strings.HasPrefix(s, c) })",
		"./checker", tc("dlq leak: a reason code embedded in error text")},
	{"a fault on any link counts as one on the relay's channel", ck,
		"if op.Key == faults.LinkChannel {", "if op.Key == faults.LinkChannel || op.Key != \"\" {",
		"./checker", tc("a circuit opened after a fault on another link")},
	{"merge: an unknown answer hides a false one", ck,
		"case Unknown:\n\t\t\tv = Unknown", "case Unknown:\n\t\t\treturn Unknown",
		"./checker", "^(TestMergeEveryPair|TestAnswers)$"},
	{"merge: an unknown answer hides a false one (durachk check's exit code)", ck,
		"case Unknown:\n\t\t\tv = Unknown", "case Unknown:\n\t\t\treturn Unknown",
		"./internal/cli", "^TestCheckExitFollowsTheMerge$"},
	{"judge: undecided jobs before violations", eng,
		"case len(vs) > 0:", "case len(vs) > 0 && len(undecided) == 0:",
		"./contracts", "^TestJudgePrecedence$"},
	{"ReplayWitness accepts a witness that raises another property", "checker/witness.go",
		"if w.Property == v.Property {", "if w.Property != \"\" {",
		"./checker", "^TestReplayWitnessRejectsAnotherProperty$"},

	// selftest: the verdict, every seed.
	{"Caught counts a run whose verdict is not a violation", eng,
		"if len(missing) == 0 && r.Verdict == Violated {", "if len(missing) == 0 {",
		"./contracts", "^(TestCaught|TestSelfTestFailsOnAVerdictNotViolation)$"},
	{"Caught counts a run whose verdict is not a violation (durachk selftest's exit code)", eng,
		"if len(missing) == 0 && r.Verdict == Violated {", "if len(missing) == 0 {",
		"./internal/cli", "^TestSelftestFailsOnAVerdictNotViolation$"},
	{"Caught counts a property without a witness", eng,
		"if v.Property == p && (len(v.Witness) > 0 || len(v.Facts) > 0) {", "if v.Property == p {",
		"./contracts", "^TestCaught$"},
	{"SelfTest runs the first seed only", sft,
		"for k := range n {", "for k := range 1 {",
		"./contracts", "^TestSelfTestSeeds$"},
	{"SelfTest: a seed not caught does not fail the sabotage", sft,
		"if !sd.Caught && sr.Caught {", "if false && !sd.Caught && sr.Caught {",
		"./contracts", "^TestSelfTestSeeds$"},
	{"SelfTest retries an unknown seed on another seed's seeds", sft,
		"o.Seed += uint64(n * tries)", "o.Seed++",
		"./contracts", "^(TestSelfTestFailsOnAVerdictNotViolation|TestSelfTestRetriesAnUnknownSeed)$"},
	{"SelfTest never retries an unknown run", sft,
		"if sd.Caught || r.Verdict != Unknown {", "if true {",
		"./contracts", "^(TestSelfTestFailsOnAVerdictNotViolation|TestSelfTestRetriesAnUnknownSeed)$"},
	{"selftest --seeds ignored", "internal/cli/cli.go",
		"Trials: seeds})", "})",
		"./internal/cli", "^TestSelftestSeeds$"},

	// judge: the rest of its order.
	{"judge keeps the violations of a run the broker cut short", eng,
		"res.Verdict, res.Reason, res.Violations = Unknown, ex.Unavailable, nil", "res.Verdict, res.Reason = Unknown, ex.Unavailable",
		"./contracts", "^TestJudgePrecedence$"},
	{"judge: a run that did not exercise its claim passes", eng,
		"case exercised != nil && exercised(st) != \"\":", "case false:",
		"./contracts", "^TestJudgePrecedence$"},

	// The answers Finish gives.
	{"no final state: what rests on it passes", ck,
		"case s.FinalState && c.opts.HistoryOnly:", "case false:",
		"./checker", "^TestAnswers$"},
	{"a job still in the broker: lost passes", ck,
		"case (s.Name == Lost || s.Name == MovedByBroker) && len(undecided) > 0:", "case false:",
		"./checker", "^TestAnswers$"},
	{"a violation beside a job still in the broker reads unknown", ck,
		"case a.Count > 0:", "case a.Count > 0 && len(undecided) == 0:",
		"./checker", "^TestAnswers$"},
	{"event_not_applied fires in a run that did not drain", fin,
		"if c.opts.RelayRan && f.Drained && !e.Dead", "if c.opts.RelayRan && !e.Dead",
		"./checker", "^TestAnswers$"},

	// lost; moved_by_broker; multiple_terminal.
	{"committed: the store's result ignored", fin,
		"committed := j.commitOK != nil || c.finals[j].result > 0", "committed := j.commitOK != nil",
		"./checker", tc("not lost: committed, its result only in the store (the commit's reply was lost)", "multiple terminal: a result and a dead-letter record only in the store")},
	{"committed: the history's commit ok ignored", fin,
		"committed := j.commitOK != nil || c.finals[j].result > 0", "committed := c.finals[j].result > 0",
		"./checker", tc("multiple terminal: a commit ok and a dead_letter ok, the store holding neither")},
	{"dead: the history's dead_letter ok ignored", fin,
		"dead := j.deadOK != nil || c.finals[j].storeDead > 0 ||", "dead := c.finals[j].storeDead > 0 ||",
		"./checker", tc("not lost: dead-lettered in the history, no record in the store")},
	{"dead: the store's dead-letter record ignored", fin,
		"dead := j.deadOK != nil || c.finals[j].storeDead > 0 ||", "dead := j.deadOK != nil ||",
		"./checker", tc("not lost: dead-lettered, its record only in the store (the dead-letter's reply was lost)")},
	{"dead: the broker's DLQ after a dead-letter whose reply was lost ignored", fin,
		"j.brokerDLQ && (j.dlInfo || j.dlOpen > 0)", "j.brokerDLQ && j.dlOpen > 0",
		"./checker", tc("not lost: in the broker's dead-letter queue after a dead-letter whose reply was lost")},
	{"dead: the broker's DLQ after a dead-letter never answered ignored", fin,
		"j.brokerDLQ && (j.dlInfo || j.dlOpen > 0)", "j.brokerDLQ && j.dlInfo",
		"./checker", tc("not lost: in the broker's dead-letter queue after a dead-letter never answered")},
	{"cancelled: the history's cancel ok ignored", fin,
		"cancelled := j.rare().cancelOK != nil || c.finals[j].cancelRec > 0", "cancelled := c.finals[j].cancelRec > 0",
		"./checker", tc("not lost: cancelled in the history, no record in the store", "a job cancelled in the history (the store holds no cancellation), reprocessed")},
	{"cancelled: the store's cancellation ignored", fin,
		"cancelled := j.rare().cancelOK != nil || c.finals[j].cancelRec > 0", "cancelled := j.rare().cancelOK != nil",
		"./checker", tc("not lost: cancelled, only the store records it (the cancel's reply was lost)",
			"a job the store records as cancelled (the cancel's reply was lost), reprocessed", "multiple terminal: a result and a cancellation only in the store")},
	{"a job in flight at the end is not in the broker", fin,
		"[][]string{f.Broker.Queued, f.Broker.InFlight}", "[][]string{f.Broker.Queued}",
		"./checker", tc("in flight at the end is unknown, not lost")},
	{"messages the broker cannot name decide nothing", fin,
		"case n == 0 && (j.inBroker || f.Broker.Unnamed > 0):", "case n == 0 && j.inBroker:",
		"./checker", tc("unfinished while the broker holds messages it cannot name is unknown, not lost")},
	{"the broker's own actions ignored", fin,
		"held := j.brokerDLQ || c.finals[j].moved > 0", "held := j.brokerDLQ",
		"./checker", tc("moved by broker: expired by the broker, not in any dead-letter queue")},
	{"a job never accepted can be lost", fin,
		"if !j.accepted {\n\t\t\tcontinue\n\t\t}\n\t\tc.finishJob(", "c.finishJob(",
		"./checker", tc("a job whose every enqueue failed is never lost")},
	{"moved_by_broker despite the pipeline's dead-letter", fin,
		"if held && !dead {", "if held {",
		"./checker", tc("in the broker's dead-letter queue after a pipeline dead-letter the store does not hold is clean",
			"in the broker's dead-letter queue with only the store's dead-letter record is clean")},
	{"the broker's unnamed removals blamed for a finished job", fin,
		"case n == 0 && !held && len(unnamed) > 0:", "case len(unnamed) > 0:",
		"./checker", tc("committed while the broker trimmed messages it cannot name is clean")},

	// duplicate_effect, duplicate_apply, unexplained_duplicate, preempted.
	{"duplicate_effect: two new results under one key", ck,
		"case k != nil && k.news == 2 && c.want(DuplicateEffect):", "case false && k != nil && k.news == 2 && c.want(DuplicateEffect):",
		"./checker", tc("two jobs' new results under one key", "duplicate effect")},
	{"duplicate_effect: two new results of one job under other keys", ck,
		"case j.news == 2 && (k == nil || k.news < 2) && c.want(DuplicateEffect):", "case false && j.news == 2 && (k == nil || k.news < 2) && c.want(DuplicateEffect):",
		"./checker", tc("two new results for one job under different keys")},
	{"duplicate_apply from the third application", ck,
		"if k.applied == 2 && c.want(DuplicateApply) {", "if k.applied == 3 && c.want(DuplicateApply) {",
		"./checker", tc("duplicate apply")},
	{"unexplained_duplicate: a lost reply other than the ack's explains nothing", ck,
		"case prev.info || prev.ended == endAckFailed:", "case prev.ended == endAckFailed:",
		"./checker", tc("a redelivery after a dead-letter whose reply was lost is explained")},
	{"unexplained_duplicate: a failed ack explains nothing", ck,
		"case prev.info || prev.ended == endAckFailed:", "case prev.info:",
		"./checker", tc("a redelivery after a failed ack is explained")},
	{"unexplained_duplicate: an ack whose reply was lost is not a lost reply", ck,
		"case prev.info || prev.ended == endAckFailed:", "case false:",
		"./checker", tc("a redelivery after an ack whose reply was lost is explained")},
	{"unexplained_duplicate: a broker restart before the ack explains it", ck,
		"c.crashPos > int64(prev.end.pos)", "c.crashPos >= 0",
		"./checker", tc("a redelivery after an ack sent after the broker restarted")},
	{"unexplained_duplicate: an ack past the lease explains nothing", ck,
		"case prev.ended == endAck && prev.ackLate:", "case false:",
		"./checker", tc("a duplicate after an ack sent past the lease", "a duplicate after an ack answered past the lease")},
	{"unexplained_duplicate: an ack is late only when sent late", ck,
		"d.ackLate = d.ackLate || d.broke || d.mayHaveRunOut(op.T)", "d.ackLate = d.ackLate || d.broke || d.ranOut(p.invT)",
		"./checker", tc("a duplicate after an ack answered past the lease")},
	{"unexplained_duplicate: every ack is late", ck,
		"d.ackLate = d.ackLate || d.broke || d.mayHaveRunOut(op.T)", "d.ackLate = true",
		"./checker", tc("a duplicate after a slow ack answered within the lease", "unexplained duplicate delivery")},
	{"unexplained_duplicate: a late lease with an older token after the newer was acked", ck,
		"case r.token != 0 && r.token < prev.token:", "case prev.ended == open && r.token != 0 && r.token < prev.token:",
		"./checker", tc("a lease answered late with an older token after the newer delivery's ack is explained")},
	{"unexplained_duplicate: an ack after a late renewal explains nothing", ck,
		"d.ackLate || d.broke || d.mayHaveRunOut(op.T)", "d.ackLate || d.mayHaveRunOut(op.T)",
		"./checker", tc("a duplicate after an ack that followed a late renewal")},
	{"preempted: a renewal after the lease ran out keeps it", ck,
		"case prev.ended == open && prev.broke:", "case false:",
		"./checker", tc("a holder whose renewal came after its lease may have run out")},
	{"preempted: every renewal breaks the lease", "checker/state.go",
		"if op.F == history.Extend && d.mayHaveRunOut(inv) {", "if op.F == history.Extend {",
		"./checker", tc("a holder whose renewals each came in time")},
	{"preempted: a holder stalled in quick work preempts", ck,
		"(!c.inExtract(c.strs.str(int(prev.proc)), j) || j.meta.Quick)", "!c.inExtract(c.strs.str(int(prev.proc)), j)",
		"./checker", tc("a holder stalled in quick work past its lease")},
	{"preempted: quick work excuses every holder in it", ck,
		"prev.ranOut(p.leaseInvT) && (!c.inExtract", "(prev.ranOut(p.leaseInvT) || j.meta.Quick) && (!c.inExtract",
		"./checker", tc("a holder in quick work within its lease")},
	{"preempted: a late lease with an older token preempts", ck,
		"case r.token != 0 && r.token < prev.token:", "case false:",
		"./checker", tc("a lease answered late with an older token is not a preemption")},
	{"preempted: any late lease is excused", ck,
		"r.token != 0 && r.token < prev.token:", "r.token != 0:",
		"./checker", tc("a lease answered late with a newer token is a preemption")},
	{"unexplained_duplicate: an ack answered while the broker was down explains nothing", ck,
		"case prev.ended == endAck && prev.ackDown:", "case false:",
		"./checker", tc("a redelivery after an ack answered while the broker was down is explained")},
	{"unexplained_duplicate: the broker stays down after its restart", ck,
		"if op.Value == \"broker_restart\" {\n\t\tc.brokerDown = false", "if false {\n\t\tc.brokerDown = false",
		"./checker", tc("a redelivery after an ack sent after the broker restarted")},
	{"unexplained_duplicate: the broker's answer does not end its down time", ck,
		"op.Type == history.OK && (op.F == history.Lease || op.F == history.Enqueue)", "false",
		"./checker", tc("a redelivery after an ack answered once the broker answered again")},
	{"unexplained_duplicate: an ack the cut-off primary answered explains nothing", ck,
		"case prev.ended == endAck && prev.ackCut:", "case false:",
		"./checker", tc("a redelivery after an ack answered while the primary was cut off is explained")},
	{"unexplained_duplicate: a replica's partition cuts the primary off", ck,
		"c.primary == \"\" || op.Target == c.primary", "true",
		"./checker", tc("a redelivery after an ack answered while a replica was cut off")},
	{"unexplained_duplicate: the primary stays cut off after the failover", ck,
		"case \"failover\", \"rejoin\":\n\t\tc.primaryCut = false", "case \"rejoin\":\n\t\tc.primaryCut = false",
		"./checker", tc("a redelivery after an ack answered once the failover was recorded")},
	{"preempted checked on approximate leases", ck,
		"!c.opts.ApproximateLeases && c.want(Preempted)", "c.want(Preempted)",
		"./checker", tc("a second holder on a broker with approximate leases is not a preemption")},
	{"preempted: a holder paused before it recorded its lease", ck,
		"(!ok || !hp.faulted) && !c.opts.ApproximateLeases", "(!ok || !hp.faulted || true) && !c.opts.ApproximateLeases",
		"./checker", tc("a holder paused before it recorded its lease is not preempted")},

	// attempts_over_budget, healthy_dead_lettered, permanent_retried.
	{"a permanent error spends no attempt", ck,
		"if op.Err == pipeline.Transient.String() || op.Err == pipeline.Permanent.String() {", "if op.Err == pipeline.Transient.String() {",
		"./checker", tc("permanent errors spend attempts")},
	{"an infrastructure failure of the work spends an attempt", ck,
		"if op.Err == pipeline.Transient.String() || op.Err == pipeline.Permanent.String() {", "if op.Err != \"\" {",
		"./checker", tc("extracts failed by the infrastructure do not spend attempts")},
	{"one budget for every message of a job", ck,
		"return j.meta.MaxAttempts * int32(max(j.enqueues, 1))", "return j.meta.MaxAttempts",
		"./checker", tc("two messages of a job double its budget")},
	{"a poison job's dead-letter not by design", fin,
		"case m.Poison:", "case false:",
		"./checker", tc("a poison job dead-lettered is by design")},
	{"fail_transient ≥ max does not earn a dead-letter", fin,
		"case m.Stubborn || m.FailTransient > 0 && m.FailTransient >= m.MaxAttempts:", "case m.Stubborn:",
		"./checker", tc("a job designed to fail more often than its budget allows, dead-lettered early, is by design")},
	{"a job permanent by design does not earn a dead-letter", fin,
		"case m.Permanent || j.permErr:", "case j.permErr:",
		"./checker", tc("a job permanent by its metadata, dead-lettered before any failure, is by design")},
	{"a permanent error does not earn a dead-letter", fin,
		"case m.Permanent || j.permErr:", "case m.Permanent:",
		"./checker", tc("dead-lettered with a reason code is clean")},
	{"past its deadline does not earn a dead-letter", fin,
		"case m.Deadline > 0 && t > m.Deadline:", "case false:",
		"./checker", tc("dead-lettered past its deadline, leased before it, is clean")},
	{"age measured from the enqueue, not the creation", fin,
		"if j.meta.Created > 0 {", "if false {",
		"./checker", tc("age budget exceeded counted from the job's creation")},
	{"past its age budget excuses any reason", fin,
		"case reason == ReasonAgeExceeded && m.AgeBudget > 0 && t-c.created(j) > m.AgeBudget:", "case m.AgeBudget > 0 && t-c.created(j) > m.AgeBudget:",
		"./checker", tc("past its age budget, dead-lettered for attempts it did not spend")},
	{"an idempotency conflict needs no proof", fin,
		"case reason == pipeline.ReasonIdempotencyConflict && j.conflict:", "case reason == pipeline.ReasonIdempotencyConflict:",
		"./checker", tc("an idempotency conflict the history does not show")},
	{"a proven idempotency conflict does not earn a dead-letter", fin,
		"case reason == pipeline.ReasonIdempotencyConflict && j.conflict:", "case false:",
		"./checker", tc("a proven idempotency conflict dead-lettered is by design")},
	{"an invalid job needs no proof", fin,
		"case reason == pipeline.ReasonInvalidJob && j.invalidKey:", "case reason == pipeline.ReasonInvalidJob:",
		"./checker", tc("a job refused as invalid although its key is valid")},
	{"a proven invalid job does not earn a dead-letter", fin,
		"case reason == pipeline.ReasonInvalidJob && j.invalidKey:", "case false:",
		"./checker", tc("an invalid job with no key dead-lettered is by design")},
	{"deaths excuse a dead-letter for any reason", fin,
		"case m.MaxAttempts > 0 && reason == pipeline.ReasonMaxAttempts && j.spent+c.deaths(j) >= m.MaxAttempts:", "case m.MaxAttempts > 0 && j.spent+c.deaths(j) >= m.MaxAttempts:",
		"./checker", tc("dead-lettered as permanent after its holders died, with no permanent error")},
	{"permanent_retried across two messages of a job", ck,
		"if j.enqueues < 2 && retried {", "if retried {",
		"./checker", tc("the second message of a job enqueued twice, after the first was dead-lettered")},
	{"permanent_retried never fires", ck,
		"case j.permFails == 2 && c.want(PermanentRetried):", "case false && j.permFails == 2 && c.want(PermanentRetried):",
		"./checker", tc("permanent error retried")},

	// dead_job_resurrected, cancelled_dead_lettered, cancelled_reprocessed,
	// reprocess_unaudited.
	{"dead_job_resurrected across two messages of a job", ck,
		"if j.deadOK != nil && j.enqueues < 2 && c.want(Resurrected) {", "if j.deadOK != nil && c.want(Resurrected) {",
		"./checker", tc("the second message of a job enqueued twice, after the first was dead-lettered")},
	{"cancelled_dead_lettered by the dead-letter's time, not the lease's", ck,
		"d.lease.t > j.meta.Deadline", "r.t > j.meta.Deadline",
		"./checker", tc("dead-lettered past its deadline, leased before it, is clean")},
	{"cancelled_dead_lettered: a job both cancelled and dead-lettered", fin,
		"if cancelled && dead && c.want(CancelledToDLQ) {", "if false && cancelled && dead && c.want(CancelledToDLQ) {",
		"./checker", tc("a job cancelled and then dead-lettered, leased before its deadline")},
	{"reprocess_unaudited: an audit entry without an operator passes", fin,
		"case !ok || a.Operator == \"\":", "case !ok:",
		"./checker", tc("reprocessed with an audit entry naming no operator")},

	// stale_commit_accepted, stale_ack_accepted, keys and tenants.
	{"stale_commit_accepted across two messages of a job", ck,
		"if j.enqueues > 1 || j.fenceOp == nil", "if j.fenceOp == nil",
		"./checker", tc("an older token of another message of the job committing is not stale")},
	{"stale_commit_accepted for a commit sent before the newer fence", ck,
		"if j.fenceOp.pos > invPos || !c.want(StaleCommit) {", "if false && j.fenceOp.pos > invPos || !c.want(StaleCommit) {",
		"./checker", tc("a commit sent before the newer fence completed is not proven stale")},
	{"stale_ack_accepted without a claim of fenced acks", ck,
		"c.opts.FencedAck && j.enqueues == 1 &&", "j.enqueues == 1 &&",
		"./checker", tc("a stale ack on a broker that does not claim fenced acks is not checked")},
	{"stale_ack_accepted across two messages of a job", ck,
		"c.opts.FencedAck && j.enqueues == 1 &&", "c.opts.FencedAck &&",
		"./checker", tc("an older token of another message of the job acking is not stale")},
	{"key_without_tenant: another tenant's key passes", ck,
		"if (!ok || (jt != \"\" && tenant != jt)) && c.want(KeyWithoutTenant) {", "if (!ok || (false && jt != \"\" && tenant != jt)) && c.want(KeyWithoutTenant) {",
		"./checker", tc("key of another tenant")},
	{"key_without_tenant: a key naming no tenant passes", ck,
		"if (!ok || (jt != \"\" && tenant != jt)) && c.want(KeyWithoutTenant) {", "if (jt != \"\" && tenant != jt) && c.want(KeyWithoutTenant) {",
		"./checker", tc("a key naming no tenant, for a job whose metadata names none")},
	{"tenants_share_key within one tenant", ck,
		"case jt != \"\" && c.tenant(k.owner) != jt && c.want(TenantsShareKey):", "case jt != \"\" && c.want(TenantsShareKey):",
		"./checker", tc("two jobs of one tenant and one payload under one key, the second deduped, are clean")},
	{"silent_reuse of the same payload", fin,
		"|| c.sameHash(o, j) ||", "||",
		"./checker", tc("two jobs of one tenant and one payload under one key, the second deduped, are clean")},
	{"silent_reuse: a result under another tenant's key passes", fin,
		"if k.owner != nil && c.tenant(k.owner) != \"\" && r.Tenant != c.tenant(k.owner) && c.want(SilentReuse) {",
		"if false && k.owner != nil && c.tenant(k.owner) != \"\" && r.Tenant != c.tenant(k.owner) && c.want(SilentReuse) {",
		"./checker", tc("a result stored under another tenant's key")},

	// dlq_leak, outbox_orphan, event_not_applied, commit lost.
	{"dlq_leak: the dead_letter call's reason unchecked", ck,
		"if !isReasonCode(op.Value) && c.want(DLQLeak) {", "if false && !isReasonCode(op.Value) && c.want(DLQLeak) {",
		"./checker", tc("dlq leak: error text only in the dead_letter call, the store's record holding a code")},
	{"dlq_leak: the store's record unchecked", fin,
		"if !isReasonCode(d.Reason) {", "if false {",
		"./checker", tc("dlq leak: error text only in the store's record")},
	{"outbox_orphan: an event the consumer applied still owed", fin,
		"if !k.hasEvent && r.EventID != \"\" && k.applied == 0 && c.want(OutboxOrphan) {", "if !k.hasEvent && r.EventID != \"\" && c.want(OutboxOrphan) {",
		"./checker", tc("a result whose event the consumer applied and the outbox no longer holds is clean")},
	{"outbox_orphan: an event without its result passes", fin,
		"if !k.hasResult && c.want(OutboxOrphan) {", "if false && !k.hasResult && c.want(OutboxOrphan) {",
		"./checker", tc("outbox orphan: an event without its result")},
	{"event_not_applied: an event parked for good still owed", fin,
		"!e.Dead && k.applied == 0", "k.applied == 0",
		"./checker", tc("an event parked for good is not owed to the consumer")},
	{"acknowledged_commit_lost never fires", fin,
		"!k.hasResult && c.want(CommitLost)", "false && c.want(CommitLost)",
		"./checker", tc("acknowledged commit lost")},

	// order_inversion, failed_but_applied, ambiguous_taken_as_known, the circuit.
	{"order_inversion: a lease before the earlier job's terminal call passes", fin,
		"(prev.terminal == nil || next.rare().firstLease.pos >= prev.rare().termInv)", "true",
		"./checker", tc("order inversion before the commit that acks")},
	{"order_inversion between enqueues that overlap", fin,
		"if next.enqInv != nil && js[m].okPos < next.enqInv.pos {", "if next.enqInv != nil {",
		"./checker", tc("overlapping enqueues have no order")},
	{"failed_but_applied despite a commit of unknown outcome", ck,
		"if k != nil && !k.committed && !k.uncertain && k.open <= 0", "if k != nil && !k.committed && k.open <= 0",
		"./checker", tc("a failed commit, then one of unknown outcome, then deduped, is clean")},
	{"failed_but_applied despite an enqueue of unknown outcome", ck,
		"if j.accepted || j.enqInfos > 0 || j.enqOpen > 0", "if j.accepted || j.enqOpen > 0",
		"./checker", tc("a failed enqueue, then one of unknown outcome, then delivered, is clean")},
	{"ambiguous: an ack after an ack timeout taken as success", ck,
		"case op.F == history.Ack && prevF == history.Commit:", "case op.F == history.Ack:",
		"./checker", tc("an ack retried after an ack timeout is clean")},
	{"ambiguous: an ack timeout is no unknown outcome", ck,
		"if op.Type == history.Info && (op.F == history.Commit || op.F == history.Ack) {", "if op.Type == history.Info && op.F == history.Commit {",
		"./checker", tc("an ack timeout taken as failure")},
	{"ambiguous: a nack after a timeout passes", ck,
		"case op.F == history.DeadLetter || op.F == history.Nack:", "case op.F == history.DeadLetter:",
		"./checker", tc("an ack timeout taken as failure", "a commit timeout taken as failure, the worker's bookkeeping in between")},
	{"circuit_opened_on_healthy_channel never fires", ck,
		"if !c.chanHit && c.want(CircuitOnHealthy) {", "if false && !c.chanHit && c.want(CircuitOnHealthy) {",
		"./checker", tc("circuit opened on a healthy channel")},
}
