// Package redis is the Redis Streams queue adapter: one stream and one consumer
// group per run, every key prefixed durachk:<runid>: (the stream, a delayed set
// and a dead-letter stream; nothing else is ever read or written, and Drop
// deletes exactly those keys).
//
// Redis Streams have no lease, no delayed redelivery and no dead-letter queue
// (https://redis.io/docs/latest/develop/data-types/streams/). What the adapter
// builds from the primitives, and how:
//
//   - Lease: XREADGROUP > for new entries, and XAUTOCLAIM with a min-idle time
//     equal to the lease (or the claim-min-idle knob) for pending entries whose
//     holder stopped: a pending entry stays with its consumer until some
//     consumer claims it, so the "lease" expires only when a Lease call claims
//     it (Emulated).
//   - Fencing token and attempt: the entry's delivery counter (XPENDING),
//     which XREADGROUP sets to 1 and XAUTOCLAIM/XCLAIM increment, plus the
//     deliveries of earlier entries of the same job, which a delayed Nack
//     carries in the re-added entry (field base).
//   - Extend: XCLAIM of the entry for its holder with JUSTID, which resets the
//     idle time and does NOT move the delivery counter (the token stays).
//   - Ack: XACK + XDEL in a Lua script that first checks the pending entry's
//     owner and delivery count: XACK checks no owner, the fenced ack is the
//     adapter's emulation.
//   - Nack with delay: the entry is acked and deleted and its job goes into a
//     ZSET scored by due time (server clock); Lease moves due jobs back into the
//     stream (XADD, a new entry at the tail).
//   - Dead letter: the job is moved to the stream durachk:<runid>:dead.
//   - What the server does on its own: XADD's MAXLEN/MINID trimming deletes
//     entries whether or not they were delivered or acknowledged. Every entry
//     the adapter adds is recorded in the hash durachk:<runid>:ids (entry id
//     -> job), in the same script as its XADD, and removed by the script that
//     acks, nacks or dead-letters it: an entry of that hash that the stream no
//     longer holds was deleted by the server (or by someone else), never by
//     the pipeline. Inspect names those jobs in Inventory.Moved.
//
// Every clock is the Redis server's (TIME, idle times): a worker's clock never
// decides whether a lease is live. Redis Cluster is not supported (the scripts
// touch several keys without a hash tag).
package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/durachk/durachk/adapters"
)

// Broker is the Capabilities.Broker name and the OpError target of this adapter.
const Broker = "redis"

// Group is the consumer group of every run's stream.
const Group = "durachk"

// Options configure the queue. The zero value trims nothing, claims entries
// idle for as long as the lease a worker asks for, does not block, and uses a
// pool of 2. They are read once, by Open.
type Options struct {
	// MaxLen trims the stream on every XADD to about (Approximate) or exactly
	// MaxLen entries. Trimming deletes entries whether or not they were
	// acknowledged: jobs can be lost. 0: no MAXLEN.
	MaxLen int64
	// MinID trims entries with an id below it on every XADD (XADD MINID).
	MinID string
	// MinIDAge, if set, trims on every XADD the entries older than this age:
	// MINID is the client's clock minus MinIDAge, in milliseconds.
	MinIDAge time.Duration
	// Approximate trims with ~ (whole radix-tree nodes only).
	Approximate bool
	// ClaimMinIdle is the min-idle time of XAUTOCLAIM. 0: the lease asked for by
	// Lease. Shorter than the workers' lease, it takes jobs away from live
	// workers; that is the configuration under test.
	ClaimMinIdle time.Duration
	// Block, if set, makes a Lease that found nothing wait up to Block for a new
	// entry (XREADGROUP BLOCK).
	Block time.Duration
	// PoolSize caps the connection pool; 0 means 2.
	PoolSize int
	// Notes are added to the Capabilities' notes (e.g. what the target layer
	// knows about private instances).
	Notes []string
	// WaitReplicas, if set, makes Enqueue send WAIT WaitReplicas WaitTimeout
	// after the XADD on the same connection: the enqueue succeeds only once that
	// many replicas acknowledged it; a WAIT that times out short of them is an
	// ambiguous enqueue (the primary has the entry, no replica may), never a
	// success.
	WaitReplicas int
	// WaitTimeout bounds the WAIT; 0 means one second.
	WaitTimeout time.Duration
	// DialThrough maps a server's address (as the URL or the Sentinels name
	// it) to the address to dial instead: a proxy in front of it.
	DialThrough map[string]string
}

