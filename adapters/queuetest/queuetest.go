// Package queuetest is the conformance suite of the broker port, in the manner of
// testing/fstest.TestFS and x/net/nettest.TestConn: Run opens queues through a
// factory, runs every script of the catalogue against the broker under test and
// against the reference broker (adapters/mem, configured the same way), and
// checks both answers at every step. Where a broker documentedly differs from the
// reference semantics, its Features say so and the affected steps state their
// alternative expectation in terms of the feature, never of a broker name.
//
// Scripts are sequences of Steps; an adapter's own scripts (knobs, failure
// injection) run through RunScript with the same harness.
//
// Timed steps stretch with the machine's load (LoadFactor): a lease a script
// means to stay live never runs out because the machine was busy.
//
// The package imports only the standard library, adapters, adapters/mem and
// internal/loadavg.
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/mem"
)

// Options are what a script needs from the queue a factory opens. A factory that
// cannot honour one opens the queue anyway: the suite reads the queue's
// Capabilities and skips the script with the reason.
type Options struct {
	// DeliveryLimit: the broker dead-letters a message natively when it would be
	// delivered for the (limit+1)-th time, as adapters/mem does (so a limit of 2
	// allows two deliveries). 0: no limit. Scripts that set it need
	// Capabilities.DeadLetter == Native.
	DeliveryLimit int
	// FIFO: the jobs of one group are delivered in acceptance order, one at a
	// time. Scripts that set it need Capabilities.FIFO.
	FIFO bool
	// NackDelay: the script nacks with delays it wants honoured; a factory that
	// can choose (an emulated delay) turns it on. Scripts that set it need
	// Capabilities.DelayedNack != None.
	NackDelay bool
}

// Features declare where the broker under test documentedly differs from the
// reference semantics of adapters/mem, beyond what its Capabilities already
// say. The suite also derives deviations from the Capabilities of each queue it
// opens: FencedAck false (a call with a superseded delivery may succeed: those
// steps are not made), DelayedNack None (a nack requeues at once), DeliveryCount
// None (Attempt is 0), LeaseExtension None or no Extender, Lease None, no FIFO,
// no native dead-lettering. Cite the broker's documentation where a flag is set.
// The zero value is the reference semantics.
type Features struct {
	// LeaseUnit is the broker's clock granularity: leases, delays and visibility
	// timeouts are whole multiples of it (SQS: 1 s). Every duration of a script
	// (written for a 150 ms short lease) is scaled so that a short lease is one
	// unit. 0: exact durations.
	LeaseUnit time.Duration
	// Unordered: without FIFO the queue keeps no acceptance order (best-effort
	// ordering); scripts that check the order are skipped.
	Unordered bool
	// NackIsNewMessage: a Nack re-adds the job as a new message, so the nacked
	// delivery's message is gone: a later call with it is ErrLeaseLost, not
	// ErrStaleToken.
	NackIsNewMessage bool
	// ExpiryOnNextLease: an expired lease is taken back only by the holding
	// Queue's next Lease (or its connection's end), not by the clock: until then
	// Inspect reports it in flight.
	ExpiryOnNextLease bool
	// PendingInFlight: the broker holds a delivered job as unacknowledged
	// until it is acked or delivered again, whether its lease is live, ran
	// out, or it was nacked with a delay: Inspect lists it in flight until
	// the next Lease takes it (JetStream's ack pending).
	PendingInFlight bool
	// StaleIsLost: the broker cannot tell a superseded delivery from a finished
	// one; the port allows ErrStaleToken or ErrLeaseLost for either.
	StaleIsLost bool
	// InFlightUnnamed: Inspect counts the deliveries in flight but cannot name
	// their jobs.
	InFlightUnnamed bool
	// InspectRedelivers: Inspect reads the queued jobs by receiving and
	// returning them, so every Inspect that lists a queued job is a delivery of
	// it (its later token and attempt grow): inspections of jobs a script leases
	// later are not made.
	InspectRedelivers bool
	// Unnamed: Inspect names no queued or in-flight job and counts them only
	// approximately (Inventory.Unnamed): only emptiness is compared.
	Unnamed bool
	// ExtendExpiredMaySucceed: extending a lease that already ran out, before
	// anyone else leased the job, may succeed instead of ErrLeaseLost.
	ExtendExpiredMaySucceed bool
	// ExpiryReleases: a lease that runs out makes the job available again at
	// once, and the broker refuses the expired delivery's ack (a Kafka share
	// group's acquisition lock): the ack is ErrLeaseLost and the job is
	// delivered again.
	ExpiryReleases bool
	// LateDeleteAmbiguous: an ack answered after the lease can have run out
	// is ErrAmbiguous (SQS answers a delete with an expired delivery's
	// receipt handle without error, deleting the message or not).
	LateDeleteAmbiguous bool
	// Parallel runs the scripts in parallel (for brokers whose LeaseUnit is
	// coarse enough that a busy machine cannot upset a script's timing).
	Parallel bool
	// Patience is how long a waiting step (a lease or inspect after a sleep)
	// retries until the broker shows what the step wants. 0: 10 s. Stretched
	// by LoadFactor, like every duration of a script.
	Patience time.Duration
}

