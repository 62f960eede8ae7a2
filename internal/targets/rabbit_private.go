package targets

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/durachk/durachk/adapters/rabbit"
)

// rabbitServer finds the installed rabbitmq-server start script (not the
// /usr/sbin wrapper, which switches users and detaches through su).
func rabbitServer() (string, error) {
	for _, g := range []string{"/usr/lib/rabbitmq/bin/rabbitmq-server", "/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server"} {
		if m, _ := filepath.Glob(g); len(m) > 0 {
			return m[len(m)-1], nil
		}
	}
	return "", fmt.Errorf("private rabbitmq: rabbitmq-server not found (install the rabbitmq-server package)")
}

func epmdBin() (string, error) {
	if p, err := exec.LookPath("epmd"); err == nil {
		return p, nil
	}
	if m, _ := filepath.Glob("/usr/lib/erlang/erts-*/bin/epmd"); len(m) > 0 {
		return m[len(m)-1], nil
	}
	return "", fmt.Errorf("private rabbitmq: epmd not found (install erlang-base)")
}

// privateRabbitVersion names the RabbitMQ a private node runs ("rabbitmq
// 3.10.8"), from its installation's directory (rabbitmq_server-3.10.8): the
// start script has no --version that does not boot a node.
func privateRabbitVersion() (string, error) {
	server, err := rabbitServer()
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(server); err == nil {
		server = real
	}
	for d := server; d != filepath.Dir(d); d = filepath.Dir(d) {
		if v, ok := strings.CutPrefix(filepath.Base(d), "rabbitmq_server-"); ok {
			return "rabbitmq " + v, nil
		}
	}
	return "", fmt.Errorf("private rabbitmq: no version in the path %s", server)
}

func canStartPrivateRabbit() error {
	if _, err := rabbitServer(); err != nil {
		return err
	}
	_, err := epmdBin()
	return err
}

// privateRabbit is a RabbitMQ node of its own: node name durachk-<runid>@localhost,
// AMQP, distribution and epmd ports free on 127.0.0.1 (the distribution port
// bound to loopback with inet_dist_use_interface), data and logs in the run
// directory, no plugins, a HOME of its own with a random Erlang cookie, and a
// user of its own with a random password (no guest). Its epmd is private too
// (ERL_EPMD_PORT), a direct child kept across broker kills, so that the shared
// node's epmd on 4369 is never touched. The start script runs in its exec mode
// (RABBITMQ_ALLOW_INPUT, with -noinput passed on), so that the child durachk
// started becomes beam.smp itself: the parent-death signal and the process
// group reach the node, not just a shell. Kill SIGKILLs the node's cgroup and
// process group (beam.smp, erl_child_setup, inet_gethost), as a crash would.
type privateRabbit struct {
	PrivateProcess
	epmd    PrivateProcess
	dir     string
	install string // rabbitInstall's directory
	url     string
}

func (p *privateRabbit) URL() string                       { return p.url }
func (p *privateRabbit) Restart(ctx context.Context) error { return p.Start(ctx) }
func (p *privateRabbit) Stop() error {
	err := p.Close()
	err = errors.Join(err, p.epmd.Close())
	return errors.Join(err, os.RemoveAll(p.dir), os.RemoveAll(p.install))
}

// rabbitUser is the private node's user; its password is random per node.
const rabbitUser = "durachk"

