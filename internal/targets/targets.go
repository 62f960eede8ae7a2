// Package targets turns a target description into the adapter, the effect store
// and the broker control of a run. Each broker kind registers itself from a file
// of its own (postgres.go, redis.go, ...); the engine and the worker processes
// go through this package only.
package targets

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/internal/redact"
	"github.com/durachk/durachk/pipeline"
	"github.com/durachk/durachk/pipeline/pgstore"
)

// ErrBadTarget marks a target description that cannot be used (exit 3).
var ErrBadTarget = errors.New("bad target")

// Spec is everything a process needs to reach the run's broker namespace and
// store. It travels to worker processes as JSON in a file of the run directory
// (mode 0600); it holds URLs with their credentials and is never logged or
// written into a report: use Redact for that.
type Spec struct {
	Name     string            `json:"name"`
	Kind     string            `json:"kind"`
	URL      string            `json:"url"`
	Options  map[string]string `json:"options,omitempty"`
	RunID    string            `json:"run_id"`
	StoreURL string            `json:"store_url"`
	// Parent is the id of the durachk command (run, explore) the run belongs
	// to, the one it prints: the run's registry records it, so that
	// `durachk cleanup --run <parent>` reaches every run of that command.
	Parent string `json:"parent,omitempty"`
	// Store sabotage (negative controls only).
	NoFence       bool `json:"no_fence,omitempty"`
	KeyOnlyDedupe bool `json:"key_only_dedupe,omitempty"`
	// Broker-level negative controls.
	Volatile   bool `json:"volatile,omitempty"`
	BreakOrder bool `json:"break_order,omitempty"`
	// Unreplicated: the broker acknowledges a write before any replica has
	// it (the negative control of the cluster contracts).
	Unreplicated bool `json:"unreplicated,omitempty"`
	// WritableReplicas: a replicated broker's replicas take writes of their
	// own (Redis replica-read-only no).
	WritableReplicas bool `json:"writable_replicas,omitempty"`
	// DialThrough maps a node's address to the address clients dial for it
	// instead (durachk's proxy in front of a node of an existing Redis
	// cluster, which a partition cuts: the Sentinels name the nodes by
	// their own addresses). Set by the run, never parsed from a target.
	DialThrough map[string]string `json:"dial_through,omitempty"`
	// Control holds the control.* commands (control.go), keyed "kill",
	// "<node>.kill", ..., "timeout". Never sent to worker processes.
	Control map[string]string `json:"-"`
}

// StoreSchema is the effect store's schema of the run.
func (s Spec) StoreSchema() string { return "durachk_" + s.RunID }

// Instance is a private broker instance that a run may kill and restart. The
// harness starts it as a direct child and waits on it. Not safe for concurrent use.
type Instance interface {
	// URL is the instance's address, in the kind's URL form.
	URL() string
	// Kill sends SIGKILL and waits for the process to be gone.
	Kill() error
	// Restart starts the instance again on the same data and port and waits until
	// it accepts connections.
	Restart(ctx context.Context) error
	// Stop ends the instance and removes its data. Idempotent.
	Stop() error
}

// Kind is one broker kind. Parse and OpenQueue are required; the rest are
// optional abilities (nil: not available).
type Kind struct {
	Name    string
	Schemes []string
	// Parse reads a --target URL and its knobs; it must reject unknown knobs.
	Parse func(raw string, u *url.URL) (Spec, error)
	// OpenQueue connects to the run's queue namespace, creating it if needed.
	OpenQueue func(ctx context.Context, s Spec) (adapters.Queue, error)
	// Version names what the target is ("postgres 15.19"), read from the broker.
	Version func(ctx context.Context, s Spec) (string, error)
	// StartPrivate starts a private instance in dir (for contracts that kill the
	// broker) and returns it with spec pointing at it.
	StartPrivate func(ctx context.Context, s Spec, dir string) (Instance, Spec, error)
	// CanStartPrivate says why StartPrivate cannot work on this machine, or nil.
	CanStartPrivate func() error
	// Durability are the settings of the private instance that decide what
	// survives a kill or a power loss; ServerSettings reads the target
	// server's values of them over its own connection, PrivateVersion names
	// the broker a private instance runs ("redis 7.0.15"). See settings.go.
	Durability     []DurabilitySetting
	ServerSettings func(ctx context.Context, s Spec) (ServerSettings, error)
	PrivateVersion func() (string, error)
	// Cleanup removes the run namespaces on the target's broker of runs that
	// are not live (durachk cleanup; see Cleanup in cleanup.go), and says what
	// it removed, one thing per line.
	Cleanup func(ctx context.Context, s Spec, c Scope) ([]string, error)
	// Cluster, if set, starts and faults replicated topologies (cluster.go).
	Cluster *ClusterKind
	// PrivateWithoutHost: a URL of this kind without a host names no broker
	// of the user's, and every run starts a private instance of its own
	// (PrivateOnly).
	PrivateWithoutHost bool
}