// Step is one call of a script. D names a delivery by the order in which the
// script's leases returned it.
type Step struct {
	// Op is enqueue, lease, ack, nack, extend, dead, sleep, inspect or call.
	Op string
	// Arg is the job of an enqueue: "id" or "id@group".
	Arg string
	D   int
	// Dur is the lease, nack delay, extension or sleep, in reference time: a
	// short lease is 150 ms (scaled by Features.LeaseUnit, and stretched by
	// LoadFactor on a busy machine).
	Dur time.Duration
	// Want is the answer: "ok", "stale", "lost", "none", "closed", "unavailable",
	// "ambiguous", "error: ..."; a lease that delivers: "id aN tM" (attempt,
	// token); an inspect: "queued=[a b] inflight=[c] dead=[d] ok", with
	// "moved=[d:dead_lettered] " before the outcome when the broker moved
	// jobs on its own (see Moved).
	Want string
	// Wait retries a lease that found nothing, or an inspect that shows
	// something else, until it gives Want or Features.Patience runs out.
	Wait bool
	// Call is op "call": a failure the test injects (e.g. closing the
	// connection), given the queue and the deliveries so far. Its error is
	// compared with Want when Want is set.
	Call func(q adapters.Queue, ds []adapters.Delivery) error

	alt []alt
}

// alt is a step's expectation where the queue under test has a feature.
type alt struct {
	when func(env) bool
	want string // replaces Step.Want; "" with skip
	also bool   // accept want in addition to Step.Want
	skip bool   // the step is not made
}

// env is what a script sees of the queue under test: its declared Features and
// the Capabilities of the opened queue.
type env struct {
	Features
	caps adapters.Capabilities
	q    adapters.Queue
	load float64 // LoadFactor when the script started; 0 is 1
}

// newEnv is the env of a script about to run on q: the machine's load is read
// now, once, so that every step of the script stretches alike.
func newEnv(f Features, q adapters.Queue) env {
	return env{Features: f, caps: q.Capabilities(), q: q, load: LoadFactor()}
}

// Reference semantics: short leases, the wait after which they have expired,
// and a lease long enough never to expire during a script.
const (
	short = 150 * time.Millisecond
	past  = 400 * time.Millisecond
	long  = time.Minute
)

// scale turns a script's duration (written for a 150 ms short lease) into the
// one to use: a short lease becomes the broker's LeaseUnit or short stretched
// by the machine's load, whichever is longer. Every duration stretches alike,
// so a script keeps its order of events (a lease that must run out still runs
// out first) while every margin grows with the load.
func (e env) scale(d time.Duration) time.Duration {
	unit := max(e.LeaseUnit, time.Duration(float64(short)*max(e.load, 1)))
	if unit <= short {
		return d
	}
	return time.Duration(float64(d) * float64(unit) / float64(short))
}

// patience is how long a waiting step retries: Features.Patience (10 s when
// unset), stretched by the machine's load.
func (e env) patience() time.Duration {
	p := e.Patience
	if p <= 0 {
		p = 10 * time.Second
	}
	return time.Duration(float64(p) * max(e.load, 1))
}

