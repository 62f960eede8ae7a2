// Package natsserver runs a NATS server with JetStream inside durachk: the
// hidden `durachk nats-server --dir DIR` command, which durachk starts as a
// child process for a private JetStream server (internal/targets) that a run
// can SIGKILL and restart on the same store. It embeds
// github.com/nats-io/nats-server/v2, so no nats-server binary is needed, and
// it is the only package that imports it: the adapter (adapters/nats) talks to
// the server over the wire like any client.
//
// The configuration comes on standard input as JSON (the password never
// appears on a command line); DIR, on the command line, holds the JetStream
// store and the log, and names the process as the run's for `durachk cleanup`.
package natsserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/durachk/durachk/internal/targets"
)

// Command is the hidden subcommand's name.
const Command = targets.NATSServerCommand

// Version is the embedded server's version.
const Version = server.VERSION

func init() { targets.EmbeddedNATSVersion = Version }

// Main reads the configuration from r, starts the server on 127.0.0.1 with its
// store in dir, and serves until the process is killed.
func Main(dir string, r io.Reader) error {
	var c targets.NATSServerConfig
	if err := json.NewDecoder(r).Decode(&c); err != nil {
		return fmt.Errorf("nats-server: config on stdin: %w", err)
	}
	o, err := options(dir, c)
	if err != nil {
		return err
	}
	s, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("nats-server: %w", err)
	}
	s.ConfigureLogger()
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return errors.New("nats-server: not ready for connections within 30 s (see " + o.LogFile + ")")
	}
	s.WaitForShutdown()
	return nil
}

// options are the server's options: loopback only, a user of its own, the
// JetStream store in dir, small limits, and the sync interval asked for
// ("always": fsync before every PubAck; a duration: fsync that often;
// "": the server's default, 2 minutes).
func options(dir string, c targets.NATSServerConfig) (*server.Options, error) {
	if dir == "" || c.Port <= 0 || c.User == "" || c.Password == "" {
		return nil, errors.New("nats-server: dir, port, user and password are required")
	}
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, err
	}
	o := &server.Options{
		ServerName: "durachk", Host: "127.0.0.1", Port: c.Port, Username: c.User, Password: c.Password,
		JetStream: true, StoreDir: store, JetStreamMaxMemory: 256 << 20, JetStreamMaxStore: 1 << 30,
		NoSigs: true, LogFile: filepath.Join(dir, "nats-server.log"), DisableJetStreamBanner: true,
	}
	switch c.SyncInterval {
	case "":
	case "always":
		o.SyncAlways = true
	default:
		d, err := time.ParseDuration(c.SyncInterval)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("nats-server: sync_interval %q: want always or a duration", c.SyncInterval)
		}
		o.SyncInterval = d
	}
	return o, nil
}

// ServeIfAsked lets a test binary be the private server durachk starts: call
// it first in TestMain. When the binary was started as `<binary> nats-server
// --dir DIR` it serves and exits; otherwise it notes that this binary can, and
// returns.
func ServeIfAsked() {
	if len(os.Args) == 4 && os.Args[1] == Command && os.Args[2] == "--dir" {
		if err := Main(os.Args[3], os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	targets.SelfServesNATS.Store(true)
}