var runIDRE = regexp.MustCompile(`^[a-z0-9]{1,40}$`)

// Prefix is the key prefix of a run: durachk:<runID>:.
func Prefix(runID string) string { return "durachk:" + runID + ":" }

// Queue is a Redis Streams adapters.Queue with Extender, DeadLetterer and
// Inspector. It is safe for concurrent use by the goroutines of one process;
// any number of processes may open the same run's queue. Each Queue value is
// one consumer of the group (named by host, pid and a random suffix): a
// delivery's receipt names its consumer, so any Queue of the run may ack it.
type Queue struct {
	rdb                        *goredis.Client
	stream, delayed, dead, ids string
	consumer                   string
	opts                       Options
	caps                       adapters.Capabilities
	version                    string
	lastLease                  atomic.Int64 // ms of the last lease asked for, for Inspect
	lastSweep                  atomic.Int64 // unix ns of the last lease script
	closed                     atomic.Bool
}

var (
	_ adapters.Queue        = (*Queue)(nil)
	_ adapters.Extender     = (*Queue)(nil)
	_ adapters.DeadLetterer = (*Queue)(nil)
	_ adapters.Inspector    = (*Queue)(nil)
)

// Open connects to url (a redis:// URL; its password never appears in an
// error), creates the run's stream and consumer group if they do not exist yet
// (idempotent: every process of a run calls it, several at once), and reads the
// server's version and persistence settings for Capabilities. runID must match
// ^[a-z0-9]{1,40}$. An unreachable server is an error wrapping
// adapters.ErrUnavailable.
func Open(ctx context.Context, url, runID string, opts Options) (*Queue, error) {
	if !runIDRE.MatchString(runID) {
		return nil, fmt.Errorf("redis: run id %q must match %s", runID, runIDRE)
	}
	if opts.MaxLen < 0 || opts.ClaimMinIdle < 0 || opts.Block < 0 || opts.MinIDAge < 0 {
		return nil, errors.New("redis: negative maxlen, minid age, claim-min-idle or block")
	}
	if opts.MaxLen > 0 && (opts.MinID != "" || opts.MinIDAge > 0) {
		return nil, errors.New("redis: MAXLEN and MINID trimming exclude each other")
	}
	if opts.WaitReplicas < 0 || opts.WaitTimeout < 0 {
		return nil, errors.New("redis: negative wait replicas or wait timeout")
	}
	if opts.WaitReplicas > 0 && opts.WaitTimeout == 0 {
		opts.WaitTimeout = time.Second
	}
	rdb, err := newClient(url, opts)
	if err != nil {
		return nil, err
	}
	p := Prefix(runID)
	q := &Queue{rdb: rdb, stream: p + "stream", delayed: p + "delayed", dead: p + "dead", ids: p + "ids",
		consumer: consumerName(), opts: opts}
	if err := q.open(ctx); err != nil {
		q.rdb.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	return q, nil
}

// newClient builds the client of url: a plain client, or, for a Sentinel URL
// (go-redis's own form, redis://sentinel:26379/0?master_name=NAME&addr=...),
// a failover client that asks the Sentinels for the master and follows its
// switches.
func newClient(url string, opts Options) (*goredis.Client, error) {
	pool := opts.PoolSize
	if pool <= 0 {
		pool = 2
	}
	readTimeout := func(t time.Duration) time.Duration {
		if t == 0 {
			t = 3 * time.Second
		}
		// A WAIT must be able to time out on the server before the client does.
		return max(t, opts.WaitTimeout+time.Second)
	}
	if IsSentinelURL(url) {
		o, err := goredis.ParseFailoverURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis: bad Sentinel URL: %v", redactErr(err, url))
		}
		o.PoolSize, o.MinIdleConns, o.MaxIdleConns = pool, 0, pool
		o.MaxRetries = -1 // every error is classified here: a retried XADD is a second job
		if o.DialTimeout == 0 {
			o.DialTimeout = time.Second
		}
		o.ReadTimeout = readTimeout(o.ReadTimeout)
		o.DialerRetries = 1
		o.PoolTimeout = 2 * time.Second
		o.DisableIdentity = true
		o.Protocol = 2
		o.Dialer = dialThrough(opts.DialThrough, o.DialTimeout, o.TLSConfig)
		return goredis.NewFailoverClient(o), nil
	}
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: bad URL: %v", redactErr(err, url))
	}
	o.PoolSize = pool
	o.MinIdleConns, o.MaxIdleConns = 0, o.PoolSize
	o.MaxRetries = -1 // every error is classified here: a retried XADD is a second job
	if o.DialTimeout == 0 {
		o.DialTimeout = time.Second
	}
	o.ReadTimeout = readTimeout(o.ReadTimeout)
	o.DialerRetries = 1 // a refused dial is ErrUnavailable at once; the caller retries
	o.PoolTimeout = 2 * time.Second
	o.DisableIdentity = true
	o.Protocol = 2
	o.Dialer = dialThrough(opts.DialThrough, o.DialTimeout, o.TLSConfig)
	return goredis.NewClient(o), nil
}

