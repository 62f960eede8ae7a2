package redis

import (
	"context"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The administrative calls of a replicated topology (a primary with replicas,
// Sentinels), for the harness that starts and faults it: go-redis is imported
// by this package only. Each opens a one-connection client to one address and
// closes it; none retries.

func nodeClient(addr, password string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, Password: password, PoolSize: 1, MaxRetries: -1, DisableIdentity: true,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, Protocol: 2})
}

// NodeReady is Ready for the server at addr with its password (its
// requirepass, "" for none).
func NodeReady(ctx context.Context, addr, password string) error {
	c := nodeClient(addr, password)
	defer c.Close()
	return c.Exists(ctx, "durachk:ready").Err()
}

// Replication is a server's own account of its place in replication (INFO
// replication).
type Replication struct {
	Role string // "master" or "slave"
	// Offset is master_repl_offset: on a primary, the replication stream it
	// produced; on a replica, how much of it the replica processed.
	Offset int64
	// MasterAddr is the primary a replica follows (host:port as configured).
	MasterAddr string
	// LinkUp: master_link_status:up (a replica in sync with its primary).
	LinkUp bool
	// Replicas is connected_slaves (a primary).
	Replicas int
}

// NodeReplication reads INFO replication of the server at addr (password:
// its requirepass, "" for none).
func NodeReplication(ctx context.Context, addr, password string) (Replication, error) {
	c := nodeClient(addr, password)
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return Replication{}, classify(err)
	}
	var r Replication
	r.Role = infoField(info, "role")
	r.Offset, _ = strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
	if h := infoField(info, "master_host"); h != "" {
		r.MasterAddr = net.JoinHostPort(h, infoField(info, "master_port"))
	}
	r.LinkUp = infoField(info, "master_link_status") == "up"
	r.Replicas, _ = strconv.Atoi(infoField(info, "connected_slaves"))
	return r, nil
}

// ReplicaOf makes the server at addr a replica of primary (host:port), or a
// primary itself when primary is "" (REPLICAOF NO ONE).
func ReplicaOf(ctx context.Context, addr, password, primary string) error {
	c := nodeClient(addr, password)
	defer c.Close()
	host, port := "NO", "ONE"
	if primary != "" {
		var err error
		if host, port, err = net.SplitHostPort(primary); err != nil {
			return err
		}
	}
	return classify(c.Do(ctx, "replicaof", host, port).Err())
}

// ConfigSet sets one configuration parameter of the server at addr.
func ConfigSet(ctx context.Context, addr, password, name, value string) error {
	c := nodeClient(addr, password)
	defer c.Close()
	return classify(c.ConfigSet(ctx, name, value).Err())
}

// SentinelView is what one Sentinel knows of a master it monitors.
type SentinelView struct {
	Master    string // host:port of the master, as the Sentinel announces it
	Sentinels int    // other Sentinels it knows
	Replicas  int    // replicas it knows
}

// Sentinel asks the Sentinel at addr (password: the Sentinel's own, "" for
// none) about master name.
func Sentinel(ctx context.Context, addr, password, name string) (SentinelView, error) {
	c := goredis.NewSentinelClient(&goredis.Options{Addr: addr, Password: password, PoolSize: 1, MaxRetries: -1, DisableIdentity: true,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, Protocol: 2})
	defer c.Close()
	var v SentinelView
	hp, err := c.GetMasterAddrByName(ctx, name).Result()
	if err != nil {
		return v, classify(err)
	}
	if len(hp) != 2 {
		return v, fmt.Errorf("sentinel %s: master %s: unexpected reply %v", addr, name, hp)
	}
	v.Master = net.JoinHostPort(hp[0], hp[1])
	ss, err := c.Sentinels(ctx, name).Result()
	if err != nil {
		return v, classify(err)
	}
	v.Sentinels = len(ss)
	rs, err := c.Replicas(ctx, name).Result()
	if err != nil {
		return v, classify(err)
	}
	for _, r := range rs {
		if !strings.Contains(r["flags"], "disconnected") && !strings.Contains(r["flags"], "s_down") {
			v.Replicas++
		}
	}
	return v, nil
}

// SentinelURL splits a Sentinel URL (go-redis's form) into the Sentinels'
// addresses and password, the master's name, and a plain URL of the master's
// database with its password, for host:port filled in.
func SentinelURL(url string) (sentinels []string, sentinelPassword, master string, plain func(hostport string) string, err error) {
	o, err := goredis.ParseFailoverURL(url)
	if err != nil {
		return nil, "", "", nil, err
	}
	plain = func(hostport string) string {
		u := "redis://"
		if o.Username != "" || o.Password != "" {
			u += neturl.UserPassword(o.Username, o.Password).String() + "@"
		}
		return fmt.Sprintf("%s%s/%d", u, hostport, o.DB)
	}
	return o.SentinelAddrs, o.SentinelPassword, o.MasterName, plain, nil
}

// URLPassword is the password of a plain redis URL ("" for none).
func URLPassword(url string) string {
	o, err := goredis.ParseURL(url)
	if err != nil {
		return ""
	}
	return o.Password
}
