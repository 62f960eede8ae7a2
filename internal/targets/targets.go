// Package targets turns a target description into the adapter, the effect store
// and the broker control of a run. It is the one place that knows every adapter
// package; the engine and the worker processes go through it.
package targets

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/pg"
	"github.com/durachk/durachk/pipeline"
	"github.com/durachk/durachk/pipeline/pgstore"
)

// ErrBadTarget marks a target description that cannot be used (exit 3).
var ErrBadTarget = errors.New("bad target")

// Spec is everything a process needs to reach the run's broker namespace and
// store. It travels to worker processes as JSON in a file of the run directory
// (mode 0600); it holds the URL with its credentials and is never logged or
// written into a report: use Redact for that.
type Spec struct {
	Name     string            `json:"name"`
	Kind     string            `json:"kind"` // postgres
	URL      string            `json:"url"`
	Options  map[string]string `json:"options,omitempty"`
	RunID    string            `json:"run_id"`
	StoreURL string            `json:"store_url"`
	// Store sabotage (negative controls only).
	NoFence       bool `json:"no_fence,omitempty"`
	KeyOnlyDedupe bool `json:"key_only_dedupe,omitempty"`
	// Broker-level negative controls.
	Volatile   bool `json:"volatile,omitempty"`
	BreakOrder bool `json:"break_order,omitempty"`
}

var runIDRE = regexp.MustCompile(`^[a-z0-9]{4,24}$`)

// StoreSchema is the effect store's schema of the run.
func (s Spec) StoreSchema() string { return "durachk_" + s.RunID }

// Parse reads a --target value: a broker URL with the broker's knobs as query
// parameters (postgres://host:port/db?lease_fifo=true&synchronous_commit=off).
func Parse(raw string) (Spec, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: cannot parse %s", ErrBadTarget, Redact(raw))
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return parsePostgres(raw, u)
	}
	return Spec{}, fmt.Errorf("%w: %s: unknown broker kind %q (known: mem, postgres)", ErrBadTarget, Redact(raw), u.Scheme)
}

// postgres knobs durachk reads from the URL; everything else is for pgx.
var pgKnobs = map[string]bool{"synchronous_commit": true, "fifo": true, "delivery_limit": true, "name": true}

func parsePostgres(raw string, u *url.URL) (Spec, error) {
	q := u.Query()
	opts := map[string]string{}
	for k := range q {
		if pgKnobs[k] {
			opts[k] = q.Get(k)
			q.Del(k)
		}
	}
	if opts["synchronous_commit"] != "" && !oneOf(opts["synchronous_commit"], "on", "off", "local", "remote_write", "remote_apply") {
		return Spec{}, fmt.Errorf("%w: synchronous_commit=%q", ErrBadTarget, opts["synchronous_commit"])
	}
	if q.Get("sslmode") == "" && isLoopback(u.Hostname()) {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	name := opts["name"]
	if name == "" {
		name = "postgres"
	}
	delete(opts, "name")
	return Spec{Name: name, Kind: "postgres", URL: u.String(), Options: opts, StoreURL: u.String()}, nil
}

func oneOf(v string, vs ...string) bool {
	for _, x := range vs {
		if v == x {
			return true
		}
	}
	return false
}

func isLoopback(h string) bool { return h == "127.0.0.1" || h == "localhost" || h == "::1" || h == "" }

// Redact removes any password from a URL-like string.
func Redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	user, _, hasPw := strings.Cut(rest[:at], ":")
	if !hasPw {
		return s
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// CheckRunID rejects a run id that cannot name a schema or queue.
func CheckRunID(id string) error {
	if !runIDRE.MatchString(id) {
		return fmt.Errorf("%w: run id %q must match %s", ErrBadTarget, id, runIDRE)
	}
	return nil
}

func (s Spec) pgOptions() pg.Options {
	o := pg.Options{FIFO: s.Options["fifo"] != "false", SyncCommit: s.Options["synchronous_commit"], MaxConns: 2}
	fmt.Sscan(s.Options["delivery_limit"], &o.DeliveryLimit)
	return o
}

// OpenQueue connects to the run's queue; Provision must have created it.
func OpenQueue(ctx context.Context, s Spec) (adapters.Queue, error) {
	switch s.Kind {
	case "postgres":
		return pg.Open(ctx, s.URL, s.RunID, s.pgOptions())
	}
	return nil, fmt.Errorf("%w: kind %q", ErrBadTarget, s.Kind)
}

// OpenStore connects to the run's effect store (a schema of its own).
func OpenStore(ctx context.Context, s Spec) (pipeline.Store, error) {
	return pgstore.Open(ctx, s.StoreURL, s.StoreSchema(), pgstore.Options{NoFence: s.NoFence, KeyOnlyDedupe: s.KeyOnlyDedupe, MaxConns: 2})
}

// Dropper is implemented by queues and stores that can remove what they created.
type Dropper interface {
	Drop(ctx context.Context) error
}

// Teardown removes the run's queue and store namespaces. It is safe to call on
// a run that was never (or only partly) provisioned.
func Teardown(ctx context.Context, s Spec) error {
	var errs []error
	if q, err := OpenQueue(ctx, s); err == nil {
		if d, ok := q.(Dropper); ok {
			errs = append(errs, d.Drop(ctx))
		}
		q.Close()
	} else {
		errs = append(errs, err)
	}
	if st, err := OpenStore(ctx, s); err == nil {
		if d, ok := st.(Dropper); ok {
			errs = append(errs, d.Drop(ctx))
		}
		st.Close()
	} else {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Self is the path of the running durachk binary, which re-executes itself as
// `durachk worker`.
func Self() (string, error) { return os.Executable() }