// dialThrough is go-redis's own dialer (timeout, TLS when tc is set) dialing
// the address through names for an address instead; nil, that dialer
// unchanged, when through is empty.
func dialThrough(through map[string]string, timeout time.Duration, tc *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if len(through) == 0 {
		return nil
	}
	dial := goredis.NewDialer(&goredis.Options{DialTimeout: timeout, TLSConfig: tc})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if a, ok := through[addr]; ok {
			addr = a
		}
		return dial(ctx, network, addr)
	}
}

// IsSentinelURL reports whether url names Sentinels (a master_name parameter)
// rather than a server.
func IsSentinelURL(url string) bool {
	_, query, _ := strings.Cut(url, "?")
	for _, kv := range strings.Split(query, "&") {
		if k, _, _ := strings.Cut(kv, "="); k == "master_name" {
			return true
		}
	}
	return false
}

func consumerName() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

func (q *Queue) open(ctx context.Context) error {
	info, err := q.rdb.Info(ctx, "server").Result()
	if err != nil {
		return classify(err)
	}
	q.version = infoField(info, "redis_version")
	if !atLeast(q.version, 7, 0) {
		return fmt.Errorf("server version %q: the adapter needs Redis 7.0 or later (XAUTOCLAIM drops deleted entries from the PEL)", q.version)
	}
	if err := q.ensureGroup(ctx); err != nil {
		return err
	}
	settings := map[string]string{}
	cfg, err := q.rdb.ConfigGet(ctx, "append*").Result()
	if err == nil {
		for k, v := range cfg {
			settings[k] = v
		}
		if cfg, err = q.rdb.ConfigGet(ctx, "save").Result(); err == nil {
			settings["save"] = cfg["save"]
		}
	}
	q.caps = capabilities(q.opts, q.dead, settings, err)
	return nil
}

// ensureGroup creates the stream and its group, from the first entry: after a
// server restart without persistence the producer may have re-created the
// stream before any worker came back.
func (q *Queue) ensureGroup(ctx context.Context) error {
	err := q.rdb.XGroupCreateMkStream(ctx, q.stream, Group, "0").Err()
	if err != nil && strings.HasPrefix(err.Error(), "READONLY") && q.hasGroup(ctx) {
		// A replica refuses the create before it looks (READONLY, not
		// BUSYGROUP): a client there can still try its writes, and be
		// refused each one (partition.client pins its producer to one).
		return nil
	}
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return classify(err)
	}
	return nil
}

// hasGroup reports whether the run's consumer group exists, with a read
// that a replica answers.
func (q *Queue) hasGroup(ctx context.Context) bool {
	groups, err := q.rdb.XInfoGroups(ctx, q.stream).Result()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g.Name == Group {
			return true
		}
	}
	return false
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func atLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	return err1 == nil && err2 == nil && (ma > major || ma == major && mi >= minor)
}

