package examples

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var (
	// pinnedAction is a third-party action pinned to a commit, and
	// versionRemark the release tag beside it.
	pinnedAction  = regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40}$`)
	versionRemark = regexp.MustCompile(`@[0-9a-f]{40} # v[0-9]+\.[0-9]+\.[0-9]+$`)
	pinnedImage   = regexp.MustCompile(`^[a-z0-9./-]+:[0-9][A-Za-z0-9.-]*$`)
)

// pinned checks that every third-party action of steps is pinned to a commit
// with its release tag in a comment of raw.
func pinned(t *testing.T, file string, raw []byte, steps []step) {
	t.Helper()
	for _, s := range steps {
		if s.Uses == "" || durachkAction.MatchString(s.Uses) {
			continue
		}
		if !pinnedAction.MatchString(s.Uses) {
			t.Errorf("%s: step %q: uses %q is not pinned to a commit", file, s.Name, s.Uses)
		}
		remark := false
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, "uses: "+s.Uses) && versionRemark.MatchString(strings.TrimSpace(l)) {
				remark = true
			}
		}
		if !remark {
			t.Errorf("%s: step %q: uses %q without its release tag in a comment (# vX.Y.Z)", file, s.Name, s.Uses)
		}
	}
}

// TestWorkflowFile: the example workflow and the action it uses can do what
// they promise and run the same thing every time, without durachk's
// checkout: permissions for the JUnit check, third-party actions pinned to a
// commit (their release tag in a comment), pinned images and runner, no
// @latest, Go from the action's own go.mod, the evidence and the baseline
// uploaded; the action builds durachk from its own files and takes no input
// the workflow does not know.
func TestWorkflowFile(t *testing.T) {
	raw, err := os.ReadFile("github-actions.yml")
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		Permissions map[string]string `yaml:"permissions"`
		Jobs        map[string]struct {
			RunsOn   string `yaml:"runs-on"`
			Services map[string]struct {
				Image string `yaml:"image"`
			} `yaml:"services"`
			Steps []step `yaml:"steps"`
		} `yaml:"jobs"`
	}
	readYAML(t, "github-actions.yml", &w)
	if w.Permissions["contents"] != "read" || w.Permissions["checks"] != "write" || len(w.Permissions) != 2 {
		t.Errorf("permissions %v, want exactly contents: read and checks: write", w.Permissions)
	}
	for _, f := range []string{"github-actions.yml", "../action.yml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "@latest") || regexp.MustCompile(`@v[0-9]+\.[0-9]+\.[0-9]+`).Match(b) {
			t.Errorf("%s installs something @latest or at a version tag", f)
		}
	}
	var uses, junit, upload bool
	for name, job := range w.Jobs {
		if strings.Contains(job.RunsOn, "latest") {
			t.Errorf("job %s runs on %q: pin the runner image", name, job.RunsOn)
		}
		for sname, svc := range job.Services {
			if !pinnedImage.MatchString(svc.Image) {
				t.Errorf("job %s: service %s's image %q is not pinned to a version", name, sname, svc.Image)
			}
		}
		pinned(t, "github-actions.yml", raw, job.Steps)
		for _, s := range job.Steps {
			if m := regexp.MustCompile(`\s(redis:[^\s]+)\s`).FindStringSubmatch(s.Run); m != nil && !pinnedImage.MatchString(m[1]) {
				t.Errorf("step %q runs the image %s: pin it to a version", s.Name, m[1])
			}
			switch a, _, _ := strings.Cut(s.Uses, "@"); {
			case durachkAction.MatchString(s.Uses):
				uses = s.With["config"] != "" && s.With["baseline"] != "" && s.With["out"] == "durachk-out"
			case a == "mikepenz/action-junit-report":
				junit = s.With["report_paths"] == "durachk-out/junit.xml"
			case a == "actions/upload-artifact":
				p := s.With["path"]
				upload = strings.Contains(p, "durachk-out/report.html") && strings.Contains(p, "durachk-out/junit.xml") &&
					strings.Contains(p, "durachk-out/result.json")
				for _, f := range []string{"redis-gate/baseline.json"} {
					upload = upload && strings.Contains(p, "examples/"+f)
				}
			}
		}
	}
	if !uses || !junit || !upload {
		t.Errorf("the durachk action with a config, baseline and durachk-out %v, JUnit published %v, evidence and baseline uploaded %v: want all", uses, junit, upload)
	}

	araw, err := os.ReadFile("../action.yml")
	if err != nil {
		t.Fatal(err)
	}
	var act action
	readYAML(t, "../action.yml", &act)
	pinned(t, "action.yml", araw, act.Runs.Steps)
	var setupGo, install bool
	for _, s := range act.Runs.Steps {
		if strings.HasPrefix(s.Uses, "actions/setup-go@") {
			setupGo = s.With["go-version-file"] == "${{ github.action_path }}/go.mod"
		}
		if s.Run != "" && s.Shell != "bash" {
			t.Errorf("action step %q: a composite step's run needs shell: bash", s.Name)
		}
		if strings.Contains(s.Run, "${{") {
			t.Errorf("action step %q: an expression in run: (inputs go through env:, never into the script's text)", s.Name)
		}
		install = install || strings.Contains(s.Run, "tools/action/install.sh")
	}
	if !setupGo || !install {
		t.Errorf("action.yml: Go from its own go.mod %v, durachk built from its own files %v: want both", setupGo, install)
	}
	for _, in := range []string{"config", "baseline", "out", "brokers", "args", "gate"} {
		if _, ok := act.Inputs[in]; !ok {
			t.Errorf("action.yml has no input %s", in)
		}
	}
}
