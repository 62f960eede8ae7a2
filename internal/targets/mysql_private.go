package targets

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	myq "github.com/durachk/durachk/adapters/mysql"
)

// A private MariaDB server: mariadbd itself (not mysqld_safe, which forks it)
// as a direct child of durachk, run as the mysql user, with every setting on
// its command line (--no-defaults: nothing of the installed server's
// configuration applies), its data, socket, log and pid file in the instance
// directory, listening on one loopback address only, and a root password of
// its own per instance.

// mysqlProfile is the durability of a private server: the
// private-instance.* knobs, each the server's own default when not given
// (MariaDB 10.11: innodb_flush_log_at_trx_commit 1, sync_binlog 0,
// innodb_doublewrite ON, no binary log).
type mysqlProfile struct {
	trxCommit, syncBinlog, doublewrite, logBin string
}

func privateMySQLProfile(s Spec) mysqlProfile {
	v := func(name string) string { return privateValue(mysqlDurability, s, name) }
	return mysqlProfile{trxCommit: v("innodb_flush_log_at_trx_commit"), syncBinlog: v("sync_binlog"),
		doublewrite: v("innodb_doublewrite"), logBin: v("log_bin")}
}

// privateMariaDBVersion names the mariadbd a private server runs ("mariadb
// 10.11.19"), as its --version says ("mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for …").
func privateMariaDBVersion() (string, error) {
	b, err := findMariaDB()
	if err != nil {
		return "", err
	}
	return binaryVersion(b.server, func(out string) string {
		f := strings.Fields(out)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "Ver" {
				return "mariadb " + strings.SplitN(f[i+1], "-", 2)[0]
			}
		}
		return ""
	})
}

func (p mysqlProfile) String() string {
	return fmt.Sprintf("innodb_flush_log_at_trx_commit=%s sync_binlog=%s innodb_doublewrite=%s log_bin=%s", p.trxCommit, p.syncBinlog, p.doublewrite, p.logBin)
}

// args are the durability settings on the server's command line.
func (p mysqlProfile) args() []string {
	a := []string{"--innodb-flush-log-at-trx-commit=" + p.trxCommit, "--sync-binlog=" + p.syncBinlog,
		"--innodb-doublewrite=" + map[string]string{"ON": "1", "OFF": "0"}[p.doublewrite]}
	if p.logBin == "ON" {
		a = append(a, "--log-bin=mariadb-bin", "--log-bin-index=mariadb-bin.index")
	}
	return a
}

// mariadbBins are the server and the tool that makes its data directory.
type mariadbBins struct{ server, install string }

func findMariaDB() (mariadbBins, error) {
	var b mariadbBins
	for _, c := range []struct {
		dst   *string
		names []string
	}{{&b.server, []string{"mariadbd", "/usr/sbin/mariadbd"}}, {&b.install, []string{"mariadb-install-db", "mysql_install_db"}}} {
		for _, n := range c.names {
			if p, err := exec.LookPath(n); err == nil {
				*c.dst = p
				break
			}
		}
		if *c.dst == "" {
			return b, fmt.Errorf("private mariadb: %s not found (install the mariadb-server package)", c.names[0])
		}
	}
	return b, nil
}

func canStartPrivateMySQL() error {
	_, err := findMariaDB()
	return err
}

// mariadbNode is one private server: its directory (owned by the server's
// user), address and command line.
type mariadbNode struct {
	dir, ip  string
	port     int
	user     string // "" : durachk's own
	password string
	bins     mariadbBins
	extra    []string // more settings (replication, Galera)
}

func (n *mariadbNode) data() string     { return filepath.Join(n.dir, "data") }
func (n *mariadbNode) initFile() string { return filepath.Join(n.dir, "init.sql") }
func (n *mariadbNode) errorLog() string { return filepath.Join(n.dir, "error.log") }
func (n *mariadbNode) addr() string     { return net.JoinHostPort(n.ip, strconv.Itoa(n.port)) }

// url reaches the node as root with its password, at addr (the node, or a
// proxy in front of it).
func (n *mariadbNode) url(addr string) string {
	return (&url.URL{Scheme: "mysql", User: url.UserPassword("root", n.password), Host: addr, Path: "/mysql"}).String()
}

// mkdir makes the node's directory, owned by its user.
func (n *mariadbNode) mkdir() error {
	if err := os.RemoveAll(n.dir); err != nil {
		return err
	}
	for _, d := range []string{n.dir, n.data()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := chownTo(d, n.user); err != nil {
			return err
		}
	}
	return nil
}

