package targets

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/durachk/durachk/adapters"
	kq "github.com/durachk/durachk/adapters/kafka"
)

// Kafka through a consumer group (adapters/kafka). Knobs (query parameters of
// the target URL), each the client, producer, consumer, group or topic
// setting as Kafka names it:
//
//	acks=all|1|0                         the producer's acks (default all)
//	enable.idempotence=true|false        the idempotent producer (default true; false with acks≠all)
//	auto.offset.reset=earliest|latest    where a partition without a commit starts (default earliest)
//	session.timeout.ms, heartbeat.interval.ms, rebalance.timeout.ms
//	                                     the member's (default 6000, 500, 10000)
//	group.protocol=classic|consumer      classic groups or KIP-848 (default classic)
//	num.partitions=N                     partitions of the jobs topic (default 1)
//	replication.factor=N                 of the run's topics (default: the broker's)
//	min.insync.replicas=N, retention.ms=N, unclean.leader.election.enable=B
//	                                     the jobs topic's configs (default: the broker's)
//	sasl.mechanism=SCRAM-SHA-256|SCRAM-SHA-512|PLAIN
//	                                     with credentials in the URL (default SCRAM-SHA-256)
//	fifo=true                            one record of a key at a time, in offset order (order.fifo)
//	group.type=consumer|share            a consumer group (default) or a share group (KIP-932)
//	group.share.record.lock.duration.ms=N, group.share.delivery.count.limit=N
//	                                     the private kfake's share-group lock and delivery limit
//	                                     (broker settings: a broker of yours has its own, which
//	                                     the adapter reads; Kafka's defaults 30000 and 5)
//	private-instance.log.flush.interval.messages=1|9223372036854775807
//	                                     the private kfake's fsync: 1 syncs every write, Kafka's
//	                                     default leaves it to the page cache
//	name=NAME                            the target's name in reports
var kafkaKnobs = map[string]bool{
	"acks": true, "enable.idempotence": true, "auto.offset.reset": true,
	"session.timeout.ms": true, "heartbeat.interval.ms": true, "rebalance.timeout.ms": true,
	"group.protocol": true, "num.partitions": true, "replication.factor": true,
	"min.insync.replicas": true, "retention.ms": true, "unclean.leader.election.enable": true,
	"sasl.mechanism": true, "fifo": true, "private-instance.log.flush.interval.messages": true, "name": true,
	"group.type": true, "group.share.record.lock.duration.ms": true, "group.share.delivery.count.limit": true,
}

// kafkaShareBroker are the knobs that are broker settings of share groups,
// set on the private kfake.
var kafkaShareBroker = []string{"group.share.record.lock.duration.ms", "group.share.delivery.count.limit"}

// kafkaTopicConfigs are the knobs passed to CreateTopics as the jobs topic's
// configs.
var kafkaTopicConfigs = []string{"min.insync.replicas", "retention.ms", "unclean.leader.election.enable"}

const kafkaNoFlush = "9223372036854775807" // Kafka's default: Long.MAX_VALUE

// kafkaDurability: whether the broker fsyncs every write decides what of an
// acknowledged produce survives a power loss (a kill loses nothing the
// kernel has). kfake offers per-write fsync or none: Kafka's
// log.flush.interval.messages at 1 or at its default.
var kafkaDurability = []DurabilitySetting{
	{Name: "log.flush.interval.messages", Default: kafkaNoFlush, Check: oneOfCheck("1", kafkaNoFlush)},
}

// KafkaServerCommand is the hidden subcommand that serves the private kfake
// broker (internal/kafkaserver).
const KafkaServerCommand = "kafka-server"

// KafkaServerConfig is what the private broker reads on its standard input.
type KafkaServerConfig struct {
	Port          int               `json:"port"`
	User          string            `json:"user"`
	Password      string            `json:"password"`
	SyncWrites    bool              `json:"sync_writes,omitempty"`
	InMemory      bool              `json:"in_memory,omitempty"` // no data directory (negative control)
	BrokerConfigs map[string]string `json:"broker_configs,omitempty"`
}

