package targets

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/durachk/durachk/internal/reaper"
)

// nftTable is a run's own nftables table (inet durachk_<runid>) that drops
// the traffic between the loopback addresses of nodes on either side of a
// partition: Erlang distribution is not plain TCP through a proxy (nodes find
// each other through epmd and connect directly), so it is cut in the kernel.
// Rules name the addresses, which are the run's own (LoopbackBlock); a rule on
// ports alone cuts nothing, since loopback connections between nodes use
// ephemeral source ports in both directions. Safe for concurrent use.
type nftTable struct {
	name    string
	mu      sync.Mutex
	created bool
	lock    *blockClaim // held while the table exists (nftLockPath)
}

// nftPrefix starts the name of every table durachk creates.
const nftPrefix = "durachk_"

func newNFTTable(runID string) *nftTable { return &nftTable{name: nftPrefix + runID} }

// CanPartitionKernel says why durachk cannot cut links in the kernel here, or nil.
func CanPartitionKernel() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("nft not found: partitions between RabbitMQ nodes need nftables (apt-get install -y nftables) and root")
	}
	return nil
}

func nft(args ...string) error {
	cmd := exec.Command("nft", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func (t *nftTable) ensure() error {
	if t.created {
		return nil
	}
	if err := CanPartitionKernel(); err != nil {
		return err
	}
	// The lock first: a table whose lock is held is never another cleanup's
	// to delete, whatever store that cleanup asks about live runs.
	f, err := lockBlockFile(nftLockPath(t.name))
	if err != nil || f == nil {
		return fmt.Errorf("lock of nftables table %s: held by another process or %v", t.name, err)
	}
	t.lock = &blockClaim{f: f}
	if err := nft("add", "table", "inet", t.name); err != nil {
		t.lock.release()
		return err
	}
	t.created = true
	reaper.Watch(reaper.KindNFT, t.name) // the watchdog deletes it if durachk dies
	return nft("add", "chain", "inet", t.name, "out", "{ type filter hook output priority 0 ; policy accept ; }")
}

// cut drops every packet between an address of side and an address of rest.
func (t *nftTable) cut(side, rest []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(side) == 0 || len(rest) == 0 {
		return nil
	}
	if err := t.ensure(); err != nil {
		return err
	}
	set := func(ips []string) string { return "{ " + strings.Join(ips, ", ") + " }" }
	if err := nft("add", "rule", "inet", t.name, "out", "ip", "saddr", set(side), "ip", "daddr", set(rest), "drop"); err != nil {
		return err
	}
	return nft("add", "rule", "inet", t.name, "out", "ip", "saddr", set(rest), "ip", "daddr", set(side), "drop")
}

// heal removes every rule.
func (t *nftTable) heal() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.created {
		return nil
	}
	return nft("flush", "chain", "inet", t.name, "out")
}

// remove deletes the table. Idempotent.
func (t *nftTable) remove() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.created {
		return nil
	}
	t.created = false
	reaper.Forget(reaper.KindNFT, t.name)
	err := nft("delete", "table", "inet", t.name)
	t.lock.release()
	return err
}

// nftLockPath is the lock file the process that owns the table name holds
// while the table lives (tools/extcluster/cluster.sh holds one too): the
// kernel drops the lock when its holder dies, so a held lock means a live
// owner.
func nftLockPath(table string) string {
	return filepath.Join(blockLockDir(), "durachk-nft-"+table+".lock")
}

var nftTableRE = regexp.MustCompile(`(?m)^table inet (` + nftPrefix + `([a-z0-9]{4,24}))$`)

// CleanupNFT deletes the tables of runs that were killed before their
// teardown, except those whose owner holds the table's lock (nftLockPath) and
// those of runs for which live is true, and returns what it deleted. Lock
// files that outlived their owner go too. Without nft there is nothing to
// delete.
func CleanupNFT(live func(runID string) bool) ([]string, error) {
	if CanPartitionKernel() != nil {
		return nil, nil
	}
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	var removed []string
	for _, m := range nftTableRE.FindAllStringSubmatch(string(out), -1) {
		f, err := lockBlockFile(nftLockPath(m[1]))
		if err == nil && f == nil {
			continue // its owner lives
		}
		lock := &blockClaim{f: f}
		if live(m[2]) {
			lock.release()
			continue
		}
		err = nft("delete", "table", "inet", m[1])
		lock.release()
		if err != nil {
			return removed, err
		}
		removed = append(removed, "nftables table inet "+m[1])
	}
	stale, _ := filepath.Glob(filepath.Join(blockLockDir(), "durachk-nft-*.lock"))
	for _, p := range stale {
		if f, err := lockBlockFile(p); err == nil && f != nil {
			(&blockClaim{f: f}).release()
		}
	}
	return removed, nil
}
