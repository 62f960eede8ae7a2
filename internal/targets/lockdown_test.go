package targets

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/rabbit"
	rq "github.com/durachk/durachk/adapters/redis"
)

// The checks that a private broker or cluster takes no connection without
// the run's credentials: each asserts a refusal without them (or with wrong
// ones) next to a success with them on the same address, so that a refusal
// for another reason (a node down, a port closed) fails the test too. They
// run on the clusters the failover tests start, once each, right after the
// start.

// refuses asserts that try fails with a message holding one of want (the
// broker's own reason: an authentication refusal, not a closed port).
func refuses(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted", what)
		return
	}
	for _, w := range want {
		if strings.Contains(err.Error(), w) {
			return
		}
	}
	t.Errorf("%s: refused, but not for its credentials (want %q): %v", what, want, err)
}

func accepts(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: refused: %v", what, err)
	}
}

// assertPGLockedDown: every node, on its own address and through its client
// and pinned proxies, refuses the superuser without the password or with a
// wrong one and accepts it with the run's; replication connections are the
// replication role's only, with its own password; nothing connects over the
// socket; the multi-host URL works.
func assertPGLockedDown(t *testing.T, c Cluster) {
	t.Helper()
	pc := c.(*pgCluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(url string) error { return readyKinds["postgres"](ctx, Spec{URL: url}) }
	authFailed := []string{"28P01", "password authentication failed"}
	for _, n := range pc.nodes {
		for _, addr := range []string{n.addr(), n.front.Addr(), n.pinned.Addr()} {
			at := n.name + " at " + addr
			refuses(t, at+" without a password", open("postgres://postgres@"+addr+"/postgres?sslmode=disable"), authFailed...)
			refuses(t, at+" with a wrong password", open("postgres://postgres:wrong@"+addr+"/postgres?sslmode=disable"), authFailed...)
			accepts(t, at+" with the run's password", open(pc.clientURL(addr)))
		}
		at := n.name + " at " + n.addr()
		host, port := fmt.Sprintf("host=%s port=%d", n.ip, n.port), strconv.Itoa(n.port)
		refuses(t, at+": replication without a password", psql(t, host+" user="+pgReplicationUser+" replication=true", ""), "no password supplied", "password authentication failed")
		refuses(t, at+": replication with a wrong password", psql(t, host+" user="+pgReplicationUser+" replication=true", "wrong"), "password authentication failed")
		accepts(t, at+": replication with the replication role's password", psql(t, host+" user="+pgReplicationUser+" replication=true", pc.replPassword))
		refuses(t, at+": replication as the superuser", psql(t, host+" user=postgres replication=true", pc.password), "no pg_hba.conf entry")
		refuses(t, at+": the replication role outside replication", psql(t, host+" user="+pgReplicationUser+" dbname=postgres", pc.replPassword), "no pg_hba.conf entry")
		refuses(t, at+": the socket, even with the password", psql(t, "host="+n.data+" port="+port+" user=postgres dbname=postgres", pc.password), "no pg_hba.conf entry")
	}
	accepts(t, "the multi-host URL", open(c.URL()))
	u := strings.Replace(c.URL(), ":"+pc.password+"@", "@", 1)
	refuses(t, "the multi-host URL without the password", open(u), authFailed...)
	if strings.Contains(pc.password, pc.replPassword) || pc.password == "" || pc.replPassword == "" {
		t.Errorf("the superuser's and the replication role's passwords are not two of their own")
	}
}

// psql runs one statement (IDENTIFY_SYSTEM on a replication connection, else
// SELECT 1) with conninfo and password, never prompting.
func psql(t *testing.T, conninfo, password string) error {
	t.Helper()
	bin, err := pgBin("psql")
	if err != nil {
		t.Fatal(err)
	}
	stmt := "SELECT 1"
	if strings.Contains(conninfo, "replication=true") {
		stmt = "IDENTIFY_SYSTEM"
		conninfo += " dbname=replication"
	}
	cmd := exec.Command(bin, "-w", "-X", "-c", stmt, conninfo+" sslmode=disable connect_timeout=5")
	env := pgEnv()
	if password != "" {
		env = append(env, "PGPASSWORD="+password)
	}
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// assertRedisLockedDown: every node, directly and through its proxies (and
// the address that follows the primary), refuses a client without the
// nodes' password or with another; every Sentinel refuses one without the
// Sentinels' password; the run's URL works, and does not without its
// passwords.
func assertRedisLockedDown(t *testing.T, c Cluster) {
	t.Helper()
	rc := c.(*redisCluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs := map[string]string{}
	for _, n := range rc.nodes {
		addrs[n.name+" at "+n.addr()] = n.addr()
		addrs[n.name+" through its proxy "+n.front.Addr()] = n.front.Addr()
		addrs[n.name+" pinned "+n.pinned.Addr()] = n.pinned.Addr()
	}
	if rc.vip != nil {
		addrs["the primary's address "+rc.vip.Addr()] = rc.vip.Addr()
	}
	for at, addr := range addrs {
		refuses(t, at+" without a password", rq.NodeReady(ctx, addr, ""), "NOAUTH")
		refuses(t, at+" with a wrong password", rq.NodeReady(ctx, addr, "wrong"), "WRONGPASS")
		if rc.sentinelPassword != "" {
			refuses(t, at+" with the Sentinels' password", rq.NodeReady(ctx, addr, rc.sentinelPassword), "WRONGPASS")
		}
		accepts(t, at+" with the run's password", rq.NodeReady(ctx, addr, rc.password))
	}
	for _, st := range rc.sentinels {
		at := "sentinel " + st.addr()
		_, err := rq.Sentinel(ctx, st.addr(), "", redisSentinelMaster)
		refuses(t, at+" without a password", err, "NOAUTH")
		_, err = rq.Sentinel(ctx, st.addr(), rc.password, redisSentinelMaster)
		refuses(t, at+" with the nodes' password", err, "WRONGPASS")
		_, err = rq.Sentinel(ctx, st.addr(), rc.sentinelPassword, redisSentinelMaster)
		accepts(t, at+" with the Sentinels' password", err)
	}
	accepts(t, "the run's URL", rq.ReadyURL(ctx, c.URL()))
	bare := strings.NewReplacer(":"+rc.password+"@", "@", "&password="+rc.password, "")
	if rc.sentinelPassword != "" {
		bare = strings.NewReplacer(":"+rc.sentinelPassword+"@", "@", "&password="+rc.password, "")
	}
	u := bare.Replace(c.URL())
	if strings.Contains(u, rc.password) || rc.sentinelPassword != "" && strings.Contains(u, rc.sentinelPassword) {
		t.Fatalf("could not take the passwords out of the run's URL %s", Redact(c.URL()))
	}
	refuses(t, "the run's URL without its passwords", rq.ReadyURL(ctx, u), "NOAUTH")
}

// assertRabbitLockedDown: every node, directly and through its proxies,
// refuses guest/guest (which RabbitMQ lets in from loopback, and every
// address here is loopback) and a wrong password, and takes the run's user;
// its management API the same; its Erlang distribution port completes a
// handshake with the run's cookie only.
func assertRabbitLockedDown(t *testing.T, c Cluster) {
	t.Helper()
	rc := c.(*rabbitCluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refused := []string{"403", "ACCESS_REFUSED", "username or password not allowed"}
	// A refusal takes RabbitMQ 2 s: all at once.
	var wg sync.WaitGroup
	for _, n := range rc.nodes {
		for _, addr := range []string{n.amqpAddr(), n.front.Addr(), n.pinned.Addr()} {
			at := n.name + " at " + addr
			wg.Go(func() { refuses(t, at+" as guest", rabbit.Ready("amqp://guest:guest@"+addr+"/"), refused...) })
			wg.Go(func() {
				refuses(t, at+" with a wrong password", rabbit.Ready("amqp://"+rabbitUser+":wrong@"+addr+"/"), refused...)
			})
			accepts(t, at+" as the run's user", rabbit.Ready(rc.nodeURL(addr)))
		}
	}
	wg.Wait()
	for _, n := range rc.nodes {
		api := fmt.Sprintf("http://%s/api/whoami", net.JoinHostPort(n.ip, strconv.Itoa(n.mgmt)))
		for _, tt := range []struct {
			who, user, pass string
			want            int
		}{{"no user", "", "", http.StatusUnauthorized}, {"guest", "guest", "guest", http.StatusUnauthorized},
			{"a wrong password", rabbitUser, "wrong", http.StatusUnauthorized}, {"the run's user", rabbitUser, rc.password, http.StatusOK}} {
			if got := httpStatus(ctx, t, api, tt.user, tt.pass); got != tt.want {
				t.Errorf("%s's management API with %s: %d, want %d", n.name, tt.who, got, tt.want)
			}
		}
		cookie, err := os.ReadFile(filepath.Join(rc.home, ".erlang.cookie"))
		if err != nil {
			t.Fatal(err)
		}
		assertCookie(t, n.name, net.JoinHostPort(n.ip, strconv.Itoa(n.dist)), "127.0.0.1", string(cookie))
	}
	accepts(t, "the run's node list", rabbit.Ready(c.URL()))
}

// assertRabbitNodeLockedDown: a private node refuses guest/guest (it has
// the run's user instead), and its distribution port the wrong cookie.
func assertRabbitNodeLockedDown(t *testing.T, r *privateRabbit, u url.URL) {
	t.Helper()
	u.User = url.UserPassword("guest", "guest")
	refuses(t, "private rabbitmq as guest", rabbit.Ready(u.String()), "403", "ACCESS_REFUSED", "username or password not allowed")
	cookie, err := os.ReadFile(filepath.Join(r.dir, "home", ".erlang.cookie"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(r.dir, "home", ".erlang.cookie")); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the Erlang cookie is readable by others: %v %v", fi.Mode(), err)
	}
	dist := ""
	for _, kv := range r.Command().Env {
		if v, ok := strings.CutPrefix(kv, "RABBITMQ_DIST_PORT="); ok {
			dist = v
		}
	}
	if dist == "" {
		t.Fatal("private rabbitmq: no RABBITMQ_DIST_PORT")
	}
	assertCookie(t, "private rabbitmq", "127.0.0.1:"+dist, "localhost", string(cookie))
}

func httpStatus(ctx context.Context, t *testing.T, url, user, pass string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s: %v", url, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// assertCookie checks the Erlang cookie of the node at dist: random per run
// (32 characters or more), not the machine's shared broker's, and the only
// one its distribution port accepts from a node on host (long or short
// names, as the node's).
func assertCookie(t *testing.T, node, dist, host, cookie string) {
	t.Helper()
	if len(cookie) < 32 {
		t.Errorf("%s: Erlang cookie of %d characters", node, len(cookie))
	}
	if shared, err := os.ReadFile("/var/lib/rabbitmq/.erlang.cookie"); err == nil && strings.TrimSpace(string(shared)) == cookie {
		t.Errorf("%s: the Erlang cookie is the shared broker's", node)
	}
	if err := erlangHandshake(dist, host, cookie); err != nil {
		t.Errorf("%s: the run's cookie is refused at %s: %v", node, dist, err)
	}
	for _, wrong := range []string{"WRONGCOOKIE", strings.ToLower(cookie)} {
		if err := erlangHandshake(dist, host, wrong); !errors.Is(err, errCookieRefused) {
			t.Errorf("%s: a wrong cookie at %s: %v, want it refused", node, dist, err)
		}
	}
}

var errCookieRefused = errors.New("the node closed the connection after the challenge reply")

// erlangHandshake runs the Erlang distribution handshake (protocol version 6,
// OTP 23 and later) with the node at addr as a hidden node (no global name
// registry is synced with it) on host, named afresh each time (a node still
// connected under a name answers "alive" to it), with cookie, and returns nil
// once the node acknowledges the challenge reply, errCookieRefused if it
// closes the connection instead.
func erlangHandshake(addr, host, cookie string) error {
	name := fmt.Sprintf("durachk-probe-%d@%s", rand.Uint32(), host)
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	send := func(b []byte) error {
		_, err := conn.Write(binary.BigEndian.AppendUint16(nil, uint16(len(b))))
		if err == nil {
			_, err = conn.Write(b)
		}
		return err
	}
	recv := func() ([]byte, error) {
		var n [2]byte
		if _, err := io.ReadFull(conn, n[:]); err != nil {
			return nil, err
		}
		b := make([]byte, binary.BigEndian.Uint16(n[:]))
		_, err := io.ReadFull(conn, b)
		return b, err
	}
	// The flags OTP 25 requires (extended references and pids, fun tags,
	// export tags, bit binaries, new floats, UTF-8 atoms, maps, big
	// creation, handshake 23), unlink ids and v4 node containers; not
	// DFLAG_PUBLISHED: a hidden node.
	const flags = 0x4 | 0x10 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x20000 | 0x40000 | 0x1000000 | 0x2000000 | 0x400000000
	msg := append([]byte{'N'}, binary.BigEndian.AppendUint64(nil, flags)...)
	msg = binary.BigEndian.AppendUint32(msg, rand.Uint32())
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(name)))
	if err := send(append(msg, name...)); err != nil {
		return err
	}
	status, err := recv()
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if string(status) != "sok" {
		return fmt.Errorf("status %q", status)
	}
	ch, err := recv()
	if err != nil {
		return fmt.Errorf("challenge: %w", err)
	}
	if len(ch) < 13 || ch[0] != 'N' {
		return fmt.Errorf("challenge %q", ch)
	}
	challenge := binary.BigEndian.Uint32(ch[9:13])
	digest := md5.Sum([]byte(cookie + strconv.FormatUint(uint64(challenge), 10)))
	reply := binary.BigEndian.AppendUint32([]byte{'r'}, rand.Uint32())
	if err := send(append(reply, digest[:]...)); err != nil {
		return err
	}
	ack, err := recv()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return errCookieRefused
	}
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if len(ack) != 17 || ack[0] != 'a' {
		return fmt.Errorf("ack %q", ack)
	}
	return nil
}