// EmbeddedKfakeVersion is kfake's version, set by internal/kafkaserver where
// it is linked in.
var EmbeddedKfakeVersion string

func init() {
	Register(&Kind{Name: "kafka", Schemes: []string{"kafka"}, Parse: parseKafka,
		OpenQueue: func(ctx context.Context, s Spec) (adapters.Queue, error) {
			o, err := KafkaOptions(s)
			if err != nil {
				return nil, err
			}
			if o.Share {
				return kq.OpenShare(ctx, s.URL, s.RunID, o)
			}
			return kq.Open(ctx, s.URL, s.RunID, o)
		},
		Version: func(ctx context.Context, s Spec) (string, error) {
			return kq.ServerVersion(ctx, s.URL, s.Options["sasl.mechanism"])
		},
		StartPrivate:    startPrivateKafka,
		CanStartPrivate: canStartPrivateKafka,
		Durability:      kafkaDurability,
		ServerSettings: func(context.Context, Spec) (ServerSettings, error) {
			return ServerSettings{Unread: map[string]string{"log.flush.interval.messages": "not read from the broker: private-instance.log.flush.interval.messages says what the private kfake runs with"}}, nil
		},
		PrivateVersion:     func() (string, error) { return "kfake " + kfakeVersion() + " (emulator)", nil },
		PrivateWithoutHost: true,
		Cleanup: func(ctx context.Context, s Spec, c Scope) ([]string, error) {
			if PrivateOnly(s) {
				return nil, nil // each run's kfake went with its process and directory (the local sweep)
			}
			removed, err := kq.DeleteRuns(ctx, s.URL, s.Options["sasl.mechanism"], c.Live)
			if err != nil {
				return removed, fmt.Errorf("cleanup %s: %w", Redact(s.URL), err)
			}
			return removed, nil
		},
	})
	defaultPorts["kafka"] = "9092"
	readyKinds["kafka"] = func(ctx context.Context, s Spec) error { return kq.Ready(ctx, s.URL, s.Options["sasl.mechanism"]) }
}

func kfakeVersion() string {
	if EmbeddedKfakeVersion == "" {
		return "(embedded)"
	}
	return EmbeddedKfakeVersion
}

