package targets

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseControl(t *testing.T) {
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return "redis://127.0.0.1:6379/0?" + v.Encode()
	}
	tests := []struct {
		name, url string
		want      map[string]string // nil: no control
		wantErr   string
		kills     bool
	}{
		{"none", "redis://127.0.0.1:6379/0", nil, "", false},
		{"kill and start", q("control.kill", "docker kill -s KILL r", "control.start", "docker start r"),
			map[string]string{"kill": "docker kill -s KILL r", "start": "docker start r"}, "", true},
		{"all four and a timeout", q("control.kill", "k", "control.start", "s", "control.pause", "p", "control.resume", "r", "control.timeout", "90s"),
			map[string]string{"kill": "k", "start": "s", "pause": "p", "resume": "r", "timeout": "90s"}, "", true},
		{"per node", q("control.n1.kill", "k1", "control.n1.start", "s1"), map[string]string{"n1.kill": "k1", "n1.start": "s1"}, "", false},
		{"kill without start", q("control.kill", "k"), nil, "control.kill needs control.start", false},
		{"resume without pause", q("control.resume", "r"), nil, "control.resume needs control.pause", false},
		{"node kill without start", q("control.n1.kill", "k"), nil, "control.n1.kill needs control.n1.start", false},
		{"unknown action", q("control.restart", "x"), nil, `unknown setting "control.restart"`, false},
		{"bad node", q("control.N 1.kill", "x", "control.N 1.start", "y"), nil, "node name", false},
		{"empty command", q("control.kill", " ", "control.start", "s"), nil, "control.kill is empty", false},
		{"bad timeout", q("control.kill", "k", "control.start", "s", "control.timeout", "soon"), nil, "control.timeout", false},
		{"twice", q("control.kill", "a", "control.kill", "b", "control.start", "s"), nil, "given 2 times", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.url)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse: %v, want a bad-target error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Control) != len(tt.want) {
				t.Fatalf("Control = %v, want %v", s.Control, tt.want)
			}
			for k, v := range tt.want {
				if s.Control[k] != v {
					t.Errorf("Control[%s] = %q, want %q", k, s.Control[k], v)
				}
			}
			if strings.Contains(s.URL, "control") {
				t.Errorf("the kind's URL still has the control commands: %s", s.URL)
			}
			if s.ControlKills() != tt.kills {
				t.Errorf("ControlKills = %v, want %v", s.ControlKills(), tt.kills)
			}
			if tt.want != nil && strings.Contains(Redact(tt.url), "docker") {
				t.Errorf("Redact leaves the commands in %s", Redact(tt.url))
			}
		})
	}
}

// RunControl: a failing command's output and text never reach the error; a
// command past its timeout is killed with everything it started.
func TestRunControl(t *testing.T) {
	dir := t.TempDir()
	pidfile := filepath.Join(dir, "child.pid")
	s := Spec{Control: map[string]string{
		"kill":    "echo Sup3rSecret; echo Sup3rSecret >&2; exit 3",
		"start":   "sleep 30 & echo $! > " + pidfile + "; wait",
		"timeout": "300ms",
	}}
	err := RunControl(context.Background(), s, "", ActionKill)
	if err == nil || !errors.Is(err, ErrControl) || !strings.Contains(err.Error(), "control.kill failed") {
		t.Fatalf("RunControl of a failing command: %v", err)
	}
	if strings.Contains(err.Error(), "Sup3rSecret") {
		t.Errorf("the error shows the command or its output: %v", err)
	}
	begin := time.Now()
	err = RunControl(context.Background(), s, "", ActionStart)
	if err == nil || !strings.Contains(err.Error(), "did not finish within 300ms") {
		t.Fatalf("RunControl past its timeout: %v", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("RunControl returned after %s, want about the timeout", d)
	}
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid := atoi(strings.TrimSpace(string(b)))
	for wait := time.Now().Add(2 * time.Second); !zombieProc(pid) && time.Now().Before(wait); {
		time.Sleep(20 * time.Millisecond)
	}
	if !zombieProc(pid) {
		t.Errorf("the command's child (pid %d) outlived the timeout", pid)
	}
	if err := RunControl(context.Background(), s, "n1", ActionKill); err == nil || !strings.Contains(err.Error(), "control.n1.kill is not set") {
		t.Errorf("RunControl of an unset node command: %v", err)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// A Postgres whose effect store is the same server cannot be killed by its
// control commands: the run's results would die with it.
func TestControlKillNeedsAnotherStore(t *testing.T) {
	v := url.Values{"control.kill": {"k"}, "control.start": {"s"}}
	s, err := Parse("postgres://postgres@127.0.0.1:5432/test?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if err := CanKillBroker(s); err == nil || !strings.Contains(err.Error(), "effect store") {
		t.Errorf("CanKillBroker with the store on the killed server: %v", err)
	}
	s.StoreURL = "postgres://postgres@127.0.0.1:5433/store"
	if err := CanKillBroker(s); err != nil {
		t.Errorf("CanKillBroker with a store elsewhere: %v", err)
	}
}