// capabilities are the documented semantics of the adapter on a server with
// the given persistence settings (CONFIG GET; cfgErr if they could not be read).
//
// Durable follows the AOF: "appendonly yes" makes Redis write every write
// command to the append-only file before it replies to the client
// (https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/);
// RDB snapshots alone lose every write since the last snapshot, and without
// either the data lives in memory only.
func capabilities(opts Options, dead string, settings map[string]string, cfgErr error) adapters.Capabilities {
	durable := settings["appendonly"] == "yes"
	notes := []string{
		"Redis Streams have no lease: a pending entry stays with its consumer until a Lease claims it with XAUTOCLAIM (min-idle " + claimNote(opts) + "), measured on the server's clock",
		"fencing token and attempt = the entry's delivery counter (XPENDING), which XREADGROUP sets to 1 and XAUTOCLAIM/XCLAIM increment; the lease extension is XCLAIM ... JUSTID, which resets the idle time and does not move the counter; a delayed Nack re-adds the job as a new entry that carries the earlier deliveries forward (adapter emulation)",
		"XACK checks no owner: the fenced ack is the adapter's emulation, a Lua script that checks the pending entry's owner and delivery count before XACK+XDEL",
		"delayed Nack is the adapter's own (a ZSET of due jobs moved back into the stream by Lease); dead-letter stream " + dead + " is the adapter's own",
		"no FIFO: consumer groups hand entries to consumers in stream order, but a claimed or nacked entry is redelivered after its successors",
	}
	switch {
	case cfgErr != nil:
		notes = append(notes, "persistence settings could not be read (CONFIG GET refused): not declared durable")
	default:
		notes = append(notes, fmt.Sprintf("server persistence: appendonly=%s appendfsync=%s save=%q", settings["appendonly"], settings["appendfsync"], settings["save"]))
		if durable {
			notes = append(notes, "appendonly yes: an acknowledged XADD is in the AOF (written before the reply; fsynced per appendfsync) and survives a process kill; a kill -9 cannot tell appendfsync always from everysec (the page cache survives it); durability.power-loss can")
		} else {
			notes = append(notes, "appendonly no: an acknowledged XADD lives in memory until the next RDB snapshot, if any, and is lost when the server is killed: not durable")
		}
	}
	if opts.MaxLen > 0 || opts.MinID != "" || opts.MinIDAge > 0 {
		notes = append(notes, "XADD trims the stream ("+trimNote(opts)+"): trimming deletes entries whether or not they were acknowledged, so jobs can be lost; Inspect names the trimmed jobs (moved by the broker: trimmed) from the run's entry index")
	}
	if opts.WaitReplicas > 0 {
		notes = append(notes, fmt.Sprintf("every enqueue is XADD then WAIT %d %d on the same connection: it succeeds once %d replicas acknowledged it; a WAIT that times out short of them is an ambiguous enqueue (the primary has the entry), never a success", opts.WaitReplicas, opts.WaitTimeout.Milliseconds(), opts.WaitReplicas))
	}
	notes = append(notes, opts.Notes...)
	return adapters.Capabilities{
		Broker: Broker, Lease: adapters.Emulated, LeaseExtension: adapters.Emulated,
		Token: adapters.Emulated, FencedAck: true, DeliveryCount: adapters.Emulated,
		DeadLetter: adapters.Emulated, DelayedNack: adapters.Emulated, FIFO: false,
		Durable: durable && cfgErr == nil, BrokerKill: false, Notes: notes,
	}
}

func claimNote(opts Options) string {
	if opts.ClaimMinIdle > 0 {
		return opts.ClaimMinIdle.String() + " (claim-min-idle)"
	}
	return "= the lease"
}

func trimNote(opts Options) string {
	approx := ""
	if opts.Approximate {
		approx = "~ "
	}
	switch {
	case opts.MaxLen > 0:
		return "MAXLEN " + approx + strconv.FormatInt(opts.MaxLen, 10)
	case opts.MinIDAge > 0:
		return "MINID " + approx + "now-" + opts.MinIDAge.String()
	}
	return "MINID " + approx + opts.MinID
}

// Capabilities are read once at Open.
func (q *Queue) Capabilities() adapters.Capabilities { return q.caps }

// ServerVersion names the server, e.g. "redis 7.0.15".
func (q *Queue) ServerVersion() string { return "redis " + q.version }

// Consumer is this Queue's consumer name in the group.
func (q *Queue) Consumer() string { return q.consumer }

