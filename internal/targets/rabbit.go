package targets

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/rabbit"
)

// RabbitMQ (AMQP 0-9-1). Knobs (query parameters of the target URL), written as
// the user runs them:
//
//	queue-arguments.<x-arg>=v  any queue argument (x-queue-type, x-delivery-limit,
//	                           x-dead-letter-exchange, x-dead-letter-routing-key,
//	                           x-message-ttl, x-max-length, x-overflow, ...);
//	                           integers are sent as numbers, true/false as booleans
//	expiration=ms              per-message TTL of every job
//	prefetch=n                 0 (default): basic.get; n: a consumer with basic.qos n
//	confirms=true|false        publisher confirms (default true)
//	persistent=true|false      delivery mode 2 (default true)
//	heartbeat=s                AMQP heartbeat in seconds (default 1: a paused worker
//	                           loses its deliveries after about two missed beats)
//	delayed-nack=requeue|delay-queue  requeue (default): basic.nack requeues at
//	                           once, no delay; delay-queue: emulated with a per-run
//	                           TTL queue (a lost confirm can duplicate a job)
//	name=...                   the target's name in reports
//
// The driver's own parameters (connection_timeout, channel_max, frame_max,
// auth_mechanism, TLS files) pass through.
var rabbitKnobs = map[string]bool{"delayed-nack": true, "expiration": true, "prefetch": true, "confirms": true, "persistent": true, "heartbeat": true, "name": true}

const rabbitArgPrefix = "queue-arguments."

var rabbitPassThrough = []string{"addr", "connection_timeout", "channel_max", "frame_max", "auth_mechanism", "certfile", "keyfile", "cacertfile", "server_name_indication"}

func init() {
	Register(&Kind{Name: "amqp", Schemes: []string{"amqp", "amqps"}, Parse: parseRabbit,
		OpenQueue: func(ctx context.Context, s Spec) (adapters.Queue, error) {
			o, err := rabbitOptions(s)
			if err != nil {
				return nil, err
			}
			return rabbit.Open(ctx, s.URL, s.RunID, o)
		},
		Version: func(ctx context.Context, s Spec) (string, error) {
			probe := s
			probe.RunID = "versionprobe"
			o, err := rabbitOptions(probe)
			if err != nil {
				return "", err
			}
			q, err := rabbit.Open(ctx, s.URL, probe.RunID, o)
			if err != nil {
				return "", err
			}
			defer q.Close()
			defer q.Drop(ctx)
			return q.ServerVersion(), nil
		},
		StartPrivate:    startPrivateRabbit,
		CanStartPrivate: canStartPrivateRabbit,
		// No Durability: what of a confirmed message survives is the queue's
		// type and the message's persistence (knobs); the server-level settings
		// that touch it (classic_queue.default_version, raft.wal_sync_method)
		// are not readable over AMQP (docs/rabbit.md).
		PrivateVersion: privateRabbitVersion,
		Cleanup:        cleanupRabbit,
		Cluster:        rabbitClusterKind,
	})
}

func parseRabbit(raw string, u *url.URL) (Spec, error) {
	q := u.Query()
	known := map[string]bool{}
	for k := range rabbitKnobs {
		known[k] = true
	}
	for k := range q {
		if strings.HasPrefix(k, rabbitArgPrefix) {
			arg := strings.TrimPrefix(k, rabbitArgPrefix)
			if !strings.HasPrefix(arg, "x-") {
				return Spec{}, fmt.Errorf("%w: %s: queue argument %q: RabbitMQ's queue arguments start with x-", ErrBadTarget, Redact(u.Redacted()), arg)
			}
			known[k] = true
		}
	}
	if err := UnknownKnobs(u, known, rabbitPassThrough...); err != nil {
		return Spec{}, err
	}
	opts := map[string]string{}
	for k := range known {
		if q.Has(k) {
			opts[k] = q.Get(k)
			q.Del(k)
		}
	}
	for _, k := range []string{"expiration", "prefetch", "heartbeat"} {
		if v, ok := opts[k]; ok {
			if n, err := strconv.Atoi(v); err != nil || n < 0 {
				return Spec{}, fmt.Errorf("%w: %s=%q: want a whole number ≥ 0", ErrBadTarget, k, v)
			}
		}
	}
	if err := checkRabbitKnobs(opts); err != nil {
		return Spec{}, err
	}
	if v, ok := opts["delayed-nack"]; ok && !oneOf(v, "requeue", "delay-queue") {
		return Spec{}, fmt.Errorf("%w: delayed-nack=%q: want requeue or delay-queue", ErrBadTarget, v)
	}
	if opts["heartbeat"] == "0" {
		return Spec{}, fmt.Errorf("%w: heartbeat=0: durachk needs heartbeats, or a paused worker keeps its deliveries until TCP gives up", ErrBadTarget)
	}
	for _, k := range []string{"confirms", "persistent"} {
		if v, ok := opts[k]; ok && v != "true" && v != "false" {
			return Spec{}, fmt.Errorf("%w: %s=%q: want true or false", ErrBadTarget, k, v)
		}
	}
	if v, ok := opts[rabbitArgPrefix+"x-queue-type"]; ok && !oneOf(v, "classic", "quorum") {
		return Spec{}, fmt.Errorf("%w: x-queue-type=%q: durachk drives classic and quorum queues (a stream is not a work queue)", ErrBadTarget, v)
	}
	u.RawQuery = q.Encode()
	name := opts["name"]
	if name == "" {
		name = "rabbitmq"
		if t := opts[rabbitArgPrefix+"x-queue-type"]; t != "" {
			name += "-" + t
		}
	}
	delete(opts, "name")
	return Spec{Name: name, URL: u.String(), Options: opts}, nil
}

// rabbitArg types a queue argument as RabbitMQ wants it: integers as numbers,
// true/false as booleans, anything else as a string.
func rabbitArg(v string) any {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	if v == "true" || v == "false" {
		return v == "true"
	}
	return v
}

func rabbitOptions(s Spec) (rabbit.Options, error) {
	o := rabbit.Options{Args: map[string]any{}, Volatile: s.Volatile || s.Unreplicated, Addrs: nodeList(s.URL),
		NoConfirms: s.Options["confirms"] == "false", DelayQueue: s.Options["delayed-nack"] == "delay-queue", Transient: s.Options["persistent"] == "false"}
	keys := make([]string, 0, len(s.Options))
	for k := range s.Options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if arg, ok := strings.CutPrefix(k, rabbitArgPrefix); ok {
			o.Args[arg] = rabbitArg(s.Options[k])
		}
	}
	num := func(k string) int {
		n, _ := strconv.Atoi(s.Options[k])
		return n
	}
	o.Expiration = time.Duration(num("expiration")) * time.Millisecond
	o.Prefetch = num("prefetch")
	o.Heartbeat = time.Duration(num("heartbeat")) * time.Second
	return o, nil
}