// Outcome names the sentinel an error wraps, as scripts write it.
func Outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, adapters.ErrStaleToken):
		return "stale"
	case errors.Is(err, adapters.ErrLeaseLost):
		return "lost"
	case errors.Is(err, adapters.ErrNoJob):
		return "none"
	case errors.Is(err, adapters.ErrClosed):
		return "closed"
	case errors.Is(err, adapters.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, adapters.ErrAmbiguous):
		return "ambiguous"
	}
	return "error: " + err.Error()
}

// Job is the job of a script's enqueue "id" or "id@group".
func Job(spec string) adapters.Job {
	id, group, _ := strings.Cut(spec, "@")
	return adapters.Job{ID: id, Tenant: "acme", DocumentID: "doc-" + id, Version: 1, Payload: []byte("payload " + id),
		CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), MaxAttempts: 5, Group: group}
}

var invRE = regexp.MustCompile(`^queued=\[([^\]]*)\] inflight=\[([^\]]*)\] dead=\[([^\]]*)\] (.*)$`)

// render shows a delivery as the step's feature-aware expectation shows it.
func (e env) delivery(d adapters.Delivery) string {
	if e.caps.DeliveryCount == adapters.None && d.Attempt == 0 {
		return fmt.Sprintf("%s a- t%d", d.Job.ID, d.Token)
	}
	return fmt.Sprintf("%s a%d t%d", d.Job.ID, d.Attempt, d.Token)
}

func (e env) inventory(inv adapters.Inventory, err error) string {
	return e.project(fmt.Sprintf("queued=%s inflight=%s dead=%s %s%s", list(inv.Queued), list(inv.InFlight), list(inv.DeadLettered), Moved(inv.Moved), Outcome(err)), inv.Unnamed)
}

// Moved renders what the broker did on its own as an inspect step writes it:
// "moved=[a:dead_lettered *3:trimmed] " (job:action, or *count:action for
// messages the broker cannot name), or "" when it did nothing, so that every
// inspect that does not mention it asserts that the broker moved nothing (a
// job the pipeline dead-lettered is never listed).
func Moved(ms []adapters.BrokerAction) string {
	if len(ms) == 0 {
		return ""
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		who := m.Job
		if who == "" {
			who = "*" + strconv.Itoa(max(m.Count, 1))
		}
		parts[i] = who + ":" + m.Action
	}
	return "moved=[" + strings.Join(parts, " ") + "] "
}

func list(ids []string) string { return "[" + strings.Join(ids, " ") + "]" }

var attemptRE = regexp.MustCompile(`^(\S+) a\d+ (t\d+)$`)

// project maps an answer (wanted or got) onto what the features let the
// broker tell: attempts where it counts none, in-flight counts where it cannot
// name them, emptiness where it names nothing, stale as lost where it cannot
// tell them apart.
func (e env) project(s string, unnamed int) string {
	if e.StaleIsLost && s == "stale" {
		return "lost"
	}
	if e.caps.DeliveryCount == adapters.None {
		s = attemptRE.ReplaceAllString(s, "$1 a- $2")
	}
	m := invRE.FindStringSubmatch(s)
	if m == nil {
		return s
	}
	queued, inflight := strings.Fields(m[1]), strings.Fields(m[2])
	switch {
	case e.Unnamed:
		return fmt.Sprintf("drained=%v dead=[%s] %s", len(queued)+len(inflight)+unnamed == 0, m[3], m[4])
	case e.InFlightUnnamed:
		return fmt.Sprintf("queued=[%s] inflight=%d dead=[%s] %s", m[1], len(inflight), m[3], m[4])
	}
	return s
}

// Script is a named sequence of steps run against a queue opened with Options.
type Script struct {
	Name    string
	Options Options
	Steps   []Step
	// needs returns why the script cannot run on e ("" if it can).
	needs func(e env) string
}

// RunScript runs steps against q, whose documented deviations are f, and reports
// every step whose answer differs from what it wants.
func RunScript(t testing.TB, q adapters.Queue, f Features, steps []Step) {
	t.Helper()
	e := newEnv(f, q)
	if why := e.abilities(steps); why != "" {
		t.Skip(why)
	}
	for _, err := range e.run(steps) {
		t.Error(err)
	}
	t.Logf("%d steps checked", e.checked(steps))
}

