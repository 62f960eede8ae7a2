package targets

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/durachk/durachk/adapters"
	rq "github.com/durachk/durachk/adapters/redis"
)

// Redis Streams as a queue. Knobs (query parameters of the target URL; nested
// YAML keys become dotted names), Redis's own settings that change guarantees:
//
//	stream.maxlen=N                 XADD MAXLEN N (trimming drops unacked entries too)
//	stream.minid=ID|DURATION        XADD MINID ID, or MINID now-DURATION (a retention window)
//	stream.approximate=true|false   trim with ~
//	claim-min-idle=DURATION|MS      XAUTOCLAIM min-idle (default: the workers' lease)
//	block=DURATION|MS               XREADGROUP BLOCK for an empty Lease (default 0: none)
//	private-instance.appendonly=yes|no          \
//	private-instance.appendfsync=always|everysec|no  > the private redis-server of durability.ack
//	private-instance.save="3600 1 300 100"|""   /  (default: appendonly yes, everysec, save "")
//	name=NAME                       the target's name in reports
//
// dial_timeout, read_timeout, write_timeout and client_name go to go-redis.
var redisKnobs = map[string]bool{
	"stream.maxlen": true, "stream.minid": true, "stream.approximate": true,
	"claim-min-idle": true, "block": true,
	"private-instance.appendonly": true, "private-instance.appendfsync": true, "private-instance.save": true,
	"name": true,
}

var (
	streamIDRE = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)
	saveRE     = regexp.MustCompile(`^([0-9]+ [0-9]+( [0-9]+ [0-9]+)*)?$`)
)

func init() {
	Register(&Kind{Name: "redis", Schemes: []string{"redis"}, Parse: parseRedis,
		OpenQueue: func(ctx context.Context, s Spec) (adapters.Queue, error) {
			o, err := redisOptions(s)
			if err != nil {
				return nil, err
			}
			return rq.Open(ctx, s.URL, s.RunID, o)
		},
		Version: func(ctx context.Context, s Spec) (string, error) {
			return rq.ServerVersion(ctx, s.URL)
		},
		StartPrivate:    startPrivateRedis,
		CanStartPrivate: canStartPrivateRedis,
		Cleanup:         cleanupRedis,
		Cluster:         redisClusterKind,
	})
}

func parseRedis(raw string, u *url.URL) (Spec, error) {
	if err := UnknownKnobs(u, redisKnobs, "dial_timeout", "read_timeout", "write_timeout", "client_name", "master_name", "addr"); err != nil {
		return Spec{}, err
	}
	q := u.Query()
	opts := map[string]string{}
	for k := range redisKnobs {
		if q.Has(k) {
			opts[k] = q.Get(k)
			q.Del(k)
		}
	}
	bad := func(k, want string) error {
		return fmt.Errorf("%w: %s=%q: want %s", ErrBadTarget, k, opts[k], want)
	}
	if v, ok := opts["stream.maxlen"]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 1 {
			return Spec{}, bad("stream.maxlen", "a number ≥ 1")
		}
	}
	if v, ok := opts["stream.minid"]; ok {
		if _, err := time.ParseDuration(v); err != nil && !streamIDRE.MatchString(v) {
			return Spec{}, bad("stream.minid", "a stream id (ms or ms-seq) or a retention duration such as 24h")
		}
		if _, both := opts["stream.maxlen"]; both {
			return Spec{}, fmt.Errorf("%w: stream.maxlen and stream.minid exclude each other (XADD takes one trimming strategy)", ErrBadTarget)
		}
	}
	if v, ok := opts["stream.approximate"]; ok && v != "true" && v != "false" {
		return Spec{}, bad("stream.approximate", "true or false")
	}
	for _, k := range []string{"claim-min-idle", "block"} {
		if v, ok := opts[k]; ok {
			d, err := knobDuration(v)
			if err != nil || d < 0 || (k == "claim-min-idle" && d == 0) {
				return Spec{}, bad(k, "a duration such as 30s or a number of milliseconds")
			}
		}
	}
	if v, ok := opts["private-instance.appendonly"]; ok && !oneOf(v, "yes", "no") {
		return Spec{}, bad("private-instance.appendonly", "yes or no")
	}
	if v, ok := opts["private-instance.appendfsync"]; ok && !oneOf(v, "always", "everysec", "no") {
		return Spec{}, bad("private-instance.appendfsync", "always, everysec or no")
	}
	if v, ok := opts["private-instance.save"]; ok && !saveRE.MatchString(v) {
		return Spec{}, bad("private-instance.save", `pairs of seconds and changes such as "3600 1 300 100", or empty`)
	}
	u.RawQuery = q.Encode()
	if err := rq.CheckURL(u.String()); err != nil {
		return Spec{}, fmt.Errorf("%w: %s: %v", ErrBadTarget, Redact(u.Redacted()), err)
	}
	name := opts["name"]
	if name == "" {
		name = "redis"
	}
	delete(opts, "name")
	return Spec{Name: name, URL: u.String(), Options: opts}, nil
}

// knobDuration reads a Go duration, or a bare number of milliseconds (Redis's
// own unit).
func knobDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Millisecond, nil
	}
	return time.ParseDuration(v)
}

func redisOptions(s Spec) (rq.Options, error) {
	o := rq.Options{DialThrough: s.DialThrough}
	var err error
	if v := s.Options["stream.maxlen"]; v != "" {
		if o.MaxLen, err = strconv.ParseInt(v, 10, 64); err != nil {
			return o, fmt.Errorf("%w: stream.maxlen=%q", ErrBadTarget, v)
		}
	}
	if v := s.Options["stream.minid"]; v != "" {
		if streamIDRE.MatchString(v) {
			o.MinID = v
		} else if o.MinIDAge, err = time.ParseDuration(v); err != nil {
			return o, fmt.Errorf("%w: stream.minid=%q", ErrBadTarget, v)
		}
	}
	o.Approximate = s.Options["stream.approximate"] == "true"
	if v := s.Options["claim-min-idle"]; v != "" {
		if o.ClaimMinIdle, err = knobDuration(v); err != nil {
			return o, fmt.Errorf("%w: claim-min-idle=%q", ErrBadTarget, v)
		}
	}
	if v := s.Options["block"]; v != "" {
		if o.Block, err = knobDuration(v); err != nil {
			return o, fmt.Errorf("%w: block=%q", ErrBadTarget, v)
		}
	}
	applyRedisWait(s, &o)
	p := privateRedisProfile(s)
	if s.ControlKills() {
		o.Notes = []string{"durability.ack kills and restarts this server with its control commands (its own persistence settings apply)"}
	} else {
		o.Notes = []string{fmt.Sprintf("durability.ack runs on a private redis-server started by durachk with appendonly=%s appendfsync=%s save=%q (the private-instance.* knobs; default AOF everysec), never on this server", p.appendonly, p.appendfsync, p.save)}
	}
	if s.BreakOrder {
		o.Notes = append(o.Notes, "break-order requested, but this target claims no FIFO: nothing to break")
	}
	return o, nil
}