func chownTo(path, user string) error {
	cred, err := Credential(user)
	if err != nil || cred == nil {
		return err
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// install makes the system tables in the node's data directory (small redo
// log and buffer pool: less to write, also through a lazy file system), and
// the file that sets root's password at every start: only root@127.0.0.1 and
// root@localhost (the socket in the node's own directory) remain, both with
// the password.
func (n *mariadbNode) install(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, n.bins.install, "--no-defaults", "--datadir="+n.data(), "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=4M", "--innodb-buffer-pool-size=16M")
	cmd.Dir = n.dir
	cred, err := Credential(n.user)
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cancelGroup(cmd) // a SIGINT ends its server child too, at once
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("private mariadb: mariadb-install-db: %v: %s", err, lastLines(string(out), 4))
	}
	host, _ := os.Hostname()
	sql := []string{
		"SET SESSION sql_log_bin = 0",
		"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '" + n.password + "'",
		"ALTER USER 'root'@'127.0.0.1' IDENTIFIED BY '" + n.password + "'",
		"ALTER USER 'root'@'localhost' IDENTIFIED BY '" + n.password + "'",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
		"DROP USER IF EXISTS 'root'@'::1'",
		"DROP USER IF EXISTS ''@'localhost'",
	}
	if host != "" && !strings.ContainsAny(host, "'\\") {
		sql = append(sql, "DROP USER IF EXISTS 'root'@'"+host+"'", "DROP USER IF EXISTS ''@'"+host+"'")
	}
	if err := os.WriteFile(n.initFile(), []byte(strings.Join(sql, ";\n")+";\n"), 0o600); err != nil {
		return err
	}
	return chownTo(n.initFile(), n.user)
}

// command is the server's command line.
func (n *mariadbNode) command() *exec.Cmd {
	args := append([]string{"--no-defaults", "--datadir=" + n.data(), "--port=" + strconv.Itoa(n.port), "--bind-address=" + n.ip,
		"--socket=" + filepath.Join(n.dir, "mysqld.sock"), "--pid-file=" + filepath.Join(n.dir, "mysqld.pid"),
		"--log-error=" + n.errorLog(), "--init-file=" + n.initFile(), "--skip-name-resolve",
		"--innodb-log-file-size=4M", "--innodb-buffer-pool-size=16M", "--innodb-temp-data-file-path=ibtmp1:1M:autoextend",
		// fsync, not O_DIRECT: every flush is an fsync the lazy file system
		// sees (and O_DIRECT is refused on some FUSE mounts); no native AIO.
		"--innodb-flush-method=fsync", "--innodb-use-native-aio=0",
		"--max-connections=200", "--performance-schema=OFF", "--skip-log-bin"}, n.extra...)
	if slicesHasPrefix(n.extra, "--log-bin") {
		args = removeArg(args, "--skip-log-bin")
	}
	cmd := exec.Command(n.bins.server, args...)
	cmd.Dir = n.dir
	return cmd
}

func slicesHasPrefix(args []string, prefix string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, prefix) {
			return true
		}
	}
	return false
}

func removeArg(args []string, a string) []string {
	out := args[:0:0]
	for _, x := range args {
		if x != a {
			out = append(out, x)
		}
	}
	return out
}

// logTail is the end of the node's error log, for an error that must say why
// the server did not start: the run directory is gone once the run ends.
func (n *mariadbNode) logTail() string {
	b, err := os.ReadFile(n.errorLog())
	if err != nil {
		return "no log: " + err.Error()
	}
	return "its log ends: " + lastLines(string(b), 6)
}

func lastLines(s string, k int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-k):], " | ")
}

// startPrivateMySQL starts a private MariaDB server in dir on a free port of
// 127.0.0.1, with the private-instance.* durability settings of s; the run's
// spec then points at it as root with the instance's password. The MEMORY-
// engine negative control (Spec.Volatile) is the adapter's.
func startPrivateMySQL(ctx context.Context, s Spec, dir string) (Instance, Spec, error) {
	bins, err := findMariaDB()
	if err != nil {
		return nil, s, err
	}
	cred, err := Credential("mysql")
	if err != nil {
		return nil, s, err
	}
	n := &mariadbNode{dir: filepath.Join(dir, "mariadb"), ip: "127.0.0.1", bins: bins, password: Secret(16),
		extra: privateMySQLProfile(s).args()}
	if cred != nil {
		n.user = "mysql"
		_ = os.Chmod(dir, 0o711) // the server runs as mysql: it must reach its directory
	}
	if slicesHasPrefix(n.extra, "--log-bin") {
		n.extra = append(n.extra, "--server-id=1")
	}
	if err := n.mkdir(); err != nil {
		return nil, s, err
	}
	if err := n.install(ctx); err != nil {
		os.RemoveAll(n.dir)
		return nil, s, err
	}
	if n.port, err = FreePort(); err != nil {
		return nil, s, err
	}
	p := &privateServer{dir: n.dir, url: n.url(n.addr())}
	p.PrivateProcess = PrivateProcess{Addr: n.addr(), User: n.user, RunID: s.RunID, Name: "mariadb", Command: n.command,
		Ready: func(ctx context.Context) error { return myq.Ready(ctx, p.url) }}
	if err := p.Start(ctx); err != nil {
		tail := n.logTail()
		_ = p.Close()
		os.RemoveAll(n.dir)
		return nil, s, fmt.Errorf("private mariadb: %w: %s", err, tail)
	}
	s.URL = p.url
	return p, s, nil
}