// Keys are the run's keys: the stream, the delayed set, the dead-letter
// stream and the index of the entries the adapter added.
func (q *Queue) Keys() []string { return []string{q.stream, q.delayed, q.dead, q.ids} }

// Client is the underlying go-redis client (for tests and benchmarks).
func (q *Queue) Client() *goredis.Client { return q.rdb }

// Close closes the pool; later calls fail with adapters.ErrClosed. Idempotent.
func (q *Queue) Close() error {
	if !q.closed.Swap(true) {
		return q.rdb.Close()
	}
	return nil
}

// Drop deletes the run's keys (the stream with its consumer group, the delayed
// set, the dead-letter stream and the entry index) and nothing else. Call it before Close.
func (q *Queue) Drop(ctx context.Context) error {
	if q.closed.Load() {
		return fmt.Errorf("redis: drop %s: %w", q.stream, adapters.ErrClosed)
	}
	if err := q.rdb.Del(ctx, q.Keys()...).Err(); err != nil {
		return fmt.Errorf("redis: drop: %w", classify(err))
	}
	return nil
}

// classify maps a go-redis error onto the port's sentinels: a refused
// connection or a server that rejects the command before running it (LOADING,
// BUSY, MASTERDOWN, READONLY, TRYAGAIN) is adapters.ErrUnavailable (definite:
// not applied); a timeout or a connection lost after the request was written is
// adapters.ErrAmbiguous; other error replies are returned as they are.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var rerr goredis.Error
	var nerr *net.OpError
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", adapters.ErrAmbiguous, err)
	case errors.Is(err, goredis.ErrClosed):
		return fmt.Errorf("%w: %w", adapters.ErrClosed, err)
	case errors.Is(err, goredis.ErrPoolTimeout), errors.Is(err, goredis.ErrPoolExhausted):
		return fmt.Errorf("%w: %w", adapters.ErrUnavailable, err)
	case errors.As(err, &rerr):
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "BUSY ", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS"} {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%w: %s", adapters.ErrUnavailable, msg)
			}
		}
		return err
	case errors.As(err, &nerr) && nerr.Op == "dial":
		return fmt.Errorf("%w: %w", adapters.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", adapters.ErrAmbiguous, err)
}

