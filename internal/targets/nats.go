package targets

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/durachk/durachk/adapters"
	nq "github.com/durachk/durachk/adapters/nats"
)

// NATS JetStream. Knobs (query parameters of the target URL; nested YAML keys
// become dotted names), JetStream's own stream and consumer settings under
// their own names:
//
//	storage=file|memory                 the streams' storage (default file)
//	replicas=N                          stream replicas (default 1; more needs a cluster)
//	retention=workqueue|limits|interest the work stream's retention (default workqueue)
//	max_deliver=N                       the consumer's MaxDeliver (default unlimited)
//	ack_wait=DURATION                   the consumer's AckWait (default: the workers' lease)
//	max_msgs=N, max_bytes=N             stream limits (default none)
//	discard=old|new                     what a full stream does (default old: drop the oldest)
//	duplicate_window=DURATION           Nats-Msg-Id de-duplication window (default 2m)
//	max_age=DURATION                    stream message TTL (default none)
//	private-instance.sync_interval=always|DURATION
//	                                    the private server's fsync interval (durability.ack,
//	                                    durability.power-loss); not given: the target server's
//	                                    where its version says it (natsDurability), else 2m
//	name=NAME                           the target's name in reports
var natsKnobs = map[string]bool{
	"storage": true, "replicas": true, "retention": true, "max_deliver": true, "ack_wait": true,
	"max_msgs": true, "max_bytes": true, "discard": true, "duplicate_window": true, "max_age": true,
	"private-instance.sync_interval": true, "name": true,
}

// natsDurability: how often JetStream fsyncs its file store decides what of
// an acknowledged publish survives a power loss (a kill loses nothing the
// kernel has). The stream's storage and replicas are the target's knobs.
var natsDurability = []DurabilitySetting{
	{Name: "sync_interval", Default: "2m", Check: func(v string) string {
		if d, err := time.ParseDuration(v); v != "always" && (err != nil || d <= 0) {
			return "want always or a duration such as 2m"
		}
		return ""
	}},
}

// natsServerSettings: the client protocol carries no server configuration
// (the server's INFO has its version; $JS.API.INFO the account's limits;
// /varz and the system account need a monitoring port or credentials a
// target URL does not give). nats-server 2.9 has no sync_interval setting
// and fsyncs its file store every 60 s (its filestore.go); from 2.10 the
// configuration file sets it (default 2 min), unreadable here.
func natsServerSettings(ctx context.Context, s Spec) (ServerSettings, error) {
	v, err := nq.ServerVersion(ctx, s.URL)
	if err != nil {
		return ServerSettings{}, err
	}
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimPrefix(v, "nats-server "), "%d.%d", &major, &minor); err == nil && major == 2 && minor == 9 {
		return ServerSettings{Values: map[string]string{"sync_interval": "60s"},
			Notes: map[string]string{"sync_interval": v + " has no sync_interval setting and fsyncs its file store every 60 s"}}, nil
	}
	return ServerSettings{Unread: map[string]string{"sync_interval": "the client protocol does not carry it: private-instance.sync_interval says what " + v + "'s configuration sets"}}, nil
}

func init() {
	Register(&Kind{Name: "nats", Schemes: []string{"nats"}, Parse: parseNATS,
		OpenQueue: func(ctx context.Context, s Spec) (adapters.Queue, error) {
			o, err := NATSOptions(s)
			if err != nil {
				return nil, err
			}
			return nq.Open(ctx, s.URL, s.RunID, o)
		},
		Version: func(ctx context.Context, s Spec) (string, error) {
			return nq.ServerVersion(ctx, s.URL)
		},
		StartPrivate:    startPrivateNATS,
		CanStartPrivate: canStartPrivateNATS,
		Durability:      natsDurability,
		ServerSettings:  natsServerSettings,
		PrivateVersion:  func() (string, error) { return "nats-server " + natsServerVersion(), nil },
		Cleanup:         cleanupNATS,
	})
	defaultPorts["nats"] = "4222"
	readyKinds["nats"] = func(ctx context.Context, s Spec) error { return nq.Ready(ctx, s.URL) }
	// The negative control of durability.ack is memory storage, which the
	// adapter sets on any server.
	volatileByAdapter["nats"] = true
}

