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
//	private-instance.appendonly=yes|no                 \  the private redis-server of
//	private-instance.appendfsync=always|everysec|no     | durability.ack and durability.power-loss;
//	private-instance.save="3600 1 300 100"|""           | each not given is the target server's
//	private-instance.no-appendfsync-on-rewrite=yes|no  /  (CONFIG GET), else durachk's default:
//	                                                      appendonly yes, everysec, save "", no
//	name=NAME                       the target's name in reports
//
// dial_timeout, read_timeout, write_timeout and client_name go to go-redis.
var redisKnobs = map[string]bool{
	"stream.maxlen": true, "stream.minid": true, "stream.approximate": true,
	"claim-min-idle": true, "block": true, "name": true,
}

// redisDurability are the persistence settings that decide what of an
// acknowledged XADD survives a kill or a power loss
// (https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/):
// the AOF and its fsync policy, RDB snapshots, and whether the AOF is fsynced
// while a rewrite or snapshot runs in the background (no-appendfsync-on-rewrite
// yes: not, up to 30 s of writes at risk). aof-use-rdb-preamble and the
// rewrite thresholds change the files' form and size, not what survives.
var redisDurability = []DurabilitySetting{
	{Name: "appendonly", Default: "yes", Check: oneOfCheck("yes", "no")},
	{Name: "appendfsync", Default: "everysec", Check: oneOfCheck("always", "everysec", "no")},
	{Name: "save", Default: "", Check: func(v string) string {
		if saveRE.MatchString(v) {
			return ""
		}
		return `want pairs of seconds and changes such as "3600 1 300 100", or empty`
	}},
	{Name: "no-appendfsync-on-rewrite", Default: "no", Check: oneOfCheck("yes", "no")},
}

func init() {
	for _, d := range redisDurability {
		redisKnobs[d.knob()] = true
	}
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
		Durability:      redisDurability,
		ServerSettings: func(ctx context.Context, s Spec) (ServerSettings, error) {
			names := make([]string, len(redisDurability))
			for i, d := range redisDurability {
				names[i] = d.Name
			}
			values, unread, err := rq.PersistenceSettings(ctx, s.URL, names)
			return ServerSettings{Values: values, Unread: unread}, err
		},
		PrivateVersion: privateRedisVersion,
		Cleanup:        cleanupRedis,
		Cluster:        redisClusterKind,
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
	if err := checkDurabilityKnobs(redisDurability, opts); err != nil {
		return Spec{}, err
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
		o.Notes = []string{fmt.Sprintf("durability.ack and durability.power-loss run on a private redis-server started by durachk with appendonly=%s appendfsync=%s save=%q no-appendfsync-on-rewrite=%s (each the private-instance.* knob, else this server's own setting, else durachk's default: the target's durability settings say which), never on this server",
			p.appendonly, p.appendfsync, p.save, p.noFsyncOnRewrite)}
	}
	if s.BreakOrder {
		o.Notes = append(o.Notes, "break-order requested, but this target claims no FIFO: nothing to break")
	}
	return o, nil
}