var kinds = map[string]*Kind{}

// Register adds a kind; it panics on a duplicate scheme (a programming error).
func Register(k *Kind) {
	names := append([]string{k.Name}, k.Schemes...)
	for _, s := range names {
		if other, dup := kinds[s]; dup && other != k {
			panic("targets: duplicate kind or scheme " + s)
		}
		kinds[s] = k
	}
}

// Lookup returns the kind registered under name or scheme.
func Lookup(name string) (*Kind, bool) {
	k, ok := kinds[name]
	return k, ok
}

func schemes() string {
	var out []string
	for s := range kinds {
		out = append(out, s)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// Parse reads a --target value: a broker URL with the broker's knobs as query
// parameters.
func Parse(raw string) (Spec, error) {
	if err := checkRaw(raw); err != nil {
		return Spec{}, err
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: cannot parse %s", ErrBadTarget, Echo(raw))
	}
	k, ok := kinds[u.Scheme]
	if !ok {
		return Spec{}, fmt.Errorf("%w: %s: unknown broker kind %q (known: mem, %s)", ErrBadTarget, Echo(raw), redact.Clip(u.Scheme), schemes())
	}
	if err := checkURL(raw, u); err != nil {
		return Spec{}, err
	}
	control, err := parseControl(u)
	if err != nil {
		return Spec{}, err
	}
	harness, err := powerLossKnobs(k, u)
	if err != nil {
		return Spec{}, err
	}
	worker, err := workerKnobs(u)
	if err != nil {
		return Spec{}, err
	}
	if control != nil || harness != nil || worker != nil {
		raw = u.String() // the kind sees its own knobs only
	}
	s, err := k.Parse(raw, u)
	if err != nil {
		return Spec{}, err
	}
	if err := checkCluster(k, s); err != nil {
		return Spec{}, err
	}
	for key, v := range worker {
		if harness == nil {
			harness = map[string]string{}
		}
		harness[key] = v
	}
	for key, v := range harness {
		if s.Options == nil {
			s.Options = map[string]string{}
		}
		s.Options[key] = v
	}
	s.Kind, s.Control = k.Name, control
	if PrivateOnly(s) && control != nil {
		return Spec{}, fmt.Errorf("%w: %s: control.* commands need a broker of yours; without a host every run starts a private one", ErrBadTarget, Echo(raw))
	}
	if s.StoreURL == "" {
		s.StoreURL = DefaultStoreURL()
	}
	return s, nil
}

// Redact removes the password and every secret-looking query parameter from a
// URL-like string.
func Redact(s string) string { return redact.URL(s) }

var runIDRE = regexp.MustCompile(`^[a-z0-9]{4,24}$`)

// CheckRunID rejects a run id that cannot name a schema, key prefix or queue.
func CheckRunID(id string) error {
	if !runIDRE.MatchString(id) {
		return fmt.Errorf("%w: run id %q must match %s", ErrBadTarget, id, runIDRE)
	}
	return nil
}

// UnknownKnobs returns an error naming the first query parameter of u that is
// neither in knobs nor passed through (for the driver).
func UnknownKnobs(u *url.URL, knobs map[string]bool, passThrough ...string) error {
	q := u.Query()
	var keys []string
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if knobs[k] {
			continue
		}
		ok := false
		for _, p := range passThrough {
			if k == p {
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("%w: %s: unknown setting %q", ErrBadTarget, Redact(u.Redacted()), k)
		}
	}
	return nil
}

func kindOf(s Spec) (*Kind, error) {
	k, ok := kinds[s.Kind]
	if !ok {
		return nil, fmt.Errorf("%w: kind %q", ErrBadTarget, s.Kind)
	}
	return k, nil
}

// OpenQueue connects to the run's queue namespace, creating it if needed.
func OpenQueue(ctx context.Context, s Spec) (adapters.Queue, error) {
	k, err := kindOf(s)
	if err != nil {
		return nil, err
	}
	if HasWorker(s) {
		return openWorkerQueue(ctx, s)
	}
	return k.OpenQueue(ctx, s)
}

// DefaultStoreURL is the effect store every real target uses unless its spec
// names another: $DURACHK_STORE_URL, else the local Postgres.
func DefaultStoreURL() string {
	if v := getenv("DURACHK_STORE_URL"); v != "" {
		return v
	}
	if v := getenv("DURACHK_PG_URL"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// OpenStore connects to the run's effect store (a Postgres schema of its own).
func OpenStore(ctx context.Context, s Spec) (pipeline.Store, error) {
	return pgstore.Open(ctx, s.StoreURL, s.StoreSchema(), pgstore.Options{NoFence: s.NoFence, KeyOnlyDedupe: s.KeyOnlyDedupe, MaxConns: 2})
}

// Dropper is implemented by queues and stores that can remove what they created.
type Dropper interface {
	Drop(ctx context.Context) error
}

// CanKillBroker reports whether runs of s can kill and restart its broker —
// through its control commands, or a private instance — and if not, why.
func CanKillBroker(s Spec) error {
	k, err := kindOf(s)
	if err != nil {
		return err
	}
	if s.Kind == "postgres" && s.Options["transactional_ack"] == "true" {
		// The ack commits in the effect store's transaction: the queue must live in
		// the store's database, and the store stays outside every fault.
		return errors.New("with transactional_ack the queue lives in the effect store's database, which no fault may kill")
	}
	if s.ControlKills() {
		return canControlKill(s)
	}
	if k.StartPrivate == nil {
		return fmt.Errorf("durachk cannot start a private %s instance", k.Name)
	}
	return PrivateMissing(s)
}

// PrivateMissing says what this machine lacks (a broker binary) to start the
// private instance that broker faults on s run on, or nil: also when s's
// broker faults need none (control commands) or its kind has none. Another
// machine may have it: the broker faults its kind supports are then not
// applied here, which is no property of the target.
func PrivateMissing(s Spec) error {
	k, err := kindOf(s)
	if err != nil || s.ControlKills() || k.StartPrivate == nil || k.CanStartPrivate == nil {
		return nil
	}
	if s.Kind == "postgres" && s.Options["transactional_ack"] == "true" {
		return nil // no broker fault, whatever the machine (CanKillBroker)
	}
	return k.CanStartPrivate()
}

// PrivateOnly reports whether s names no broker of the user's: a URL without
// a host, of a kind whose private instance then runs every contract of the
// target (Kafka: no Kafka broker binary reaches most machines; kfake is in
// durachk).
func PrivateOnly(s Spec) bool {
	k, err := kindOf(s)
	if err != nil || !k.PrivateWithoutHost {
		return false
	}
	u, err := url.Parse(s.URL)
	return err == nil && u.Host == ""
}

// StartPrivate starts a private instance of s's broker in dir.
func StartPrivate(ctx context.Context, s Spec, dir string) (Instance, Spec, error) {
	k, err := kindOf(s)
	if err != nil {
		return nil, s, err
	}
	if k.StartPrivate == nil {
		return nil, s, fmt.Errorf("%w: no private %s instance", ErrBadTarget, k.Name)
	}
	return k.StartPrivate(ctx, s, dir)
}

// StartBroker returns the broker instance a run kills and restarts: the
// target's own broker under its control commands when it has control.kill and
// control.start, else a private instance started in dir.
func StartBroker(ctx context.Context, s Spec, dir string) (Instance, Spec, error) {
	if s.ControlKills() {
		return startControlled(ctx, s)
	}
	return StartPrivate(ctx, s, dir)
}

// IsPrivate reports whether inst is a broker durachk started itself.
func IsPrivate(inst Instance) bool {
	_, ok := inst.(*controlled)
	return !ok
}

// TeardownQueue removes the run's queue namespace. Safe on a run that was never
// (or only partly) provisioned.
func TeardownQueue(ctx context.Context, s Spec) error {
	q, err := OpenQueue(ctx, s)
	if err != nil {
		return err
	}
	defer q.Close()
	if d, ok := q.(Dropper); ok {
		return d.Drop(ctx)
	}
	return nil
}

// TeardownStore removes the run's effect store schema, without creating it
// first when it was never made.
func TeardownStore(ctx context.Context, s Spec) error {
	return pgstore.DropSchema(ctx, s.StoreURL, s.StoreSchema())
}

// Teardown removes the run's queue and store namespaces.
func Teardown(ctx context.Context, s Spec) error {
	return errors.Join(TeardownQueue(ctx, s), TeardownStore(ctx, s))
}
