package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/faults"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/targets"
)

// A power loss runs the private broker on a lazy file system (internal/lazyfs)
// mounted in the run directory: the broker's whole directory is on it, the
// effect store and the histories are not. The fault kills the broker, drops
// what it never fsynced and restarts it on what survived.

// Before the checkpoint that stands for the kernel's writeback, the broker is
// left to write what it buffers in its own memory: until its directory has been
// quiet for lazyQuiet (longer than Postgres's wal_writer_delay, 200 ms, after
// which its WAL writer flushes asynchronous commits), lazySettle at most.
const (
	lazyQuiet  = 300 * time.Millisecond
	lazySettle = 2 * time.Second
)

// lazyRun is the lazy file system of one run, served by `durachk lazyfs`.
type lazyRun struct {
	fs  *lazyfs.Remote
	err error // of the last power loss; the restart reports it
}

// powerLossCaps says whether runs of spec can cut the broker's power: a
// private instance and FUSE; if the broker can be killed but not so, a note
// says why.
func powerLossCaps(spec targets.Spec, caps *adapters.Capabilities) {
	if !caps.BrokerKill {
		return
	}
	if spec.ControlKills() {
		caps.Notes = append(caps.Notes, contracts.NoPowerLoss+"the broker is under control commands; a power loss needs a private instance on a lazy file system")
		return
	}
	if err := lazyfs.Available(); err != nil {
		caps.Notes = append(caps.Notes, contracts.NoPowerLoss+err.Error())
		return
	}
	caps.PowerLoss = true
}

func needsPowerLoss(p faults.Plan) bool {
	for _, f := range p.Faults {
		if f.Kind == faults.PowerLoss {
			return true
		}
	}
	return false
}

// mountLazy mounts a lazy file system at <run dir>/broker, backed by <run
// dir>/lazyfs, and returns the mount point: the directory to start the private
// instance in.
func (r *run) mountLazy() (string, error) {
	if r.spec.ControlKills() {
		return "", fmt.Errorf("power loss: the broker is under control commands; it needs a private instance")
	}
	mnt := filepath.Join(r.dir, "broker")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", err
	}
	// Brokers run as their own users (postgres, rabbitmq) and must reach it.
	if err := os.Chmod(r.dir, 0o711); err != nil {
		return "", err
	}
	opts := lazyfs.Options{IgnoreFsync: r.rc.Sabotage != nil && r.rc.Sabotage.FsyncIgnored,
		Journal: r.spec.Options[targets.PowerLossMetadata] == "journal"}
	fs, err := lazyfs.StartRemote(r.self, mnt, filepath.Join(r.dir, "lazyfs"), opts)
	if err != nil {
		return "", fmt.Errorf("power loss: %w", err)
	}
	reaper.Watch(reaper.KindPgid, strconv.Itoa(fs.Pid()))
	r.lazy = &lazyRun{fs: fs}
	r.logf("lazy file system at %s", mnt)
	return mnt, nil
}

// unmountLazy kills the private instance (a process holding a file there keeps
// the mount busy) and unmounts, before the run directory is removed.
func (r *run) unmountLazy() error {
	if r.lazy == nil {
		return nil
	}
	if r.inst != nil {
		_ = r.inst.Kill()
	}
	err := r.lazy.fs.Unmount()
	reaper.Forget(reaper.KindPgid, strconv.Itoa(r.lazy.fs.Pid()))
	return err
}

// checkpointLazy makes everything the broker wrote so far durable: the broker
// and the run's queues existed long before a real power cut, and the kernel
// would have written them back.
func (r *run) checkpointLazy(ctx context.Context) error {
	if r.lazy == nil {
		return nil
	}
	began := time.Now()
	quiet, err := r.lazy.fs.Quiesce(lazyQuiet, lazySettle)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !quiet {
		r.logf("the broker kept writing for %s: checkpoint anyway", lazySettle)
	} else {
		r.logf("checkpoint after %s (the broker wrote nothing for %s)", time.Since(began).Round(time.Millisecond), lazyQuiet)
	}
	return r.lazy.fs.Sync()
}

// onLazy makes the restart of inst report a failed power loss.
func (r *run) onLazy(inst targets.Instance) targets.Instance {
	if r.lazy == nil {
		return inst
	}
	return lazyInstance{Instance: inst, lazy: r.lazy}
}

type lazyInstance struct {
	targets.Instance
	lazy *lazyRun
}

func (i lazyInstance) Restart(ctx context.Context) error {
	if i.lazy.err != nil {
		return fmt.Errorf("power loss: %w", i.lazy.err)
	}
	return i.Instance.Restart(ctx)
}

// cutPower applies a power_loss fault: the broker is killed, what it never
// fsynced is dropped, and it comes back after f.For.
func (r *run) cutPower(f faults.Fault) {
	if r.inst == nil || r.lazy == nil {
		return
	}
	// What the cut is measured against: the configuration's flush interval.
	window, why := r.flushWindow()
	r.ctl.Record(history.Op{Type: history.Info, F: history.Node, Value: contracts.FlushWindowNote(window, why)})
	r.ctl.Record(history.Op{Type: history.Info, F: history.Fault, Value: string(faults.PowerLoss), Target: r.spec.Kind})
	r.planned = time.Now().Add(f.For + plannedGrace + time.Hour) // a planned outage, until the restart says
	if err := r.inst.Kill(); err != nil {
		r.logf("broker kill: %v", err)
	}
	began := time.Now()
	var loss lazyfs.Loss
	loss, r.lazy.err = r.lazy.fs.PowerLoss()
	r.logf("power loss of the private %s instance (%s to drop what it never fsynced): %s", r.spec.Kind, time.Since(began).Round(time.Millisecond), loss)
	r.restart = time.Now().Add(f.For)
}

// flushWindow is how long the private instance may keep an acknowledged write
// unsynced (targets.FlushWindow), and why; on a disk that ignores fsync (the
// negative control) nothing is synced.
func (r *run) flushWindow() (time.Duration, string) {
	if r.rc.Sabotage != nil && r.rc.Sabotage.FsyncIgnored {
		return 0, "the disk ignores fsync (sabotage fsync-ignored): nothing written since the checkpoint is durable"
	}
	window, why := targets.FlushWindow(r.spec)
	if why == "" {
		why = "no flush interval known for " + r.spec.Kind
	}
	return window, why
}
