package targets

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/durachk/durachk/adapters/pg/pgdb"
)

// pgBin finds the server binaries of the installed Postgres.
func pgBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		return "", fmt.Errorf("private postgres: %s not found (install the postgresql server package)", name)
	}
	return matches[len(matches)-1], nil
}

// startPrivatePostgres runs initdb in dir and starts a server on a free loopback
// port (fsync on unless private-instance.fsync=off; the target's
// synchronous_commit as the server's default), as a direct child: not through
// pg_ctl, whose restart fails on a stale pid file when an orphan is reaped
// slowly. Every connection needs the run's password (SCRAM); initdb reads it
// from a file that is removed as soon as initdb is done.
func startPrivatePostgres(ctx context.Context, s Spec, dir string) (Instance, Spec, error) {
	if err := canStartPrivatePostgres(); err != nil {
		return nil, s, err
	}
	initdb, err := pgBin("initdb")
	if err != nil {
		return nil, s, err
	}
	server, err := pgBin("postgres")
	if err != nil {
		return nil, s, err
	}
	data := filepath.Join(dir, "pgdata")
	cred, err := Credential("postgres")
	if err != nil {
		return nil, s, err
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, s, err
	}
	if cred != nil {
		// The server runs as postgres: it must reach and own its directory.
		_ = os.Chmod(dir, 0o711)
		if err := os.Chown(data, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, s, err
		}
	}
	password := Secret(16)
	pwfile := filepath.Join(dir, "initdb.pw")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return nil, s, err
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			os.Remove(pwfile)
			return nil, s, err
		}
	}
	init := exec.CommandContext(ctx, initdb, "-D", data, "-U", "postgres", "--auth=scram-sha-256", "--pwfile="+pwfile, "-E", "UTF8", "--no-sync")
	init.Dir = dir
	init.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	cancelGroup(init) // a SIGINT ends its server child too, at once
	out, err := init.CombinedOutput()
	os.Remove(pwfile)
	if err != nil {
		return nil, s, fmt.Errorf("private postgres: initdb: %v: %s", err, out)
	}
	port, err := FreePort()
	if err != nil {
		return nil, s, err
	}
	url := fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", password, port)
	args := privatePostgresArgs(s, data, port)
	p := &privateServer{dir: data, url: url}
	p.PrivateProcess = PrivateProcess{
		Addr: "127.0.0.1:" + strconv.Itoa(port), User: "postgres", RunID: s.RunID, Name: "postgres", Secret: password,
		Command: func() *exec.Cmd {
			c := exec.Command(server, args...)
			c.Dir = data
			return c
		},
		Ready: func(ctx context.Context) error {
			db, err := pgdb.Open(ctx, url, pgdb.Options{MaxConns: 1})
			if err != nil {
				return err
			}
			defer db.Close()
			return db.Pool.Ping(ctx)
		},
	}
	if err := p.Start(ctx); err != nil {
		_ = p.Close()
		os.RemoveAll(data)
		return nil, s, fmt.Errorf("private postgres: %w", err)
	}
	s.URL = url
	return p, s, nil
}

// privatePostgresArgs is the private server's command line: its data, port
// and socket, and the settings of s that change durability (pgDurability:
// the effective values ReadDurability put in s, else the knobs, else the
// defaults).
func privatePostgresArgs(s Spec, data string, port int) []string {
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=40",
		"-c", "shared_buffers=16MB", "-c", "logging_collector=off"}
	for _, d := range pgDurability {
		args = append(args, "-c", d.Name+"="+privateValue(pgDurability, s, d.Name))
	}
	return args
}

// privatePostgresVersion names the postgres a private server runs
// ("postgres 15.19"), as its --version says ("postgres (PostgreSQL) 15.19 (Debian …)").
func privatePostgresVersion() (string, error) {
	server, err := pgBin("postgres")
	if err != nil {
		return "", err
	}
	return binaryVersion(server, func(out string) string {
		if f := strings.Fields(out); len(f) >= 3 && f[1] == "(PostgreSQL)" {
			return "postgres " + f[2]
		}
		return ""
	})
}

func canStartPrivatePostgres() error {
	if _, err := pgBin("initdb"); err != nil {
		return err
	}
	_, err := pgBin("postgres")
	return err
}
