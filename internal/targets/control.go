package targets

// Broker control commands: how durachk kills, starts, pauses and resumes a
// broker it did not start (a compose container, a VM's service), and how it
// faults the nodes of a cluster it did not start (cluster_external.go).
//
//	control.kill=CMD     ends the broker as a crash would (docker kill -s KILL c)
//	control.start=CMD    starts it again on the same data and returns (docker start c);
//	                     durachk then waits until the broker accepts connections
//	control.pause=CMD    freezes it (docker pause c)
//	control.resume=CMD   ends a pause (docker unpause c)
//	control.timeout=DUR  the limit of each command (default 60s)
//	control.<node>.<action>=CMD  the same for one node of a cluster, and:
//	control.<node>.addr=HOST:PORT the node's address as its cluster names it
//	                     (durachk asks who is primary; not a command)
//	control.<node>.partition=CMD  cuts the node off from the other nodes and
//	                     from the clients outside the minority (on Postgres
//	                     durachk cuts its own clients: cluster_external.go)
//	control.<node>.heal=CMD       undoes that node's partition
//	control.<node>.lag=CMD        delays the node's replication link
//	control.<node>.unlag=CMD      ends that delay
//	control.status=CMD   prints who leads: a line "leader <node>" ("leader -"
//	                     or no such line: none known). Without it durachk asks
//	                     the broker's own API where it can (the Sentinels, every
//	                     Redis or Postgres node); a RabbitMQ queue's leader it
//	                     learns only from control.status.
//
// Pairs go together (kill with start, pause with resume, partition with heal,
// lag with unlag). Every command gets in its environment DURACHK_RUN_ID (the
// run's id), and control.status also DURACHK_QUEUE (the run's work queue,
// whose leader it prints on RabbitMQ); control.<node>.lag gets the planned
// delay as DURACHK_LAG_DELAY_MS and DURACHK_LAG_JITTER_MS, which a command
// that cannot delay by an amount (a packet-loss lag) may ignore.
//
// In durachk.yaml they are nested keys: control: {kill: ..., start: ...}.
// Each command runs with sh -c in a process group of its own, killed at its
// timeout; its output goes nowhere (it may hold secrets; control.status's
// standard output is read for its leader line and never shown), and the
// commands themselves are treated as credentials: redacted from URLs, kept
// out of reports and out of the worker processes' configuration. With kill
// and start the target can kill its broker (durability.ack runs on it); kill
// is checked: the broker must stop answering. Before a kill or a pause the
// run records what undoes it (restore.go), for durachk cleanup should the
// run die first.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/durachk/durachk/adapters/pg/pgdb"
	"github.com/durachk/durachk/adapters/rabbit"
	rq "github.com/durachk/durachk/adapters/redis"
	"github.com/durachk/durachk/adapters/sqs"
)

// Control actions.
const (
	ActionKill   = "kill"
	ActionStart  = "start"
	ActionPause  = "pause"
	ActionResume = "resume"
	// Per node only: cut the node off and undo it; delay its replication
	// and undo it.
	ActionPartition = "partition"
	ActionHeal      = "heal"
	ActionLag       = "lag"
	ActionUnlag     = "unlag"
	// ActionStatus is the cluster's, not a node's: it prints "leader <node>".
	ActionStatus = "status"
	// ActionAddr is not a command: control.<node>.addr is the node's address.
	ActionAddr = "addr"
)

const controlPrefix = "control."

// DefaultControlTimeout limits each control command.
const DefaultControlTimeout = 60 * time.Second

var nodeRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// parseControl moves the control.* parameters of u into a map keyed by
// "<action>" or "<node>.<action>" (and "timeout"), and checks them.
func parseControl(u *url.URL) (map[string]string, error) {
	q := u.Query()
	out := map[string]string{}
	for k, vs := range q {
		rest, ok := strings.CutPrefix(k, controlPrefix)
		if !ok {
			continue
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("%w: %s is given %d times", ErrBadTarget, k, len(vs))
		}
		v := vs[0]
		if rest == "timeout" {
			if d, err := time.ParseDuration(v); err != nil || d <= 0 {
				return nil, fmt.Errorf("%w: control.timeout=%q: want a duration such as 90s", ErrBadTarget, v)
			}
		} else {
			action := rest
			perNode := false
			if node, a, ok := strings.Cut(rest, "."); ok {
				if !nodeRE.MatchString(node) {
					return nil, fmt.Errorf("%w: %s: node name %q must match %s", ErrBadTarget, k, node, nodeRE)
				}
				action, perNode = a, true
			}
			if action == ActionAddr {
				if _, port, err := net.SplitHostPort(v); !perNode || err != nil || port == "" {
					return nil, fmt.Errorf("%w: %s=%q: want control.<node>.addr=host:port", ErrBadTarget, k, v)
				}
				out[rest] = v
				q.Del(k)
				continue
			}
			if !oneOf(action, ActionKill, ActionStart, ActionPause, ActionResume, ActionPartition, ActionHeal, ActionLag, ActionUnlag, ActionStatus) {
				return nil, fmt.Errorf("%w: unknown setting %q (control actions: kill, start, pause, resume; per node also partition, heal, lag, unlag and addr; control.status and control.timeout)", ErrBadTarget, k)
			}
			if perNode && action == ActionStatus {
				return nil, fmt.Errorf("%w: %s: status is the cluster's (control.status), not a node's", ErrBadTarget, k)
			}
			if !perNode && oneOf(action, ActionPartition, ActionHeal, ActionLag, ActionUnlag) {
				return nil, fmt.Errorf("%w: %s: %s is a node's: control.<node>.%s", ErrBadTarget, k, action, action)
			}
			if strings.TrimSpace(v) == "" {
				return nil, fmt.Errorf("%w: %s is empty", ErrBadTarget, k)
			}
		}
		out[rest] = v
		q.Del(k)
	}
	if len(out) == 0 {
		return nil, nil
	}
	for _, node := range controlNodes(out) {
		p := node
		if p != "" {
			p += "."
		}
		for _, pair := range [][2]string{{ActionKill, ActionStart}, {ActionPause, ActionResume}, {ActionPartition, ActionHeal}, {ActionLag, ActionUnlag}} {
			_, has0 := out[p+pair[0]]
			_, has1 := out[p+pair[1]]
			if has0 && !has1 {
				return nil, fmt.Errorf("%w: control.%s%s needs control.%s%s too", ErrBadTarget, p, pair[0], p, pair[1])
			}
			if has1 && !has0 {
				return nil, fmt.Errorf("%w: control.%s%s needs control.%s%s too", ErrBadTarget, p, pair[1], p, pair[0])
			}
		}
	}
	u.RawQuery = q.Encode()
	return out, nil
}

