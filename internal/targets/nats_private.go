package targets

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	nq "github.com/durachk/durachk/adapters/nats"
)

// The private JetStream server is durachk itself, re-executed as the hidden
// `durachk nats-server --dir DIR` command (internal/natsserver, which embeds
// the nats-server module): no binary to install, the same server version on
// every machine, and sync_interval, which the nats-server 2.9 of Debian does
// not know. It is a direct child like every private instance (private.go).

// NATSServerCommand is the hidden subcommand that serves a private server.
const NATSServerCommand = "nats-server"

// NATSServerConfig is what the private server reads on its standard input.
type NATSServerConfig struct {
	Port         int    `json:"port"`
	User         string `json:"user"`
	Password     string `json:"password"`
	SyncInterval string `json:"sync_interval,omitempty"` // "", "always" or a duration
}

// SelfServesNATS is set by natsserver.ServeIfAsked: this binary (a test
// binary) can serve the hidden command.
var SelfServesNATS atomic.Bool

// EmbeddedNATSVersion is the embedded server's version, set by
// internal/natsserver where it is linked in.
var EmbeddedNATSVersion string

func natsServerVersion() string {
	if EmbeddedNATSVersion == "" {
		return "(embedded)"
	}
	return EmbeddedNATSVersion
}

// natsServerBinary is the program that serves the hidden command.
func natsServerBinary() (string, error) {
	return selfServer("private nats", &SelfServesNATS, "natsserver.ServeIfAsked")
}

// selfServer is the program that serves one of durachk's hidden server
// commands: $DURACHK_BIN, else this binary unless it is a test binary that
// cannot (serves unset: its TestMain does not call serveIfAsked).
func selfServer(what string, serves *atomic.Bool, serveIfAsked string) (string, error) {
	if b := os.Getenv("DURACHK_BIN"); b != "" {
		return filepath.Abs(b)
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(self, ".test") && !serves.Load() {
		return "", fmt.Errorf("%s: %s is a test binary: call %s in TestMain, or set DURACHK_BIN to a durachk binary", what, filepath.Base(self), serveIfAsked)
	}
	return self, nil
}

func canStartPrivateNATS() error {
	_, err := natsServerBinary()
	return err
}

// startPrivateNATS starts a JetStream server of its own on a free loopback
// port, with its store in dir and the sync_interval of the
// private-instance.sync_interval knob, as a direct child that the harness kills
// with SIGKILL and restarts on the same store. It has a user and password of
// its own (random per instance, handed over on stdin). The run's spec then
// points at it, with the same knobs.
func startPrivateNATS(ctx context.Context, s Spec, dir string) (Instance, Spec, error) {
	bin, err := natsServerBinary()
	if err != nil {
		return nil, s, err
	}
	data := filepath.Join(dir, "nats")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, s, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, s, err
	}
	cfg := NATSServerConfig{Port: port, User: "durachk", Password: Secret(16), SyncInterval: privateValue(natsDurability, s, "sync_interval")}
	conf, err := json.Marshal(cfg)
	if err != nil {
		return nil, s, err
	}
	u := &url.URL{Scheme: "nats", User: url.UserPassword(cfg.User, cfg.Password), Host: "127.0.0.1:" + strconv.Itoa(port)}
	p := &privateServer{dir: data, url: u.String()}
	p.PrivateProcess = PrivateProcess{
		Addr: u.Host, RunID: s.RunID, Name: "nats", Secret: cfg.Password,
		Command: func() *exec.Cmd {
			c := exec.Command(bin, NATSServerCommand, "--dir", data)
			c.Dir = data
			c.Stdin = bytes.NewReader(conf)
			c.Env = append(os.Environ(), "DURACHK_NO_WATCHDOG=1")
			return c
		},
		Ready: func(ctx context.Context) error { return nq.Ready(ctx, p.url) },
	}
	if err := p.Start(ctx); err != nil {
		_ = p.Close()
		os.RemoveAll(data)
		return nil, s, fmt.Errorf("private nats: %w", err)
	}
	s.URL = p.url
	return p, s, nil
}