func parseKafka(raw string, u *url.URL) (Spec, error) {
	if err := UnknownKnobs(u, kafkaKnobs); err != nil {
		return Spec{}, err
	}
	q := u.Query()
	opts := map[string]string{}
	for k := range kafkaKnobs {
		if q.Has(k) {
			opts[k] = q.Get(k)
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	private := u.Host == "" && u.User == nil && (u.Path == "" || u.Path == "/") && u.Opaque == ""
	if !private {
		if err := kq.CheckURL(u.String()); err != nil {
			return Spec{}, fmt.Errorf("%w: %s: %v", ErrBadTarget, Redact(u.Redacted()), err)
		}
	}
	name := opts["name"]
	if name == "" {
		name = "kafka"
	}
	delete(opts, "name")
	s := Spec{Name: name, URL: u.String(), Options: opts}
	if private {
		// kafka:// names no broker: every run starts a private kfake.
		s.URL = "kafka://"
		if opts["sasl.mechanism"] != "" {
			return Spec{}, fmt.Errorf("%w: kafka:// (a private kfake per run) takes no sasl.mechanism: the private broker has a user of its own", ErrBadTarget)
		}
	}
	if _, err := KafkaOptions(s); err != nil {
		return Spec{}, err
	}
	if err := checkDurabilityKnobs(kafkaDurability, opts); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// KafkaOptions reads the adapter's options from s's knobs.
func KafkaOptions(s Spec) (kq.Options, error) {
	o := kq.Options{Acks: s.Options["acks"], AutoOffsetReset: s.Options["auto.offset.reset"],
		GroupProtocol: s.Options["group.protocol"], SASLMechanism: s.Options["sasl.mechanism"], BreakOrder: s.BreakOrder}
	bad := func(k, want string) error {
		return fmt.Errorf("%w: %s=%q: want %s", ErrBadTarget, k, s.Options[k], want)
	}
	if !oneOf(o.Acks, "", "all", "-1", "1", "0") {
		return o, bad("acks", "all, 1 or 0")
	}
	if !oneOf(o.AutoOffsetReset, "", "earliest", "latest") {
		return o, bad("auto.offset.reset", "earliest or latest")
	}
	if !oneOf(o.GroupProtocol, "", "classic", "consumer") {
		return o, bad("group.protocol", "classic or consumer")
	}
	if !oneOf(o.SASLMechanism, "", "SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN") {
		return o, bad("sasl.mechanism", "SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN")
	}
	for _, k := range []string{"enable.idempotence", "fifo"} {
		if !oneOf(s.Options[k], "", "true", "false") {
			return o, bad(k, "true or false")
		}
	}
	o.NoIdempotence = s.Options["enable.idempotence"] == "false"
	o.FIFO = s.Options["fifo"] == "true"
	if !oneOf(s.Options["group.type"], "", "consumer", "share") {
		return o, bad("group.type", "consumer or share")
	}
	o.Share = s.Options["group.type"] == "share"
	if o.Share && o.FIFO {
		return o, fmt.Errorf("%w: fifo=true with group.type=share: a share group delivers the records of a partition to every member at once, in no order per key", ErrBadTarget)
	}
	for _, k := range kafkaShareBroker {
		if v, ok := s.Options[k]; ok {
			if n, err := strconv.Atoi(v); err != nil || n < 1 || (k == "group.share.delivery.count.limit" && (n < 2 || n > 10)) {
				return o, bad(k, map[bool]string{true: "2 to 10 (Kafka's bounds)", false: "milliseconds ≥ 1"}[k == "group.share.delivery.count.limit"])
			}
		}
	}
	if oneOf(o.Acks, "1", "0") && !o.NoIdempotence {
		return o, fmt.Errorf("%w: acks=%s needs enable.idempotence=false (the idempotent producer requires acks=all)", ErrBadTarget, o.Acks)
	}
	ms := []struct {
		k   string
		set func(time.Duration)
	}{
		{"session.timeout.ms", func(d time.Duration) { o.SessionTimeout = d }},
		{"heartbeat.interval.ms", func(d time.Duration) { o.HeartbeatInterval = d }},
		{"rebalance.timeout.ms", func(d time.Duration) { o.RebalanceTimeout = d }},
	}
	for _, m := range ms {
		if v, ok := s.Options[m.k]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return o, bad(m.k, "milliseconds ≥ 1")
			}
			m.set(time.Duration(n) * time.Millisecond)
		}
	}
	for _, k := range []string{"num.partitions", "replication.factor", "min.insync.replicas", "retention.ms"} {
		v, ok := s.Options[k]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || (n <= 0 && !(k == "retention.ms" && n == -1)) || (k != "retention.ms" && n > 1000) {
			return o, bad(k, "a number ≥ 1")
		}
		switch k {
		case "num.partitions":
			o.Partitions = n
		case "replication.factor":
			o.ReplicationFactor = n
		}
	}
	if v, ok := s.Options["unclean.leader.election.enable"]; ok && !oneOf(v, "true", "false") {
		return o, bad("unclean.leader.election.enable", "true or false")
	}
	for _, k := range kafkaTopicConfigs {
		if v, ok := s.Options[k]; ok {
			if o.TopicConfigs == nil {
				o.TopicConfigs = map[string]string{}
			}
			o.TopicConfigs[k] = v
		}
	}
	switch {
	case s.ControlKills():
		o.Notes = append(o.Notes, "durability.ack kills and restarts this broker with its control commands (its own settings apply)")
	default:
		o.Notes = append(o.Notes, "durability.ack and durability.power-loss run on a private kfake "+kfakeVersion()+" (an emulator embedded in durachk: one broker, no replication, a child process with its own port and data directory) with log.flush.interval.messages="+privateValue(kafkaDurability, s, "log.flush.interval.messages")+", never on this broker")
	}
	if s.Volatile {
		o.Notes = append(o.Notes, "negative control: the private kfake keeps no data directory (no persistence)")
	}
	return o, nil
}
