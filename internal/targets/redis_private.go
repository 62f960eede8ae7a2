package targets

import (
	"context"
	"errors"
	"fmt"
	rq "github.com/durachk/durachk/adapters/redis"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// redisProfile is the persistence of a private redis-server.
type redisProfile struct{ appendonly, appendfsync, save, noFsyncOnRewrite string }

// privateRedisProfile reads the private-instance.* settings of s (the
// knobs, or the effective values ReadDurability put there). Without them the
// instance runs with durachk's defaults (redisDurability): the AOF on
// (appendonly yes, appendfsync everysec, Redis's default fsync policy once
// the AOF is on), no RDB snapshots. The negative control (Spec.Volatile) is
// appendonly no and save "": memory only.
func privateRedisProfile(s Spec) redisProfile {
	v := func(name string) string { return privateValue(redisDurability, s, name) }
	p := redisProfile{appendonly: v("appendonly"), appendfsync: v("appendfsync"), save: v("save"), noFsyncOnRewrite: v("no-appendfsync-on-rewrite")}
	if s.Volatile {
		p.appendonly, p.save = "no", ""
	}
	return p
}

// startPrivateRedis starts a redis-server of its own on a free loopback port,
// with its data (AOF, RDB) in dir and the profile's persistence settings, as a
// direct child that the harness kills with SIGKILL and restarts on the same
// data. It takes a password of its own (requirepass, random per instance; the
// config file is in the run directory, mode 0600). The run's spec then points
// at it, with the same knobs.
func startPrivateRedis(ctx context.Context, s Spec, dir string) (Instance, Spec, error) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, s, canStartPrivateRedis()
	}
	data := filepath.Join(dir, "redis")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, s, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, s, err
	}
	prof := privateRedisProfile(s)
	conf := filepath.Join(data, "redis.conf")
	password := Secret(16)
	lines := []string{
		"requirepass " + password,
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"protected-mode yes",
		"daemonize no",
		"dir " + quoteConf(data),
		"logfile " + quoteConf(filepath.Join(data, "redis.log")),
		"dbfilename dump.rdb",
		"appendonly " + prof.appendonly,
		"appendfsync " + prof.appendfsync,
		"save " + quoteConf(prof.save),
		"no-appendfsync-on-rewrite " + prof.noFsyncOnRewrite,
		"maxmemory 64mb",
		"io-threads 1",
	}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, s, err
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		return nil, s, fmt.Errorf("%w: %s", ErrBadTarget, Redact(s.URL))
	}
	u.User, u.Host, u.Path = url.UserPassword("", password), "127.0.0.1:"+strconv.Itoa(port), "/0"
	p := &privateServer{dir: data, url: u.String()}
	p.PrivateProcess = PrivateProcess{
		Addr: u.Host, RunID: s.RunID, Name: "redis",
		Logs: []string{filepath.Join(data, "redis.log")}, Secret: password,
		Command: func() *exec.Cmd {
			c := exec.Command(server, conf)
			c.Dir = data
			return c
		},
		Ready: func(ctx context.Context) error { return rq.ReadyURL(ctx, p.url) },
	}
	if err := p.Start(ctx); err != nil {
		_ = p.Close()
		os.RemoveAll(data)
		return nil, s, fmt.Errorf("private redis: %w", err)
	}
	s.URL = p.url
	return p, s, nil
}

// quoteConf quotes a redis.conf argument ("" for the empty string).
func quoteConf(v string) string { return strconv.Quote(v) }

// privateRedisVersion names the redis-server a private instance runs
// ("redis 7.0.15"), as its --version says ("Redis server v=7.0.15 sha=…").
func privateRedisVersion() (string, error) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return "", canStartPrivateRedis()
	}
	return binaryVersion(server, func(out string) string {
		for _, f := range strings.Fields(out) {
			if v, ok := strings.CutPrefix(f, "v="); ok {
				return "redis " + v
			}
		}
		return ""
	})
}

func canStartPrivateRedis() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return errors.New("private redis: redis-server not found (install the redis-server package)")
	}
	return nil
}