// redactErr keeps url's password out of err's text.
func redactErr(err error, url string) string {
	msg := err.Error()
	if _, rest, ok := strings.Cut(url, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	return msg
}

func noGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// opErr wraps err of op on delivery d (zero for Enqueue, Lease and Inspect).
func opErr(op string, d adapters.Delivery, err error) error {
	if err == nil {
		return nil
	}
	return &adapters.OpError{Target: Broker, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
}

// run runs script, re-creating the group once if the server lost it (a restart
// without persistence).
func (q *Queue) run(ctx context.Context, s *goredis.Script, keys []string, args ...any) (any, error) {
	v, err := s.Run(ctx, q.rdb, keys, args...).Result()
	if noGroup(err) {
		if err := q.ensureGroup(ctx); err != nil {
			return nil, err
		}
		v, err = s.Run(ctx, q.rdb, keys, args...).Result()
	}
	return v, err
}

// Enqueue appends job to the stream (XADD, with the configured trimming) and
// records the entry in the run's index, in one script; it is visible at once.
// A lost reply is adapters.ErrAmbiguous: a retry may enqueue a second copy
// (at-least-once).
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
	d := adapters.Delivery{Job: job}
	if q.closed.Load() {
		return opErr("enqueue", d, adapters.ErrClosed)
	}
	b, err := json.Marshal(job)
	if err != nil {
		return opErr("enqueue", d, err)
	}
	strategy, approx, threshold := q.trim()
	keys, args := []string{q.stream, q.ids}, []any{job.ID, "0", b, strategy, approx, threshold}
	if q.opts.WaitReplicas == 0 {
		_, err = enqueueScript.Run(ctx, q.rdb, keys, args...).Result()
		return opErr("enqueue", d, classify(err))
	}
	// WAIT counts the replicas that acknowledged every write of its own
	// connection: the script and WAIT go down one connection, as one pipeline
	// (EVAL, not EVALSHA: a NOSCRIPT would only show after the pipeline).
	pipe := q.rdb.Pipeline()
	add := enqueueScript.Eval(ctx, pipe, keys, args...)
	wait := pipe.Do(ctx, "wait", q.opts.WaitReplicas, q.opts.WaitTimeout.Milliseconds())
	_, err = pipe.Exec(ctx)
	if aerr := add.Err(); aerr != nil {
		return opErr("enqueue", d, classify(aerr))
	}
	if err != nil {
		return opErr("enqueue", d, fmt.Errorf("%w: WAIT after the XADD: %v", adapters.ErrAmbiguous, classify(err)))
	}
	if n, _ := wait.Int64(); n < int64(q.opts.WaitReplicas) {
		return opErr("enqueue", d, fmt.Errorf("%w: WAIT: %d of %d replicas acknowledged the XADD within %s", adapters.ErrAmbiguous, n, q.opts.WaitReplicas, q.opts.WaitTimeout))
	}
	return nil
}

// trim is the XADD trimming of the options: strategy (MAXLEN, MINID or ""),
// "~" or "", and the threshold.
func (q *Queue) trim() (string, string, string) {
	approx := ""
	if q.opts.Approximate {
		approx = "~"
	}
	switch {
	case q.opts.MaxLen > 0:
		return "MAXLEN", approx, strconv.FormatInt(q.opts.MaxLen, 10)
	case q.opts.MinIDAge > 0:
		return "MINID", approx, strconv.FormatInt(time.Now().Add(-q.opts.MinIDAge).UnixMilli(), 10)
	case q.opts.MinID != "":
		return "MINID", approx, q.opts.MinID
	}
	return "", "", ""
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// Lease moves due delayed jobs back into the stream, then claims the first
// pending entry idle for at least the lease (or claim-min-idle), else reads the
// next new entry; with Block it then waits for one. adapters.ErrNoJob if there
// is none. A lost reply is adapters.ErrAmbiguous: an entry may have been
// claimed for this consumer, and will be claimed again once idle.
//
// That sweep (delayed set and XAUTOCLAIM) runs in a Lua script. Between two
// sweeps of this Queue that are less than a tenth of the claim time apart, a
// Lease reads new entries first with a plain XREADGROUP and sweeps only if
// there are none: a busy worker does not pay for the sweep on every job, and an
// expired lease or a due delay waits at most that tenth longer.
func (q *Queue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	var none adapters.Delivery
	if q.closed.Load() {
		return none, opErr("lease", none, adapters.ErrClosed)
	}
	q.lastLease.Store(ms(lease))
	claim := lease
	if q.opts.ClaimMinIdle > 0 {
		claim = q.opts.ClaimMinIdle
	}
	now := time.Now().UnixNano()
	if now-q.lastSweep.Load() < int64(claim/10) {
		if d, err := q.read(ctx, claim, -1); !errors.Is(err, adapters.ErrNoJob) {
			return d, err
		}
	}
	q.lastSweep.Store(now)
	v, err := q.run(ctx, leaseScript, []string{q.stream, q.delayed, q.ids}, Group, q.consumer, ms(claim))
	switch {
	case errors.Is(err, goredis.Nil):
		if q.opts.Block > 0 {
			return q.read(ctx, claim, q.opts.Block)
		}
		return none, adapters.ErrNoJob
	case err != nil:
		return none, opErr("lease", none, classify(err))
	}
	r, ok := v.([]any)
	if !ok || len(r) != 3 {
		return none, opErr("lease", none, fmt.Errorf("redis: unexpected lease reply %T", v))
	}
	id, _ := r[0].(string)
	fields, _ := r[1].([]any)
	count, _ := r[2].(int64)
	return q.delivery(id, pairs(fields), count, claim)
}

// read reads one new entry (XREADGROUP >, delivery count 1), blocking up to
// block if it is positive.
func (q *Queue) read(ctx context.Context, claim, block time.Duration) (adapters.Delivery, error) {
	var none adapters.Delivery
	res, err := q.rdb.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: Group, Consumer: q.consumer,
		Streams: []string{q.stream, ">"}, Count: 1, Block: block}).Result()
	if noGroup(err) {
		if err := q.ensureGroup(ctx); err != nil {
			return none, opErr("lease", none, err)
		}
		return none, adapters.ErrNoJob
	}
	switch {
	case errors.Is(err, goredis.Nil):
		return none, adapters.ErrNoJob
	case err != nil:
		return none, opErr("lease", none, classify(err))
	case len(res) == 0 || len(res[0].Messages) == 0:
		return none, adapters.ErrNoJob
	}
	m := res[0].Messages[0]
	fields := map[string]string{}
	for k, v := range m.Values {
		fields[k], _ = v.(string)
	}
	return q.delivery(m.ID, fields, 1, claim)
}