func parseNATS(raw string, u *url.URL) (Spec, error) {
	if err := UnknownKnobs(u, natsKnobs); err != nil {
		return Spec{}, err
	}
	q := u.Query()
	opts := map[string]string{}
	for k := range natsKnobs {
		if q.Has(k) {
			opts[k] = q.Get(k)
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	if err := nq.CheckURL(u.String()); err != nil {
		return Spec{}, fmt.Errorf("%w: %s: %v", ErrBadTarget, Redact(u.Redacted()), err)
	}
	name := opts["name"]
	if name == "" {
		name = "nats"
	}
	delete(opts, "name")
	s := Spec{Name: name, URL: u.String(), Options: opts}
	if _, err := NATSOptions(s); err != nil {
		return Spec{}, err
	}
	if err := checkDurabilityKnobs(natsDurability, opts); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// NATSOptions reads the adapter's options from s's knobs (and the negative
// control: Spec.Volatile is memory storage).
func NATSOptions(s Spec) (nq.Options, error) {
	var o nq.Options
	bad := func(k, want string) error {
		return fmt.Errorf("%w: %s=%q: want %s", ErrBadTarget, k, s.Options[k], want)
	}
	o.Storage, o.Retention, o.Discard = s.Options["storage"], s.Options["retention"], s.Options["discard"]
	if !oneOf(o.Storage, "", "file", "memory") {
		return o, bad("storage", "file or memory")
	}
	if !oneOf(o.Retention, "", "workqueue", "limits", "interest") {
		return o, bad("retention", "workqueue, limits or interest")
	}
	if !oneOf(o.Discard, "", "old", "new") {
		return o, bad("discard", "old or new")
	}
	ints := []struct {
		k   string
		min int64
		set func(int64)
	}{
		{"replicas", 1, func(n int64) { o.Replicas = int(n) }},
		{"max_deliver", -1, func(n int64) { o.MaxDeliver = int(max(n, 0)) }},
		{"max_msgs", -1, func(n int64) { o.MaxMsgs = max(n, 0) }},
		{"max_bytes", -1, func(n int64) { o.MaxBytes = max(n, 0) }},
	}
	for _, i := range ints {
		v, ok := s.Options[i.k]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < i.min || n == 0 {
			return o, bad(i.k, "a number ≥ 1 (or -1: unlimited)")
		}
		if i.k == "replicas" && n > 5 {
			return o, bad(i.k, "1 to 5")
		}
		i.set(n)
	}
	durs := []struct {
		k   string
		set func(time.Duration)
	}{
		{"ack_wait", func(d time.Duration) { o.AckWait = d }},
		{"duplicate_window", func(d time.Duration) { o.DuplicateWindow = d }},
		{"max_age", func(d time.Duration) { o.MaxAge = d }},
	}
	for _, d := range durs {
		v, ok := s.Options[d.k]
		if !ok {
			continue
		}
		dur, err := time.ParseDuration(v)
		if err != nil || dur <= 0 {
			return o, bad(d.k, "a duration such as 30s")
		}
		d.set(dur)
	}
	if o.MaxAge > 0 && o.DuplicateWindow > o.MaxAge {
		return o, fmt.Errorf("%w: duplicate_window=%s exceeds max_age=%s (JetStream refuses it)", ErrBadTarget, o.DuplicateWindow, o.MaxAge)
	}
	if s.Volatile {
		o.Storage = "memory"
		o.Notes = append(o.Notes, "negative control: memory storage (no persistence)")
	}
	switch {
	case s.ControlKills():
		o.Notes = append(o.Notes, "durability.ack kills and restarts this server with its control commands (its own store and sync_interval apply)")
	default:
		o.Notes = append(o.Notes, "durability.ack and durability.power-loss run on a private nats-server "+natsServerVersion()+" (embedded in durachk, a child process with its own port and store) with sync_interval="+privateValue(natsDurability, s, "sync_interval")+" (the private-instance.sync_interval knob, else this server's where its version says it, else 2m: the target's durability settings say which), never on this server")
	}
	if s.BreakOrder {
		o.Notes = append(o.Notes, "break-order requested, but this target claims no FIFO: nothing to break")
	}
	return o, nil
}

// cleanupNATS deletes the streams of dead runs, found by listing the server's
// stream names.
func cleanupNATS(ctx context.Context, s Spec, c Scope) ([]string, error) {
	removed, err := nq.DeleteRunStreams(ctx, s.URL, c.Live)
	if err != nil {
		return removed, fmt.Errorf("cleanup %s: %w", Redact(s.URL), err)
	}
	return removed, nil
}