// abilities says which ability the steps need that q lacks.
func (e env) abilities(steps []Step) string {
	for _, s := range steps {
		switch s.Op {
		case "extend":
			if _, ok := e.q.(adapters.Extender); !ok || e.caps.LeaseExtension == adapters.None {
				return "the queue cannot extend a lease (no Extender or LeaseExtension none)"
			}
		case "dead":
			if _, ok := e.q.(adapters.DeadLetterer); !ok {
				return "the queue has no DeadLetterer"
			}
		case "inspect":
			if _, ok := e.q.(adapters.Inspector); !ok {
				return "the queue has no Inspector"
			}
		}
	}
	return ""
}

// run makes the steps and returns a difference per step that answered other
// than wanted.
func (e env) run(steps []Step) []error {
	ctx := context.Background()
	var ds []adapters.Delivery
	var diffs []error
	for i, s := range steps {
		want, also, skip := s.Want, "", false
		for _, a := range s.alt {
			if a.when(e) {
				switch {
				case a.skip:
					skip = true
				case a.also:
					also = a.want
				default:
					want = a.want
				}
			}
		}
		if skip {
			continue
		}
		if needsD := s.Op == "ack" || s.Op == "nack" || s.Op == "extend" || s.Op == "dead"; needsD && s.D >= len(ds) {
			return append(diffs, fmt.Errorf("step %d %s: delivery %d was never leased", i, s.Op, s.D))
		}
		dur := e.scale(s.Dur)
		deadline := time.Now().Add(e.patience())
		var got string
		for {
			switch s.Op {
			case "enqueue":
				got = Outcome(e.q.Enqueue(ctx, Job(s.Arg)))
			case "lease":
				d, err := e.q.Lease(ctx, dur)
				if got = Outcome(err); err == nil {
					ds = append(ds, d)
					got = e.delivery(d)
				}
			case "ack":
				got = Outcome(e.q.Ack(ctx, ds[s.D]))
			case "nack":
				got = Outcome(e.q.Nack(ctx, ds[s.D], dur))
			case "extend":
				got = Outcome(e.q.(adapters.Extender).Extend(ctx, ds[s.D], dur))
			case "dead":
				got = Outcome(e.q.(adapters.DeadLetterer).DeadLetter(ctx, ds[s.D], "permanent_error"))
			case "sleep":
				time.Sleep(dur)
			case "inspect":
				got = e.inventory(e.q.(adapters.Inspector).Inspect(ctx))
			case "call":
				got = Outcome(s.Call(e.q, ds))
			default:
				return append(diffs, fmt.Errorf("step %d: unknown op %q", i, s.Op))
			}
			if s.Op == "sleep" || (s.Op == "call" && s.Want == "") {
				break
			}
			got = e.project(got, 0)
			w := e.project(want, 0)
			if got == w || (also != "" && got == e.project(also, 0)) {
				break
			}
			retry := s.Wait && time.Now().Before(deadline) && (s.Op == "inspect" || (s.Op == "lease" && got == "none"))
			if !retry {
				if also != "" {
					w += " (or " + e.project(also, 0) + ")"
				}
				diffs = append(diffs, fmt.Errorf("step %d %s %s: got %q, want %q", i, s.Op, s.Arg, got, w))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return diffs
}

// Run runs every script of the catalogue that applies: a subtest per script,
// with a subtest "queue" (a queue open returns; open registers its cleanup
// with t) and a subtest "mem" (the reference broker, configured the same
// way, on the wall clock, run at the same time as the queue: its steps sleep
// as long, and one after the other they doubled the suite's wall time). A
// script that needs an ability the queue lacks is skipped with the reason.
func Run(t *testing.T, open func(t *testing.T, o Options) adapters.Queue, f Features) {
	for _, sc := range catalogue {
		t.Run(sc.Name, func(t *testing.T) {
			if f.Parallel {
				t.Parallel()
			}
			type outcome struct {
				skip    string
				errs    []error
				checked int
			}
			ref := make(chan outcome, 1)
			go func() {
				q := reference(sc.Options)
				defer q.Close()
				e := newEnv(Features{}, q)
				o := outcome{skip: e.skip(sc), checked: e.checked(sc.Steps)}
				if o.skip == "" {
					o.errs = e.run(sc.Steps)
				}
				ref <- o
			}()
			t.Run("queue", func(t *testing.T) {
				if f.Parallel {
					t.Parallel()
				}
				runScript(t, open(t, sc.Options), f, sc)
			})
			o := <-ref
			t.Run("mem", func(t *testing.T) {
				if o.skip != "" {
					t.Skip(o.skip)
				}
				for _, err := range o.errs {
					t.Error(err)
				}
				t.Logf("%d steps checked", o.checked)
			})
		})
	}
}

func reference(o Options) *mem.Queue {
	return mem.New(mem.Options{DeliveryLimit: o.DeliveryLimit, FIFO: o.FIFO})
}

func runScript(t *testing.T, q adapters.Queue, f Features, sc Script) {
	t.Helper()
	e := newEnv(f, q)
	if why := e.skip(sc); why != "" {
		t.Skip(why)
	}
	for _, err := range e.run(sc.Steps) {
		t.Error(err)
	}
	t.Logf("%d steps checked", e.checked(sc.Steps))
}

// skip says why sc cannot run on e ("" if it can).
func (e env) skip(sc Script) string {
	if why := e.abilities(sc.Steps); why != "" {
		return why
	}
	switch {
	case sc.Options.FIFO && !e.caps.FIFO:
		return "the queue opened with FIFO does not claim FIFO"
	case sc.Options.DeliveryLimit > 0 && e.caps.DeadLetter != adapters.Native:
		return "the queue opened with a delivery limit does not dead-letter natively (Capabilities.DeadLetter " + string(e.caps.DeadLetter) + ")"
	case sc.Options.NackDelay && e.caps.DelayedNack == adapters.None:
		return "the queue opened with NackDelay does not delay a nack (Capabilities.DelayedNack none)"
	}
	if sc.needs != nil {
		return sc.needs(e)
	}
	return ""
}

// checked counts the steps whose answer e compares.
func (e env) checked(steps []Step) int {
	n := 0
	for _, s := range steps {
		skip := false
		for _, a := range s.alt {
			skip = skip || (a.skip && a.when(e))
		}
		if !skip && s.Op != "sleep" && (s.Op != "call" || s.Want != "") {
			n++
		}
	}
	return n
}

// Check is Run outside go test: it runs every script that applies against the
// queues open returns and against the reference broker, and returns every
// difference as one joined error (nil: the queue conforms). Each queue is
// dropped (if it has a Drop(ctx) error method) and closed after its script.
// Scripts the queue cannot run are left out.
func Check(open func(o Options) (adapters.Queue, error), f Features) error {
	return check(open, f, nil)
}

// check is Check over the scripts keep accepts (nil: every one): a test of
// Check's own machinery needs only the scripts its case is about, each of
// which takes seconds of wall time.
func check(open func(o Options) (adapters.Queue, error), f Features, keep func(Script) bool) error {
	var errs []error
	for _, sc := range catalogue {
		if keep != nil && !keep(sc) {
			continue
		}
		ref := reference(sc.Options)
		for _, err := range newEnv(Features{}, ref).run(sc.Steps) {
			errs = append(errs, fmt.Errorf("%s/mem: %w", sc.Name, err))
		}
		_ = ref.Close()
		q, err := open(sc.Options)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: open: %w", sc.Name, err))
			continue
		}
		e := newEnv(f, q)
		if e.skip(sc) == "" {
			for _, err := range e.run(sc.Steps) {
				errs = append(errs, fmt.Errorf("%s/queue: %w", sc.Name, err))
			}
		}
		if d, ok := q.(interface{ Drop(context.Context) error }); ok {
			if err := d.Drop(context.Background()); err != nil {
				errs = append(errs, fmt.Errorf("%s: drop: %w", sc.Name, err))
			}
		}
		_ = q.Close()
	}
	return errors.Join(errs...)
}
