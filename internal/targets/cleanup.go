package targets

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/adapters/rabbit"
	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/adapters/sqs"
)

// Scope is what a kind's cleanup may remove: namespaces of runs for which
// Live is false. Runs are the dead runs registered (HoldRun) for the target's
// endpoint — what a broker that cannot list its namespaces needs. Named are
// the runs the caller named (durachk cleanup --run) that no effect store
// knows of any more (their schema is gone) and that hold no lock: such a
// broker derives their names from the target's own options.
type Scope struct {
	Live  func(runID string) bool
	Runs  []DeadRun
	Named []string
}

var defaultPorts = map[string]string{"postgres": "5432", "postgresql": "5432", "redis": "6379", "amqp": "5672", "amqps": "5671", "sqs": "4566"}

// Endpoint names the broker (and database, vhost or region) of s without
// credentials or knobs: postgres://127.0.0.1:5432/test, amqp://127.0.0.1:5672/,
// redis://127.0.0.1:6379/0, sqs://aws?region=eu-west-1. A run's registry
// records it; cleanup of a target matches it.
func Endpoint(s Spec) string {
	u, err := url.Parse(s.URL)
	if err != nil {
		return s.Kind
	}
	host := strings.ToLower(u.Hostname())
	if host == "localhost" {
		host = "127.0.0.1"
	}
	port := u.Port()
	if port == "" && host != "aws" {
		port = defaultPorts[u.Scheme]
	}
	hp := host
	if port != "" {
		hp = net.JoinHostPort(host, port)
	}
	path := u.Path
	if path == "" {
		path = "/"
	}
	if s.Kind == "redis" && path == "/" {
		path = "/0"
	}
	ep := s.Kind + "://" + hp + path
	if s.Kind == "sqs" {
		region := s.Options["region"]
		if region == "" {
			region = "us-east-1"
		}
		ep += "?region=" + region
	}
	return ep
}

// Cleanup removes what runs that are no longer live left behind for target s:
// the faults they made on a broker they did not start and did not undo
// (restoreRun: s's control commands undo them), the run namespaces on its
// broker (the kind's Cleanup) and the effect-store schemas of the runs
// registered for s's endpoint, or registered nowhere.
// Store schemas of runs registered for another target are kept (their
// namespace there is still to be removed) and said so. A run is live while it
// holds its run lock (HoldRun); nothing of a live run is touched. It returns
// one line per thing removed ("removed ...") or kept ("kept ...").
//
// runs, if any, narrow the cleanup to those run ids (durachk cleanup --run;
// tests, which must not touch other tests' namespaces).
func Cleanup(ctx context.Context, s Spec, runs []string) ([]string, error) {
	k, err := kindOf(s)
	if err != nil {
		return nil, err
	}
	held, done, err := LiveRuns(ctx, s.StoreURL)
	if err != nil {
		return nil, err
	}
	defer done()
	live := held
	if len(runs) > 0 {
		live = func(id string) bool { return !slices.Contains(runs, id) || held(id) }
	}
	store, err := pgdb.Open(ctx, s.StoreURL, pgdb.Options{MaxConns: 1})
	if err != nil {
		return nil, fmt.Errorf("cleanup %s: %w", Redact(s.StoreURL), err)
	}
	defer store.Close()
	dead, err := deadRuns(ctx, store, live)
	if err != nil {
		return nil, fmt.Errorf("cleanup %s: %w", Redact(s.StoreURL), err)
	}
	ep := Endpoint(s)
	mine := func(r DeadRun) bool { return r.Registered && r.Kind == s.Kind && r.Endpoint == ep }
	scope := Scope{Live: live}
	for _, r := range dead {
		if mine(r) {
			scope.Runs = append(scope.Runs, r)
		}
	}
	for _, id := range runs {
		if !live(id) && !slices.ContainsFunc(dead, func(r DeadRun) bool { return r.ID == id }) {
			scope.Named = append(scope.Named, id)
		}
	}
	var lines []string
	// First what the runs faulted on a broker they did not start: its
	// namespaces are reached through it.
	for _, r := range scope.Runs {
		restored, err := restoreRun(ctx, store, s, r.ID)
		lines = append(lines, restored...)
		if err != nil {
			return lines, fmt.Errorf("cleanup: %s", scrubURL(err.Error(), s.URL)) // the registry stays: it says what is left
		}
	}
	if k.Cleanup != nil {
		removed, err := k.Cleanup(ctx, s, scope)
		for _, r := range removed {
			lines = append(lines, "removed "+r)
		}
		if err != nil {
			return lines, err // the store schemas stay: they name what is left
		}
	}
	for _, r := range dead {
		schema := "durachk_" + r.ID
		if r.Registered && !mine(r) {
			lines = append(lines, fmt.Sprintf("kept effect-store schema %s: run %s used %s (clean up that target too)", schema, r.ID, r.Endpoint))
			continue
		}
		if live(r.ID) {
			continue
		}
		if err := store.DropSchema(ctx, schema); err != nil {
			return lines, fmt.Errorf("cleanup %s: %w", Redact(s.StoreURL), err)
		}
		lines = append(lines, "removed postgres schema "+schema+" (effect store)")
	}
	return lines, nil
}

