package targets

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// parseSeeds are valid and nearly valid URLs of every kind; the fuzzer
// mutates them (testdata/fuzz/FuzzParse holds the corpus entries it found).
var parseSeeds = []string{
	"postgres://postgres@127.0.0.1:5432/test?sslmode=disable&fifo=true&delivery_limit=5&synchronous_commit=off&transactional_ack=true&name=pg",
	"postgresql://u:pw@localhost/db?connect_timeout=3",
	"redis://127.0.0.1:6379/0?stream.maxlen=1000&stream.approximate=true&claim-min-idle=2s&block=100&name=r",
	"redis://:secretpw@127.0.0.1:6379/1?private-instance.appendonly=yes&private-instance.appendfsync=always&private-instance.save=3600%201",
	"redis://127.0.0.1:6379/0?stream.minid=24h",
	"amqp://guest:guest@127.0.0.1:5672/?queue-arguments.x-queue-type=quorum&queue-arguments.x-delivery-limit=5&queue-arguments.x-dead-letter-exchange=dlx",
	"amqps://u:p@h:5671/vhost?prefetch=10&heartbeat=5&confirms=true&persistent=false&delayed-nack=delay-queue&expiration=1000",
	"amqp://127.0.0.1:5672/?queue-arguments.x-overflow=drop-head&queue-arguments.x-max-length=3",
	"sqs://127.0.0.1:4566?region=us-east-1&endpoint-kind=localstack&redrive.maxReceiveCount=3&attributes.MessageRetentionPeriod=86400",
	"sqs://KEY:SECRET@127.0.0.1:9324?fifo=true&content-based-dedup=true&attributes.RedrivePolicy=%7B%22maxReceiveCount%22%3A4%7D",
	"sqs://aws?region=eu-west-1&lease.wait-time-seconds=20&inspect.settle=200ms",
	"redis://127.0.0.1:6379/0?fifo=1&fifo=2",
	"mysql://root:pw@127.0.0.1:3306/test?fifo=false&delivery_limit=2&private-instance.innodb_flush_log_at_trx_commit=2&timeout=2s&name=m",
	"mariadb://u@h/db?wsrep_sync_wait=1&private-instance.sync_binlog=1",
	"kafka://127.0.0.1:9092",
	"redis://[::1]:6379/0",
	"redis://127.0.0.1:6379/0?control.kill=docker kill -s KILL durachk-redis&control.start=docker start durachk-redis&control.timeout=90s",
	"postgres://127.0.0.1:5432/test?control.kill=docker+kill+-s+KILL+pg&control.start=docker+start+pg&control.pause=docker+pause+pg&control.resume=docker+unpause+pg",
	"amqp://%zz@h/",
	"",
}

// FuzzParse: targets.Parse never panics; what it refuses is a one-line
// ErrBadTarget that never repeats the URL's password; what it accepts is a
// spec of a registered kind with a name, whose URL parses again to the same
// kind and name.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := Parse(raw)
		if err != nil {
			if !errors.Is(err, ErrBadTarget) {
				t.Fatalf("Parse(%q): error %q is not an ErrBadTarget", raw, err)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") || len(msg) > 2*maxURL+500 {
				t.Fatalf("Parse(%q): error is not one bounded line: %q", raw, msg)
			}
			if pw := password(raw); pw != "" && strings.Contains(msg, pw) && !fromElsewhere(raw, pw) {
				t.Fatalf("Parse(%q): error %q repeats the password", raw, msg)
			}
			return
		}
		if base, _, _ := strings.Cut(raw, "?"); !utf8.ValidString(raw) || strings.ContainsAny(raw, "\t\n") || strings.Contains(base, " ") {
			t.Fatalf("Parse(%q) accepted a URL with invalid UTF-8, a control character or a space outside the query", raw)
		}
		if _, ok := Lookup(s.Kind); !ok || s.Name == "" || s.URL == "" || s.StoreURL == "" {
			t.Fatalf("Parse(%q) = %+v: want a registered kind, a name, a URL and a store", raw, s)
		}
		for k, v := range s.Options {
			if k == "" || k == "name" {
				t.Fatalf("Parse(%q): option %q=%q", raw, k, v)
			}
		}
		// The spec's URL is what workers and replays parse again.
		again, err := Parse(s.URL + nameQuery(s.URL, s.Name))
		if err != nil {
			t.Fatalf("Parse(%q) accepted, but its URL %q does not parse again: %v", raw, s.URL, err)
		}
		if again.Kind != s.Kind || again.Name != s.Name {
			t.Fatalf("Parse(%q): kind/name %s/%s, parsed again %s/%s", raw, s.Kind, s.Name, again.Kind, again.Name)
		}
	})
}

// password returns the URL's password when it is distinctive enough to look
// for in a message (six bytes or more, appearing once in the URL).
// fromElsewhere reports whether the text pw still shows in Parse's error
// once the password pw is replaced by other characters: then the message got
// it from the rest of the URL, not from the password (the fuzzer's
// "//:00000000@\xb00000000": the host's byte 0xb0, escaped as %B0, and its
// seven zeros make the password's eight).
func fromElsewhere(raw, pw string) bool {
	other := "q"
	if strings.Contains(pw, "q") {
		other = "z"
		if strings.Contains(pw, "z") {
			other = "k"
		}
	}
	_, err := Parse(strings.Replace(raw, pw, strings.Repeat(other, len(pw)), 1))
	return err != nil && strings.Contains(err.Error(), pw)
}

func password(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	if len(pw) < 6 || strings.Count(raw, pw) != 1 {
		return ""
	}
	return pw
}

// nameQuery adds name= back when the spec's URL dropped it with the knobs.
func nameQuery(raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Query().Has("name") {
		return ""
	}
	sep := "?"
	if strings.Contains(raw, "?") {
		sep = "&"
	}
	return sep + "name=" + url.QueryEscape(name)
}
