package targets

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeRabbit lays out an installation like the Debian package's: sbin with
// the server script, plugins with one name-version directory per application.
func fakeRabbit(t *testing.T, apps map[string]string) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "rabbitmq_server-3.10.8")
	if err := os.MkdirAll(filepath.Join(home, "sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rabbitmq-server", "rabbitmq-env", "rabbitmq-defaults"} {
		if err := os.WriteFile(filepath.Join(home, "sbin", f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, app := range apps {
		ebin := filepath.Join(home, "plugins", name+"-1.0.0", "ebin")
		if err := os.MkdirAll(ebin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ebin, name+".app"), []byte(app), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

func TestRabbitAppClosure(t *testing.T) {
	home := fakeRabbit(t, map[string]string{
		"rabbit":              "{application, rabbit, [{applications, [kernel, stdlib, rabbit_common, ra]},\n {included_applications, [cuttlefish]}]}.",
		"rabbit_common":       "{application, rabbit_common, [{applications, [kernel, recon]}]}.",
		"ra":                  "{application, ra, [{applications, [kernel, gen_batch_server]}]}.",
		"gen_batch_server":    "{application, gen_batch_server, [{applications, []}]}.",
		"recon":               "{application, recon, []}.",
		"cuttlefish":          "{application, cuttlefish, [{optional_applications, [getopt]}]}.",
		"getopt":              "{application, getopt, []}.",
		"rabbitmq_prelaunch":  "{application, rabbitmq_prelaunch, [{applications, [rabbit_common]}]}.",
		"rabbitmq_management": "{application, rabbitmq_management, [{applications, [rabbit, cowboy]}]}.",
		"cowboy":              "{application, cowboy, [{applications, [cowlib]}]}.",
		"cowlib":              "{application, cowlib, []}.",
		"rabbitmq_mqtt":       "{application, rabbitmq_mqtt, [{applications, [rabbit]}]}.",
	})
	core := []string{"cuttlefish-1.0.0", "gen_batch_server-1.0.0", "getopt-1.0.0", "ra-1.0.0", "rabbit-1.0.0", "rabbit_common-1.0.0", "rabbitmq_prelaunch-1.0.0", "recon-1.0.0"}
	for _, tt := range []struct {
		name  string
		roots []string
		want  []string
	}{
		{"rabbit alone", []string{"rabbit", "rabbitmq_prelaunch"}, core},
		{"with management", []string{"rabbit", "rabbitmq_prelaunch", "rabbitmq_management"}, slices.Sorted(slices.Values(append(slices.Clone(core), "cowboy-1.0.0", "cowlib-1.0.0", "rabbitmq_management-1.0.0")))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := rabbitAppClosure(filepath.Join(home, "plugins"), tt.roots)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := rabbitAppClosure(filepath.Join(home, "plugins"), []string{"rabbit", "rabbitmq_nothing"}); err == nil {
		t.Error("a root that is not installed: no error")
	}
}

func TestRabbitInstall(t *testing.T) {
	home := fakeRabbit(t, map[string]string{
		"rabbit":             "{application, rabbit, [{applications, [kernel]}]}.",
		"rabbitmq_prelaunch": "{application, rabbitmq_prelaunch, []}.",
		"rabbitmq_mqtt":      "{application, rabbitmq_mqtt, [{applications, [rabbit]}]}.",
	})
	link := filepath.Join(t.TempDir(), "rabbitmq-server")
	if err := os.Symlink(filepath.Join(home, "sbin", "rabbitmq-server"), link); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "install")
	server, env, err := rabbitInstall(link, dir)
	if err != nil {
		t.Fatal(err)
	}
	if server != filepath.Join(dir, "sbin", "rabbitmq-server") || !slices.Equal(env, []string{"RABBITMQ_SCRIPTS_DIR=" + filepath.Join(dir, "sbin")}) {
		t.Fatalf("server %s, env %v", server, env)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "plugins"))
	var apps []string
	for _, e := range ents {
		apps = append(apps, e.Name())
	}
	if !slices.Equal(apps, []string{"rabbit-1.0.0", "rabbitmq_prelaunch-1.0.0"}) {
		t.Errorf("plugins %v, want rabbit and rabbitmq_prelaunch only", apps)
	}
	if got, err := os.Readlink(filepath.Join(dir, "sbin", "rabbitmq-env")); err != nil || got != filepath.Join(home, "sbin", "rabbitmq-env") {
		t.Errorf("sbin/rabbitmq-env -> %q %v", got, err)
	}

	// An installation that does not look as expected is used as it is.
	bare := filepath.Join(t.TempDir(), "rabbitmq-server")
	if err := os.WriteFile(bare, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if server, env, err := rabbitInstall(bare, filepath.Join(t.TempDir(), "install")); err != nil || server != bare || env != nil {
		t.Errorf("bare script: %s %v %v", server, env, err)
	}
}