// cleanupRedis deletes the keys of dead runs, found with SCAN.
func cleanupRedis(ctx context.Context, s Spec, c Scope) ([]string, error) {
	removed, err := rq.DeleteRunKeys(ctx, s.URL, c.Live)
	if err != nil {
		return removed, fmt.Errorf("cleanup %s: %w", Redact(s.URL), err)
	}
	return removed, nil
}

// cleanupRabbit deletes the queues and exchange of every dead run registered
// for this broker: AMQP cannot list queues, so the run registry names them.
// A run named by the caller whose registry entry (its store schema) is gone
// is deleted by the names the target's own options give it.
func cleanupRabbit(ctx context.Context, s Spec, c Scope) ([]string, error) {
	runs := slices.Clone(c.Runs)
	for _, id := range c.Named {
		runs = append(runs, DeadRun{ID: id, Options: s.Options})
	}
	var removed []string
	for _, r := range runs {
		o, err := rabbitOptions(Spec{Options: r.Options})
		if err != nil {
			return removed, err
		}
		d, err := rabbit.DeleteRun(s.URL, r.ID, o)
		removed = append(removed, d...)
		if err != nil {
			return removed, fmt.Errorf("cleanup %s: %w", Redact(s.URL), err)
		}
	}
	return removed, nil
}

// cleanupSQS deletes the queues (durachk-<runid>, durachk-<runid>-dlq, with
// .fifo) of dead runs at the endpoint.
func cleanupSQS(ctx context.Context, s Spec, c Scope) ([]string, error) {
	o, err := SQSOptions(s)
	if err != nil {
		return nil, err
	}
	client, err := sqs.NewClient(ctx, o)
	if err != nil {
		return nil, err
	}
	urls, err := sqs.ListRunQueues(ctx, client, sqs.Prefix)
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, u := range urls {
		id := sqsRunID(u)
		if id == "" || c.Live(id) {
			continue
		}
		if err := sqs.DeleteQueue(ctx, client, u); err != nil {
			return gone, err
		}
		gone = append(gone, "sqs queue "+u)
	}
	return gone, nil
}

// sqsRunID is the run id in a queue URL's name, "" if it is not a run's queue.
func sqsRunID(queueURL string) string {
	name := queueURL[strings.LastIndex(queueURL, "/")+1:]
	rest, ok := strings.CutPrefix(name, sqs.Prefix)
	if !ok {
		return ""
	}
	rest = strings.TrimSuffix(rest, ".fifo")
	rest = strings.TrimSuffix(rest, "-dlq")
	if CheckRunID(rest) != nil {
		return ""
	}
	return rest
}