func pairs(fs []any) map[string]string {
	m := make(map[string]string, len(fs)/2)
	for i := 0; i+1 < len(fs); i += 2 {
		k, _ := fs[i].(string)
		v, _ := fs[i+1].(string)
		m[k] = v
	}
	return m
}

// delivery builds the Delivery of entry; its receipt names the entry, its
// delivery count, the idle time after which a claimer takes it (the lease) and
// this consumer.
func (q *Queue) delivery(entry string, fields map[string]string, count int64, claim time.Duration) (adapters.Delivery, error) {
	var d adapters.Delivery
	base, err := strconv.ParseInt(fields["base"], 10, 64)
	if err == nil {
		err = json.Unmarshal([]byte(fields["job"]), &d.Job)
	}
	if err != nil || count < 1 {
		return adapters.Delivery{}, opErr("lease", adapters.Delivery{Job: adapters.Job{ID: fields["id"]}},
			fmt.Errorf("redis: malformed entry %s: %v", entry, err))
	}
	d.Token = uint64(base + count)
	d.Attempt = int(base + count)
	d.Receipt = entry + "|" + strconv.FormatInt(count, 10) + "|" + strconv.FormatInt(ms(claim), 10) + "|" + q.consumer
	return d, nil
}

type parsedReceipt struct{ entry, count, leaseMS, consumer string }

// receipt splits d's receipt.
func receipt(d adapters.Delivery) (parsedReceipt, error) {
	parts := strings.SplitN(d.Receipt, "|", 4)
	if len(parts) != 4 || parts[0] == "" || parts[3] == "" {
		return parsedReceipt{}, fmt.Errorf("redis: bad receipt %q", d.Receipt)
	}
	for _, n := range parts[1:3] {
		if _, err := strconv.ParseInt(n, 10, 64); err != nil {
			return parsedReceipt{}, fmt.Errorf("redis: bad receipt %q", d.Receipt)
		}
	}
	return parsedReceipt{parts[0], parts[1], parts[2], parts[3]}, nil
}

// onDelivery runs one of the checked scripts for d and maps its verdict:
// 'gone' is adapters.ErrLeaseLost, 'stale' adapters.ErrStaleToken, 'expired'
// (Extend) adapters.ErrLeaseLost.
func (q *Queue) onDelivery(ctx context.Context, op string, s *goredis.Script, d adapters.Delivery, extra any) error {
	if q.closed.Load() {
		return opErr(op, d, adapters.ErrClosed)
	}
	r, err := receipt(d)
	if err != nil {
		return opErr(op, d, err)
	}
	args := []any{Group, r.consumer, r.entry, r.count}
	switch extra {
	case nil:
	case leaseOfReceipt:
		args = append(args, r.leaseMS)
	default:
		args = append(args, extra)
	}
	v, err := q.run(ctx, s, []string{q.stream, q.delayed, q.dead, q.ids}, args...)
	if err != nil {
		return opErr(op, d, classify(err))
	}
	switch v {
	case "ok":
		return nil
	case "stale":
		return opErr(op, d, adapters.ErrStaleToken)
	case "gone", "expired":
		return opErr(op, d, adapters.ErrLeaseLost)
	}
	return opErr(op, d, fmt.Errorf("redis: unexpected %s reply %v", op, v))
}

// Ack acks and deletes the entry (XACK + XDEL) if d is its current delivery:
// adapters.ErrStaleToken once another consumer claimed it or it was delivered
// again, adapters.ErrLeaseLost once it is gone. A delivery whose idle time
// passed the lease but that nobody claimed yet is still current.
func (q *Queue) Ack(ctx context.Context, d adapters.Delivery) error {
	return q.onDelivery(ctx, "ack", ackScript, d, nil)
}

