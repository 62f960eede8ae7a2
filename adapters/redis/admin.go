package redis

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The administrative calls durachk makes outside a run's queue (target checks,
// private instances, cleanup), kept here so that go-redis is imported by this
// package only. Each opens a one-connection client and closes it.

func adminClient(url string) (*goredis.Client, error) {
	if IsSentinelURL(url) {
		o, err := goredis.ParseFailoverURL(url)
		if err != nil {
			return nil, err
		}
		o.PoolSize, o.MaxRetries, o.DisableIdentity = 1, -1, true
		return goredis.NewFailoverClient(o), nil
	}
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	o.PoolSize, o.MaxRetries, o.DisableIdentity = 1, -1, true
	return goredis.NewClient(o), nil
}

// CheckURL reports whether url is a URL go-redis accepts.
func CheckURL(url string) error {
	if IsSentinelURL(url) {
		_, err := goredis.ParseFailoverURL(url)
		return err
	}
	_, err := goredis.ParseURL(url)
	return err
}

// ServerVersion reads the server's version, e.g. "redis 7.0.15".
func ServerVersion(ctx context.Context, url string) (string, error) {
	c, err := adminClient(url)
	if err != nil {
		return "", err
	}
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis " + v, nil
		}
	}
	return "redis", nil
}

// PersistenceSettings reads the server's values of the settings named with
// CONFIG GET, and says why for each it could not read. CONFIG may be
// disabled, renamed or refused to the user (managed Redis): appendonly is
// then read from INFO persistence (aof_enabled), the others stay unread. err
// is a server that did not answer at all.
func PersistenceSettings(ctx context.Context, url string, names []string) (values, unread map[string]string, err error) {
	c, err := adminClient(url)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	values, unread = map[string]string{}, map[string]string{}
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return nil, nil, errors.New(redactErr(err, url))
	}
	for _, n := range names {
		cfg, err := c.ConfigGet(ctx, n).Result()
		v, ok := cfg[n]
		switch {
		case err == nil && ok:
			values[n] = v
			continue
		case err == nil:
			unread[n] = "the server has no such setting"
		case strings.Contains(strings.ToLower(err.Error()), "unknown command"):
			unread[n] = "CONFIG disabled or renamed"
		default:
			unread[n] = "CONFIG GET refused: " + redactErr(err, url)
		}
		if n == "appendonly" {
			switch infoField(info, "aof_enabled") {
			case "1":
				values[n] = "yes"
				delete(unread, n)
			case "0":
				values[n] = "no"
				delete(unread, n)
			}
		}
	}
	return values, unread, nil
}

// Ready reports whether the server at addr serves requests: EXISTS answers
// LOADING while it replays its AOF or RDB.
func Ready(ctx context.Context, addr string) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	return c.Exists(ctx, "durachk:ready").Err()
}

// ReadyURL is Ready for the server at url (with its password).
func ReadyURL(ctx context.Context, url string) error {
	c, err := adminClient(url)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Exists(ctx, "durachk:ready").Err()
}

// runKeyRE matches exactly the keys a run creates (Prefix + stream, delayed,
// dead or ids); cleanup never deletes anything else.
var runKeyRE = regexp.MustCompile(`^durachk:([a-z0-9]{1,40}):(stream|delayed|dead|ids)$`)

// workerKeyRE matches the keys a worker of a run's own creates under the
// run's namespace (the worker protocol: keys prefixed durachk_<runid>_q:,
// targets.WorkerNamespace) — a job library's, such as BullMQ's queue.
var workerKeyRE = regexp.MustCompile(`^durachk_([a-z0-9]{1,40})_q:`)

// DeleteRunKeys deletes the keys of runs that were killed before their
// teardown — durachk's own and those of a worker's namespace — found with
// SCAN (never KEYS), except those of runs for which live is true. It returns
// what it deleted.
func DeleteRunKeys(ctx context.Context, url string, live func(runID string) bool) ([]string, error) {
	c, err := adminClient(url)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var removed []string
	for _, scan := range []struct {
		match string
		re    *regexp.Regexp
	}{{"durachk:*", runKeyRE}, {"durachk_*_q:*", workerKeyRE}} {
		it := c.Scan(ctx, 0, scan.match, 500).Iterator()
		for it.Next(ctx) {
			k := it.Val()
			m := scan.re.FindStringSubmatch(k)
			if m == nil || live(m[1]) {
				continue
			}
			if err := c.Del(ctx, k).Err(); err != nil {
				return removed, fmt.Errorf("delete %s: %w", k, err)
			}
			removed = append(removed, "redis key "+k)
		}
		if err := it.Err(); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// KeysWithPrefix lists the keys under prefix, found with SCAN (never KEYS):
// what a run left, for the tests that check it left nothing.
func KeysWithPrefix(ctx context.Context, url, prefix string) ([]string, error) {
	c, err := adminClient(url)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var keys []string
	it := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	return keys, it.Err()
}