// controlNodes lists the nodes control names ("" for the broker as a whole).
func controlNodes(c map[string]string) []string {
	seen := map[string]bool{}
	for k := range c {
		if k == "timeout" || k == ActionStatus {
			continue
		}
		node, _, perNode := strings.Cut(k, ".")
		if !perNode {
			node = ""
		}
		seen[node] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ControlCommand returns the command of action for node ("" : the broker).
func (s Spec) ControlCommand(node, action string) string {
	if node != "" {
		return s.Control[node+"."+action]
	}
	return s.Control[action]
}

// ControlTimeout is the limit of each control command of s.
func (s Spec) ControlTimeout() time.Duration {
	if d, err := time.ParseDuration(s.Control["timeout"]); err == nil && d > 0 {
		return d
	}
	return DefaultControlTimeout
}

// ControlKills reports whether s names commands that kill and start its broker.
func (s Spec) ControlKills() bool {
	return s.ControlCommand("", ActionKill) != "" && s.ControlCommand("", ActionStart) != ""
}

// ErrControl marks a control command that failed or timed out.
var ErrControl = errors.New("control command")

// RunControl runs the command of action for node with sh -c, in a process
// group of its own that is killed at the timeout. Its output is discarded: it
// may hold secrets. The error names the action, never the command.
func RunControl(ctx context.Context, s Spec, node, action string) error {
	return runControl(ctx, s, node, action, nil, nil)
}

// runControl is RunControl with env added to the command's environment (and
// DURACHK_RUN_ID) and, if out is set, its standard output written to out (a
// file: a daemon the command forks holds no pipe of ours).
func runControl(parent context.Context, s Spec, node, action string, env []string, out *os.File) error {
	cmdline := s.ControlCommand(node, action)
	what := "control." + action
	if node != "" {
		what = "control." + node + "." + action
	}
	if cmdline == "" {
		return fmt.Errorf("%w: %s is not set", ErrControl, what)
	}
	ctx, cancel := context.WithTimeout(parent, s.ControlTimeout())
	defer cancel()
	cmd := exec.Command("sh", "-c", cmdline)
	if s.RunID != "" {
		env = append(env, "DURACHK_RUN_ID="+s.RunID)
	}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// Stdin, stdout and stderr are /dev/null: a daemon the command forks holds
	// no pipe of ours, and no output can leak.
	if out != nil {
		cmd.Stdout = out
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrControl, what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%w: %s failed: %v (its output is not shown: it may hold secrets; run it by hand)", ErrControl, what, err)
		}
		return nil
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if parent.Err() != nil {
			return fmt.Errorf("%w: %s: %w", ErrControl, what, parent.Err())
		}
		return fmt.Errorf("%w: %s did not finish within %s", ErrControl, what, s.ControlTimeout())
	}
}

// ControlLeader runs control.status (with env added to its environment) and
// returns the node its line "leader <node>" names: "" for "leader -" or no
// such line. Nothing else of its output is kept or shown.
func ControlLeader(ctx context.Context, s Spec, env ...string) (string, error) {
	f, err := os.CreateTemp("", "durachk-status-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := runControl(ctx, s, "", ActionStatus, env, f); err != nil {
		return "", err
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return "", err
	}
	return leaderLine(string(b[:min(len(b), 64<<10)])), nil
}

// leaderLine reads "leader <node>" from a status command's output.
func leaderLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "leader" && f[1] != "-" && nodeRE.MatchString(f[1]) {
			return f[1]
		}
	}
	return ""
}

// readyKinds says, per kind, whether the broker at s.URL accepts connections
// and serves requests.
var readyKinds = map[string]func(ctx context.Context, s Spec) error{
	"postgres": func(ctx context.Context, s Spec) error {
		db, err := pgdb.Open(ctx, s.URL, pgdb.Options{MaxConns: 1})
		if err != nil {
			return err
		}
		defer db.Close()
		return db.Pool.Ping(ctx)
	},
	"redis": func(ctx context.Context, s Spec) error { return rq.ReadyURL(ctx, s.URL) },
	"amqp":  func(_ context.Context, s Spec) error { return rabbit.Ready(s.URL) },
	"sqs": func(ctx context.Context, s Spec) error {
		o, err := SQSOptions(s)
		if err != nil {
			return err
		}
		c, err := sqs.NewClient(ctx, o)
		if err != nil {
			return err
		}
		_, err = sqs.ListRunQueues(ctx, c, sqs.Prefix+"readyprobe")
		return err
	},
}

