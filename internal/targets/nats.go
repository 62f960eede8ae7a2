package targets

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
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
//	                                    the private server's fsync interval (durability.ack;
//	                                    default: the server's, 2m)
//	name=NAME                           the target's name in reports
var natsKnobs = map[string]bool{
	"storage": true, "replicas": true, "retention": true, "max_deliver": true, "ack_wait": true,
	"max_msgs": true, "max_bytes": true, "discard": true, "duplicate_window": true, "max_age": true,
	"private-instance.sync_interval": true, "name": true,
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
	if v, ok := opts["private-instance.sync_interval"]; ok && v != "always" {
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			return Spec{}, fmt.Errorf("%w: private-instance.sync_interval=%q: want always or a duration such as 2m", ErrBadTarget, v)
		}
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
		o.Notes = append(o.Notes, "durability.ack runs on a private nats-server "+natsServerVersion()+" (embedded in durachk, a child process with its own port and store) with sync_interval="+syncNote(s)+", never on this server")
	}
	if s.BreakOrder {
		o.Notes = append(o.Notes, "break-order requested, but this target claims no FIFO: nothing to break")
	}
	return o, nil
}

func syncNote(s Spec) string {
	if v := s.Options["private-instance.sync_interval"]; v != "" {
		return v
	}
	return "2m (the default)"
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
