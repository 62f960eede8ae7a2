package targets

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"

	kq "github.com/durachk/durachk/adapters/kafka"
)

// The private Kafka-protocol broker is durachk itself, re-executed as the
// hidden `durachk kafka-server --dir DIR` command (internal/kafkaserver, which
// embeds kfake): no Kafka binary reaches this machine kind. It is a direct
// child like every private instance (private.go).

// SelfServesKafka is set by kafkaserver.ServeIfAsked: this binary (a test
// binary) can serve the hidden command.
var SelfServesKafka atomic.Bool

// kafkaServerBinary is the program that serves the hidden command.
func kafkaServerBinary() (string, error) {
	return selfServer("private kafka", &SelfServesKafka, "kafkaserver.ServeIfAsked")
}

func canStartPrivateKafka() error {
	_, err := kafkaServerBinary()
	return err
}

// startPrivateKafka starts kfake on a free loopback port with its data
// directory in dir (none for the no-persistence negative control) and
// per-write fsync when log.flush.interval.messages is 1, as a direct child
// that the harness kills with SIGKILL and restarts on the same data. It has a
// SCRAM user of its own (random per instance, handed over on stdin). The
// run's spec then points at it, with the same knobs.
func startPrivateKafka(ctx context.Context, s Spec, dir string) (Instance, Spec, error) {
	bin, err := kafkaServerBinary()
	if err != nil {
		return nil, s, err
	}
	data := filepath.Join(dir, "kafka")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, s, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, s, err
	}
	cfg := KafkaServerConfig{Port: port, User: "durachk", Password: Secret(16), InMemory: s.Volatile,
		SyncWrites: privateValue(kafkaDurability, s, "log.flush.interval.messages") == "1",
		// kfake looks for expired share-group locks every 5 s unless told
		// otherwise (Kafka ends each lock by its own timer).
		BrokerConfigs: map[string]string{"share.record.lock.sweep.interval.ms": "100"}}
	for _, k := range kafkaShareBroker {
		if v, ok := s.Options[k]; ok {
			cfg.BrokerConfigs[k] = v
		}
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, s, err
	}
	u := &url.URL{Scheme: "kafka", User: url.UserPassword(cfg.User, cfg.Password), Host: "127.0.0.1:" + strconv.Itoa(port)}
	p := &privateServer{dir: data, url: u.String()}
	p.PrivateProcess = PrivateProcess{
		Addr: u.Host, RunID: s.RunID, Name: "kafka", Secret: cfg.Password,
		Command: func() *exec.Cmd {
			c := exec.Command(bin, KafkaServerCommand, "--dir", data)
			c.Dir = data
			c.Stdin = bytes.NewReader(conf)
			c.Env = append(os.Environ(), "DURACHK_NO_WATCHDOG=1")
			return c
		},
		Ready: func(ctx context.Context) error { return kq.Ready(ctx, p.url, "") },
	}
	if err := p.Start(ctx); err != nil {
		_ = p.Close()
		os.RemoveAll(data)
		return nil, s, fmt.Errorf("private kafka: %w", err)
	}
	s.URL = p.url
	s.Options = maps.Clone(s.Options)
	delete(s.Options, "sasl.mechanism") // the private broker's user is SCRAM-SHA-256
	return p, s, nil
}
