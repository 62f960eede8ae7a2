// Package kafkaserver runs kfake, a Kafka-protocol broker written in Go
// (github.com/twmb/franz-go/pkg/kfake), inside durachk: the hidden `durachk
// kafka-server --dir DIR` command, which durachk starts as a child process for
// a private Kafka target (internal/targets) that a run can SIGKILL and restart
// on the same data directory. No Kafka binary reaches this machine kind; kfake
// is an emulator, and every result on it says so. It is the only package that
// imports kfake: the adapter (adapters/kafka) talks to it over the wire.
//
// The configuration comes on standard input as JSON (the password never
// appears on a command line); DIR, on the command line, holds the data
// directory and names the process as the run's for `durachk cleanup`.
package kafkaserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	kq "github.com/durachk/durachk/adapters/kafka"
	"github.com/durachk/durachk/internal/targets"
)

// Command is the hidden subcommand's name.
const Command = targets.KafkaServerCommand

const module = "github.com/twmb/franz-go/pkg/kfake"

// Version is kfake's module version as linked into this binary (kfake has no
// tagged release: a pseudo-version).
var Version = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == module {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "(unknown)"
}()

func init() { targets.EmbeddedKfakeVersion = Version }

// Main reads the configuration from r, starts kfake on 127.0.0.1 with its data
// in dir, and serves until the process is killed or told to stop.
func Main(dir string, r io.Reader) error {
	var c targets.KafkaServerConfig
	if err := json.NewDecoder(r).Decode(&c); err != nil {
		return fmt.Errorf("kafka-server: config on stdin: %w", err)
	}
	opts, err := options(dir, c)
	if err != nil {
		return err
	}
	cl, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("kafka-server: %w", err)
	}
	// SIGINT or SIGTERM closes the broker (its files synced); SIGKILL is
	// the crash the harness's broker faults are made of.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	cl.Close()
	return nil
}

// options are kfake's options: one broker on the loopback port, SASL with a
// user of its own, the data directory under dir, fsync per write when asked
// (Kafka's log.flush.interval.messages=1), a cluster id that names kfake and
// its version (targets read it back to name the target), and short group
// session timeouts allowed (a killed worker's partitions move in seconds).
func options(dir string, c targets.KafkaServerConfig) ([]kfake.Opt, error) {
	if dir == "" || c.Port <= 0 || c.User == "" || c.Password == "" {
		return nil, errors.New("kafka-server: dir, port, user and password are required")
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1), kfake.Ports(c.Port),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", c.User, c.Password),
		kfake.ClusterID(kq.KfakeClusterPrefix + Version),
		kfake.GroupMinSessionTimeout(500 * time.Millisecond),
	}
	if !c.InMemory {
		opts = append(opts, kfake.DataDir(data))
	}
	if c.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	if len(c.BrokerConfigs) > 0 {
		opts = append(opts, kfake.BrokerConfigs(c.BrokerConfigs))
	}
	return opts, nil
}

// ServeIfAsked lets a test binary be the private server durachk starts: call
// it first in TestMain. When the binary was started as `<binary> kafka-server
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
	targets.SelfServesKafka.Store(true)
}