// Ready reports whether s's broker accepts connections and serves requests.
func Ready(ctx context.Context, s Spec) error {
	f, ok := readyKinds[s.Kind]
	if !ok {
		return fmt.Errorf("%w: no readiness check for kind %q", ErrBadTarget, s.Kind)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return f(ctx, s)
}

// volatileByAdapter are the kinds whose adapter applies the no-persistence
// negative control on any broker (unlogged tables, transient messages); the
// others (Redis) apply it only to a private instance's configuration.
var volatileByAdapter = map[string]bool{"postgres": true, "amqp": true}

// canControlKill says why s's control commands cannot serve a broker kill, or nil.
func canControlKill(s Spec) error {
	if _, ok := readyKinds[s.Kind]; !ok {
		return fmt.Errorf("no readiness check for a %s broker restarted by control.start", s.Kind)
	}
	if s.Kind == "postgres" && sameEndpoint(s.URL, s.StoreURL) {
		return errors.New("the effect store is the Postgres that control.kill kills: give the run a store of its own (store: in durachk.yaml, or $DURACHK_STORE_URL)")
	}
	return nil
}

func sameEndpoint(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil {
		return false
	}
	host := func(u *url.URL) string {
		h := u.Hostname()
		if h == "localhost" || h == "" {
			h = "127.0.0.1"
		}
		p := u.Port()
		if p == "" {
			p = "5432"
		}
		return h + ":" + p
	}
	return host(ua) == host(ub)
}

// controlled is the target's own broker under its control commands: an
// Instance that kills and restarts it with them.
type controlled struct {
	s      Spec
	down   bool
	paused bool
}

func (c *controlled) URL() string { return c.s.URL }

// Kill runs control.kill and waits (up to the control timeout) until the
// broker stops answering: a kill command that kills nothing would make every
// acknowledged write survive.
func (c *controlled) Kill() error {
	if err := noteFault(c.s.RunID, "", ActionStart); err != nil {
		return err
	}
	if err := RunControl(context.Background(), c.s, "", ActionKill); err != nil {
		return err
	}
	c.down, c.paused = true, false
	deadline := time.Now().Add(c.s.ControlTimeout())
	for Ready(context.Background(), c.s) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: control.kill succeeded but the broker still answers after %s", ErrControl, c.s.ControlTimeout())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// Restart runs control.start and waits until the broker serves requests.
func (c *controlled) Restart(ctx context.Context) error {
	if err := RunControl(ctx, c.s, "", ActionStart); err != nil {
		return err
	}
	deadline := time.Now().Add(c.s.ControlTimeout())
	for {
		err := Ready(ctx, c.s)
		if err == nil {
			c.down = false
			noteUndone(c.s.RunID, "", ActionStart)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the broker does not serve requests %s after control.start: %s", ErrControl, c.s.ControlTimeout(), scrubURL(err.Error(), c.s.URL))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Pause runs control.pause.
func (c *controlled) Pause() error {
	if err := noteFault(c.s.RunID, "", ActionResume); err != nil {
		return err
	}
	if err := RunControl(context.Background(), c.s, "", ActionPause); err != nil {
		return err
	}
	c.paused = true
	return nil
}

// Resume runs control.resume.
func (c *controlled) Resume() error {
	if err := RunControl(context.Background(), c.s, "", ActionResume); err != nil {
		return err
	}
	c.paused = false
	noteUndone(c.s.RunID, "", ActionResume)
	return nil
}

// Stop leaves the broker as the run found it — running, unpaused — and removes
// the run's namespace on it. The broker is not durachk's: it keeps running.
func (c *controlled) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.s.ControlTimeout())
	defer cancel()
	var errs []error
	if c.paused {
		errs = append(errs, c.Resume())
	}
	if c.down {
		errs = append(errs, c.Restart(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return TeardownQueue(ctx, c.s)
}

// startControlled returns the target's broker under its control commands,
// checked to be up.
func startControlled(ctx context.Context, s Spec) (Instance, Spec, error) {
	if err := canControlKill(s); err != nil {
		return nil, s, fmt.Errorf("%w: %v", ErrBadTarget, err)
	}
	if s.Volatile && !volatileByAdapter[s.Kind] {
		return nil, s, fmt.Errorf("%w: the no-persistence negative control of a %s target needs a private instance (durachk configures its persistence); this target's broker is under control commands", ErrBadTarget, s.Kind)
	}
	if err := Ready(ctx, s); err != nil {
		return nil, s, fmt.Errorf("%w: the broker under control commands is not up: %s", ErrBadTarget, scrubURL(err.Error(), s.URL))
	}
	return &controlled{s: s}, s, nil
}

// scrubURL removes the credentials of raw from msg.
func scrubURL(msg, raw string) string {
	for _, x := range append(redactSecrets(raw), raw) {
		if len(x) >= 3 {
			msg = strings.ReplaceAll(msg, x, "xxxxx")
		}
	}
	return msg
}

func redactSecrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return nil
	}
	if pw, ok := u.User.Password(); ok {
		return []string{pw}
	}
	return nil
}

// Pauser is an Instance that can also freeze its broker (SIGSTOP-like: it keeps
// its connections and answers nothing) and thaw it.
type Pauser interface {
	Pause() error
	Resume() error
}

var _ Pauser = (*controlled)(nil)
var _ Pauser = (*PrivateProcess)(nil)
