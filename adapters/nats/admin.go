package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The administrative calls durachk makes outside a run's queue (target checks,
// private servers, cleanup), kept here so that nats.go is imported by this
// package only. Each opens a connection of its own and closes it.

// CheckURL reports whether raw is a NATS URL the adapter can use:
// nats://[user:password@|token@]host[:port], without a path.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("cannot parse the URL")
	}
	switch {
	case u.Scheme != "nats" && u.Scheme != "tls":
		return fmt.Errorf("scheme %q: want nats or tls", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return errors.New("no host")
	case u.Path != "" && u.Path != "/":
		return fmt.Errorf("path %q: a NATS URL has none", u.Path)
	case u.RawQuery != "":
		return fmt.Errorf("unexpected parameters %q", u.RawQuery)
	}
	return nil
}

// ServerVersion connects to url and names the server, e.g. "nats-server 2.9.10";
// an error if it does not run JetStream.
func ServerVersion(ctx context.Context, url string) (string, error) {
	nc, err := connect(url, "durachk admin")
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return "", fmt.Errorf("nats: %s has no JetStream: %w", redactURL(url), err)
	}
	return "nats-server " + nc.ConnectedServerVersion(), nil
}

// Ready reports whether the server at url serves JetStream requests (after a
// restart it answers only once it has recovered its streams).
func Ready(ctx context.Context, url string) error {
	_, err := ServerVersion(ctx, url)
	return err
}

// runStreamRE matches exactly the streams a run creates; cleanup never
// deletes anything else.
var runStreamRE = regexp.MustCompile(`^durachk-([a-z0-9]{1,40})(-dlq|-events)?$`)

// RunOfStream is the run id of a run's stream name, "" for any other stream.
func RunOfStream(name string) string {
	if m := runStreamRE.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return ""
}

// DeleteRunStreams deletes the streams of runs that were killed before their
// teardown, found by listing the server's stream names, except those of runs
// for which live is true. It returns what it deleted.
func DeleteRunStreams(ctx context.Context, url string, live func(runID string) bool) ([]string, error) {
	nc, err := connect(url, "durachk cleanup")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	names := js.StreamNames(ctx)
	var mine []string
	for n := range names.Name() {
		if id := RunOfStream(n); id != "" && !live(id) {
			mine = append(mine, n)
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("nats: list streams: %w", classify(err))
	}
	var removed []string
	for _, n := range mine {
		if err := js.DeleteStream(ctx, n); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return removed, fmt.Errorf("nats: delete stream %s: %w", n, classify(err))
		}
		removed = append(removed, "nats stream "+n)
	}
	return removed, nil
}

// redactURL is raw without its password or token.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "nats://…"
	}
	return u.Redacted()
}

// redactErr keeps url's password (or token) out of err's text.
func redactErr(err error, raw string) string {
	msg := err.Error()
	u, perr := url.Parse(raw)
	if perr != nil || u.User == nil {
		return msg
	}
	if pw, ok := u.User.Password(); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	} else if tok := u.User.Username(); tok != "" {
		msg = strings.ReplaceAll(msg, tok, "xxxxx")
	}
	return msg
}
