package reports

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/durachk/durachk/contracts"
)

// A reproduce command as a report shows it runs when pasted into a shell
// with the variables it names set, and holds no credential: the redaction
// mask (or the credential itself) becomes a ${VAR} reference, the variable
// the user's configuration took it from where known.
func TestPasteCommand(t *testing.T) {
	tests := []struct {
		name, cmd string
		known     map[string]string
		want      string
		vars      []string
	}{
		{name: "masked password",
			cmd:  "durachk run --seed 1 --target 'amqp://guest:xxxxx@127.0.0.1:5672/?name=a&queue-arguments.x-queue-type=quorum' --contract durability.ack",
			want: `durachk run --seed 1 --target "amqp://guest:${DURACHK_AMQP_PASSWORD}@127.0.0.1:5672/?name=a&queue-arguments.x-queue-type=quorum" --contract durability.ack`,
			vars: []string{"DURACHK_AMQP_PASSWORD"}},
		{name: "the credential, from a known variable",
			cmd:   "durachk run --target amqp://guest:s3cr3t@127.0.0.1:5672/ --contract durability.ack",
			known: map[string]string{"s3cr3t": "RABBIT_PASSWORD"},
			want:  `durachk run --target "amqp://guest:${RABBIT_PASSWORD}@127.0.0.1:5672/" --contract durability.ack`,
			vars:  []string{"RABBIT_PASSWORD"}},
		{name: "secret query parameter, --flag=URL",
			cmd:  "durachk run --target='sqs://127.0.0.1:9324?region=us-east-1&secret_key=xxxxx&access_key=xxxxx'",
			want: `durachk run "--target=sqs://127.0.0.1:9324?region=us-east-1&secret_key=${DURACHK_SQS_SECRET_KEY}&access_key=${DURACHK_SQS_ACCESS_KEY}"`,
			vars: []string{"DURACHK_SQS_SECRET_KEY", "DURACHK_SQS_ACCESS_KEY"}},
		{name: "a user name scrubbed with its password (guest:guest)",
			cmd:  "durachk run --target 'amqp://xxxxx:xxxxx@127.0.0.1:5672/'",
			want: `durachk run --target "amqp://${DURACHK_AMQP_USER}:${DURACHK_AMQP_PASSWORD}@127.0.0.1:5672/"`,
			vars: []string{"DURACHK_AMQP_USER", "DURACHK_AMQP_PASSWORD"}},
		{name: "no credential: unchanged",
			cmd:  "durachk run --seed 3 --target 'redis://127.0.0.1:6379/0?name=r&private-instance.save=' --plan 'my plan.yaml'",
			want: "durachk run --seed 3 --target 'redis://127.0.0.1:6379/0?name=r&private-instance.save=' --plan 'my plan.yaml'"},
		{name: "a $ of the URL's own stays literal",
			cmd:  `durachk run --target 'postgres://u:xxxxx@h/db?application_name=a$b'`,
			want: `durachk run --target "postgres://u:${DURACHK_POSTGRES_PASSWORD}@h/db?application_name=a\$b"`,
			vars: []string{"DURACHK_POSTGRES_PASSWORD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PasteCommand(tt.cmd, tt.known)
			if got != tt.want {
				t.Fatalf("PasteCommand:\n got %s\nwant %s", got, tt.want)
			}
			if again := PasteCommand(got, nil); again != got {
				t.Errorf("not idempotent:\n%s\n%s", got, again)
			}
			if strings.Contains(got, "s3cr3t") || strings.Contains(got, Redacted) {
				t.Errorf("%s: holds a credential or the mask", got)
			}
			if vs := EnvVars(got); strings.Join(vs, ",") != strings.Join(tt.vars, ",") {
				t.Errorf("EnvVars %v, want %v", vs, tt.vars)
			}
			if (EnvNote(got) == "") != (len(tt.vars) == 0) {
				t.Errorf("EnvNote %q for variables %v", EnvNote(got), tt.vars)
			}
		})
	}
}

// Pasted into sh with its variable set, the command's URL word is the URL
// with the credential in place.
func TestPasteCommandRunsInAShell(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh: %v", err)
	}
	cmd := PasteCommand("durachk run --target 'amqp://guest:xxxxx@127.0.0.1:5672/?name=a&x=$y' --seed 1", nil)
	c := exec.Command(sh, "-c", "printf '%s\\n' "+strings.TrimPrefix(cmd, "durachk "))
	c.Env = append(os.Environ(), "DURACHK_AMQP_PASSWORD=p@ss")
	out, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "run\n--target\namqp://guest:p@ss@127.0.0.1:5672/?name=a&x=$y\n--seed\n1\n"
	if string(out) != want {
		t.Errorf("sh read %q as:\n%s\nwant:\n%s", cmd, out, want)
	}
}

// A verdict cell names what was found: the properties with their counts (at
// most two, the rest counted), and with trials how many had that verdict.
func TestVerdictText(t *testing.T) {
	lost := contracts.Violation{Property: "lost"}
	tests := []struct {
		r    contracts.Result
		want string
	}{
		{contracts.Result{Verdict: contracts.Pass}, "pass"},
		{contracts.Result{Verdict: contracts.Skipped, Trials: []contracts.Trial{{}, {}}}, "skipped"},
		{contracts.Result{Verdict: contracts.Violated, Violations: []contracts.Violation{lost},
			Stats: contracts.Stats{Violations: map[string]int{"lost": 20}}}, "lost ×20"},
		{contracts.Result{Verdict: contracts.Violated, Violations: []contracts.Violation{lost, lost}}, "lost ×2"},
		{contracts.Result{Verdict: contracts.Violated, Stats: contracts.Stats{Violations: map[string]int{
			"lost": 3, "duplicate_effect": 1, "preempted": 2, "token_reissued": 1}}}, "lost ×3, duplicate_effect ×1 +2 more"},
		{contracts.Result{Verdict: contracts.Violated, Stats: contracts.Stats{Violations: map[string]int{"lost": 4}},
			Trials: []contracts.Trial{{Verdict: contracts.Pass}, {Verdict: contracts.Violated}, {Verdict: contracts.Violated}}}, "lost ×4 (2 of 3 trials)"},
		{contracts.Result{Verdict: contracts.Unknown, Trials: []contracts.Trial{{Verdict: contracts.Pass}, {Verdict: contracts.Unknown}}}, "unknown (1 of 2 trials)"},
	}
	for _, tt := range tests {
		if got := VerdictText(tt.r); got != tt.want {
			t.Errorf("VerdictText(%s %v) = %q, want %q", tt.r.Verdict, tt.r.Stats.Violations, got, tt.want)
		}
	}
}