// Nack removes the entry if d is its current delivery and makes its job
// visible again after delay, as a new entry at the tail of the stream (the
// adapter's delayed set; the delay is measured on the server's clock and
// honoured by the first Lease after it).
func (q *Queue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	return q.onDelivery(ctx, "nack", nackScript, d, max(delay.Milliseconds(), 0))
}

// leaseOfReceipt asks onDelivery for the lease recorded in the receipt.
const leaseOfReceipt = "\x00lease"

// Extend resets the entry's idle time (XCLAIM ... JUSTID for its holder) while
// the lease is live: adapters.ErrLeaseLost once the entry was idle for its
// lease (the claimers' min-idle when it was leased) or is gone,
// adapters.ErrStaleToken once another delivery holds it. Redis keeps no lease
// length per entry: the extension renews the lease by the min-idle time of the
// claimers, and the length asked for is not recorded.
func (q *Queue) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	return q.onDelivery(ctx, "extend", extendScript, d, leaseOfReceipt)
}

// DeadLetter moves the current delivery's job to the dead-letter stream with
// reason, atomically.
func (q *Queue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	return q.onDelivery(ctx, "dead letter", deadScript, d, reason)
}

// Inspect lists what is left, by job id, from one atomic snapshot: queued (new
// entries, delayed jobs, and pending entries idle past the claim-min-idle or
// the last lease this Queue asked for), in flight (other pending entries) and
// dead letters. Entries the server deleted on its own (trimming) are in none
// of them: they are in Moved, named by the run's entry index, in the order
// they were added, with the deliveries they had where the group's pending
// list still counts them (the reason is the configured trimming, e.g.
// "MAXLEN 100"; the server records no time).
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	var inv adapters.Inventory
	var none adapters.Delivery
	if q.closed.Load() {
		return inv, opErr("inspect", none, adapters.ErrClosed)
	}
	claim := q.lastLease.Load()
	if q.opts.ClaimMinIdle > 0 {
		claim = ms(q.opts.ClaimMinIdle)
	}
	v, err := q.run(ctx, inspectScript, []string{q.stream, q.delayed, q.dead, q.ids}, Group, claim)
	if err != nil {
		return inv, opErr("inspect", none, classify(err))
	}
	r, ok := v.([]any)
	if !ok || len(r) != 4 {
		return inv, opErr("inspect", none, fmt.Errorf("redis: unexpected inspect reply %T", v))
	}
	inv.Queued, inv.InFlight, inv.DeadLettered = strs(r[0]), strs(r[1]), strs(r[2])
	inv.Moved = q.moved(r[3])
	return inv, nil
}

// moved reads the inspect script's {entry, job id, deliveries} triples of the
// entries the stream lost, sorted by entry id.
func (q *Queue) moved(v any) []adapters.BrokerAction {
	xs, _ := v.([]any)
	type gone struct {
		ms, seq int64
		a       adapters.BrokerAction
	}
	var gs []gone
	action, reason := adapters.ActionTrimmed, trimNote(q.opts)
	if q.opts.MaxLen == 0 && q.opts.MinID == "" && q.opts.MinIDAge == 0 {
		// No trimming configured: someone else deleted it (XDEL, XTRIM).
		action, reason = adapters.ActionDropped, "deleted from the stream, not by the adapter"
	}
	for i := 0; i+2 < len(xs); i += 3 {
		entry, _ := xs[i].(string)
		job, _ := xs[i+1].(string)
		n, _ := xs[i+2].(int64)
		msPart, seqPart, _ := strings.Cut(entry, "-")
		g := gone{a: adapters.BrokerAction{Job: job, Action: action, Reason: reason, Deliveries: int(n)}}
		g.ms, _ = strconv.ParseInt(msPart, 10, 64)
		g.seq, _ = strconv.ParseInt(seqPart, 10, 64)
		gs = append(gs, g)
	}
	slices.SortFunc(gs, func(a, b gone) int { return cmp.Or(cmp.Compare(a.ms, b.ms), cmp.Compare(a.seq, b.seq)) })
	var out []adapters.BrokerAction
	for _, g := range gs {
		out = append(out, g.a)
	}
	return out
}

func strs(v any) []string {
	xs, _ := v.([]any)
	out := []string{}
	for _, x := range xs {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
