package targets

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

// rabbitInstall makes, in dir, a RabbitMQ installation of symbolic links that
// holds only the Erlang applications a node needs: rabbit with its
// dependencies, and those of the plugins asked for. It returns the server
// script to run and the environment that makes the script use it.
//
// Why: the node loads its code on demand, and every module it loads is
// looked for in every application directory of the code path in turn. The
// Debian package puts all 70 applications of every plugin on that path, so a
// boot makes some 26,000 failed openat calls; on these machines (gVisor, where
// a system call is dear) that is 2.2 of the 5.2 s a node takes to start. With
// the 20 applications rabbit needs a node starts in 2.4 s.
//
// Should the installation not look as expected (no sbin or plugins
// directory, no rabbit application), the server script is returned as it is,
// with no environment: the node then starts as slowly as before.
func rabbitInstall(server, dir string, plugins ...string) (string, []string, error) {
	real, err := filepath.EvalSymlinks(server)
	if err != nil {
		return server, nil, nil
	}
	home := filepath.Dir(filepath.Dir(real))
	apps, err := rabbitAppClosure(filepath.Join(home, "plugins"), append([]string{"rabbit", "rabbitmq_prelaunch"}, plugins...))
	if err != nil {
		return server, nil, nil
	}
	sbin, err := os.ReadDir(filepath.Join(home, "sbin"))
	if err != nil {
		return server, nil, nil
	}
	for _, d := range []string{filepath.Join(dir, "sbin"), filepath.Join(dir, "plugins")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", nil, err
		}
	}
	for _, e := range sbin {
		if err := os.Symlink(filepath.Join(home, "sbin", e.Name()), filepath.Join(dir, "sbin", e.Name())); err != nil {
			return "", nil, err
		}
	}
	for _, a := range apps {
		if err := os.Symlink(filepath.Join(home, "plugins", a), filepath.Join(dir, "plugins", a)); err != nil {
			return "", nil, err
		}
	}
	// rabbitmq-env takes RABBITMQ_HOME as the scripts directory's parent, and
	// puts RABBITMQ_HOME/plugins on the code path (ERL_LIBS).
	return filepath.Join(dir, "sbin", filepath.Base(real)), []string{"RABBITMQ_SCRIPTS_DIR=" + filepath.Join(dir, "sbin")}, nil
}

// installDir is where a private broker's installation goes, for a broker
// whose data goes in dir: in dir, unless dir is a mount point (the lazy file
// system of durability.power-loss), then beside it. The installation is not
// the broker's data: a power loss must not take it, and its reads need not go
// through the lazy file system.
func installDir(dir, name string) string {
	var st, pst syscall.Stat_t
	if syscall.Stat(dir, &st) == nil && syscall.Stat(filepath.Dir(dir), &pst) == nil && st.Dev != pst.Dev {
		return filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-"+name)
	}
	return filepath.Join(dir, name)
}

// appDeps finds the applications an .app file names: the ones it needs to
// run, includes, or may use.
var appDeps = regexp.MustCompile(`\{(?:applications|included_applications|optional_applications),\s*\[([^\]]*)\]`)

// rabbitAppClosure is the directories under plugins (name-version) of roots
// and of every application they depend on, found by their .app files. An
// application not under plugins is Erlang/OTP's, on the code path anyway.
func rabbitAppClosure(plugins string, roots []string) ([]string, error) {
	ents, err := os.ReadDir(plugins)
	if err != nil {
		return nil, err
	}
	dirs := map[string]string{}
	for _, e := range ents {
		if name, _, ok := strings.Cut(e.Name(), "-"); ok && e.IsDir() {
			dirs[name] = e.Name()
		}
	}
	seen := map[string]bool{}
	var out []string
	for todo := slices.Clone(roots); len(todo) > 0; {
		a := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		d, ok := dirs[a]
		if seen[a] || !ok {
			continue
		}
		seen[a] = true
		out = append(out, d)
		b, err := os.ReadFile(filepath.Join(plugins, d, "ebin", a+".app"))
		if err != nil {
			return nil, err
		}
		for _, m := range appDeps.FindAllStringSubmatch(string(b), -1) {
			for _, dep := range strings.Split(m[1], ",") {
				if dep = strings.TrimSpace(dep); dep != "" {
					todo = append(todo, dep)
				}
			}
		}
	}
	for _, r := range roots {
		if !seen[r] {
			return nil, fmt.Errorf("rabbitmq application %s not in %s", r, plugins)
		}
	}
	slices.Sort(out)
	return out, nil
}