// startPrivateRabbit starts a node in dir and returns s pointing at it (its own
// user, vhost /, the same knobs).
func startPrivateRabbit(ctx context.Context, s Spec, dir string) (Instance, Spec, error) {
	server, err := rabbitServer()
	if err != nil {
		return nil, s, err
	}
	epmd, err := epmdBin()
	if err != nil {
		return nil, s, err
	}
	cred, err := Credential("rabbitmq")
	if err != nil {
		return nil, s, err
	}
	base := filepath.Join(dir, "rabbit")
	home := filepath.Join(base, "home")
	for _, d := range []string{base, home, filepath.Join(base, "mnesia"), filepath.Join(base, "log"), filepath.Join(base, "plugins")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, s, err
		}
	}
	install := installDir(dir, "rabbitmq-install")
	server, installEnv, err := rabbitInstall(server, install)
	if err != nil {
		return nil, s, err
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return nil, s, err
		}
	}
	amqpPort, distPort, epmdPort := ports[0], ports[1], ports[2]
	password := Secret(16)
	conf := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\nloopback_users.guest = true\n", amqpPort)
	files := map[string]string{
		// The default user is created on the node's first boot only; the file
		// is rewritten without the password once the node is up.
		"rabbitmq.conf":     conf + fmt.Sprintf("default_user = %s\ndefault_pass = %s\n", rabbitUser, password),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "",
		"advanced.config":   "[].\n",
		// Erlang reads the cookie from $HOME; it must be readable by its owner only.
		"home/.erlang.cookie": strings.ToUpper(Secret(16)),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(base, name), []byte(body), 0o600); err != nil {
			return nil, s, err
		}
	}
	if err := os.Chmod(filepath.Join(home, ".erlang.cookie"), 0o400); err != nil {
		return nil, s, err
	}
	if cred != nil {
		_ = os.Chmod(dir, 0o711)
		err := filepath.Walk(base, func(path string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chown(path, int(cred.Uid), int(cred.Gid))
		})
		if err != nil {
			return nil, s, err
		}
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home, "LANG=C.UTF-8",
		"ERL_EPMD_PORT=" + strconv.Itoa(epmdPort), "ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_NODENAME=durachk-" + safeNodePart(s.RunID) + "@localhost",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(amqpPort),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(base, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(base, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(base, "enabled_plugins"),
		"RABBITMQ_PLUGINS_EXPAND_DIR=" + filepath.Join(base, "plugins"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(base, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(base, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(base, "rabbitmq-env.conf"),
		"RABBITMQ_PID_FILE=" + filepath.Join(base, "pid"),
		// exec erl instead of forking it from a shell that waits (-noinput is
		// then ours to pass).
		"RABBITMQ_ALLOW_INPUT=true",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}",
	}
	env = append(env, installEnv...)
	user := ""
	if cred != nil {
		user = "rabbitmq"
	}
	u := fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/", rabbitUser, password, amqpPort)
	if orig, err := url.Parse(s.URL); err == nil && orig.RawQuery != "" {
		u += "?" + orig.RawQuery
	}
	p := &privateRabbit{dir: base, install: install, url: u}
	p.epmd = PrivateProcess{Addr: "127.0.0.1:" + strconv.Itoa(epmdPort), User: user, RunID: s.RunID, Name: "epmd",
		Command: func() *exec.Cmd {
			c := exec.Command(epmd, "-port", strconv.Itoa(epmdPort), "-address", "127.0.0.1")
			c.Env = env
			c.Dir = base
			return c
		}}
	p.PrivateProcess = PrivateProcess{Addr: "127.0.0.1:" + strconv.Itoa(amqpPort), User: user, RunID: s.RunID, Name: "rabbit",
		Logs: []string{filepath.Join(base, "log", "*.log")}, Secret: password,
		Command: func() *exec.Cmd {
			c := exec.Command(server, "-noinput")
			c.Env = env
			c.Dir = base
			return c
		},
		Ready: func(ctx context.Context) error { return rabbit.Ready(u) },
	}
	fail := func(err error) (Instance, Spec, error) {
		_ = p.Stop()
		return nil, s, err
	}
	if err := p.epmd.Start(ctx); err != nil {
		return fail(fmt.Errorf("private rabbitmq: epmd: %w", err))
	}
	if err := p.Start(ctx); err != nil {
		return fail(fmt.Errorf("private rabbitmq: %w", err))
	}
	// The user exists now: restarts need no password in the file.
	if err := os.WriteFile(filepath.Join(base, "rabbitmq.conf"), []byte(conf), 0o600); err != nil {
		return fail(err)
	}
	s.URL = u
	if err := settleRabbitQueues(ctx, s); err != nil {
		return fail(err)
	}
	return p, s, nil
}

// rabbitSettle is how long the private node is left alone after the run's
// queues are declared and before the run starts. On RabbitMQ 3.10.8 a quorum
// queue declared less than about a second before a kill -9 of its node comes
// back empty (its Raft log recovers at index 0: every confirmed message is
// gone), measured with this harness; users declare queues long before a crash,
// so the run provisions them first, and docs/rabbit.md reports the finding.
const rabbitSettle = 2 * time.Second

// settleRabbitQueues declares the run's queues on the private node and waits
// rabbitSettle.
func settleRabbitQueues(ctx context.Context, s Spec) error {
	o, err := rabbitOptions(s)
	if err != nil {
		return err
	}
	q, err := rabbit.Open(ctx, s.URL, s.RunID, o)
	if err != nil {
		return fmt.Errorf("private rabbitmq: %w", err)
	}
	q.Close()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(rabbitSettle):
	}
	return nil
}

func safeNodePart(id string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, id)
}
