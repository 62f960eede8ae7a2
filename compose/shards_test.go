package compose

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestShardsWorkflow: the GitHub Actions example of a sharded exploration
// runs one shard per matrix entry, 1..N with the N its --shard names, all
// with one seed, without cancelling the others on a finding; the merge job
// waits for them, runs even when a shard found something, merges every
// shard's result.json and uploads one report; every action is pinned.
func TestShardsWorkflow(t *testing.T) {
	raw, err := os.ReadFile("../examples/github-actions-shards.yml")
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		Env  map[string]string `yaml:"env"`
		Jobs map[string]struct {
			Needs    string `yaml:"needs"`
			If       string `yaml:"if"`
			RunsOn   string `yaml:"runs-on"`
			Strategy struct {
				FailFast *bool            `yaml:"fail-fast"`
				Matrix   map[string][]int `yaml:"matrix"`
			} `yaml:"strategy"`
			Steps []struct {
				Name string         `yaml:"name"`
				Uses string         `yaml:"uses"`
				Run  string         `yaml:"run"`
				With map[string]any `yaml:"with"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(raw, &w); err != nil {
		t.Fatalf("github-actions-shards.yml: %v", err)
	}
	n, err := strconv.Atoi(w.Env["SHARDS"])
	if err != nil || n < 2 {
		t.Fatalf("env SHARDS %q: want the number of shards", w.Env["SHARDS"])
	}
	ex, merge := w.Jobs["explore"], w.Jobs["merge"]
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	if got := ex.Strategy.Matrix["shard"]; !slices.Equal(got, want) {
		t.Errorf("matrix shard %v, want %v (SHARDS %d)", got, want, n)
	}
	if ex.Strategy.FailFast == nil || *ex.Strategy.FailFast {
		t.Errorf("the matrix must not be fail-fast: a finding in one shard would cancel the others")
	}
	var explore, mergeRun string
	uploads := map[string]string{}
	brokers := map[string]any{}
	for name, job := range w.Jobs {
		if strings.Contains(job.RunsOn, "latest") {
			t.Errorf("job %s runs on %q: pin the runner image", name, job.RunsOn)
		}
		for _, s := range job.Steps {
			if strings.Contains(s.Run, "durachk explore") {
				explore = s.Run
			}
			if strings.Contains(s.Run, "durachk merge") {
				mergeRun = s.Run
			}
			if strings.HasPrefix(s.Uses, "durachk/durachk@") {
				brokers[name] = s.With["brokers"]
			}
			if s.Uses == "" || strings.HasPrefix(s.Uses, "durachk/durachk@") {
				continue // durachk's own action: pinned by the user to a commit of durachk
			}
			if !pinnedAction.MatchString(s.Uses) || !strings.Contains(string(raw), "uses: "+s.Uses+" # v") {
				t.Errorf("job %s step %q: uses %q is not pinned to a commit with its release tag in a comment", name, s.Name, s.Uses)
			}
			if strings.HasPrefix(s.Uses, "actions/upload-artifact@") {
				uploads[name], _ = s.With["path"].(string)
			}
		}
	}
	// The rounds that kill Redis or cut its power start a private
	// redis-server, on a FUSE file system as root.
	if b, _ := brokers["explore"].(string); !strings.Contains(b, "redis") || !strings.Contains(explore, `sudo -E env "PATH=$PATH" durachk explore`) {
		t.Errorf("the explore job installs brokers %q and explores with %q: want redis-server installed by the durachk action, explore as root", b, explore)
	}
	if _, ok := brokers["merge"]; !ok {
		t.Errorf("the merge job does not install durachk with the durachk action")
	}
	for _, want := range []string{`--shard "${{ matrix.shard }}/$SHARDS"`, `--seed "${{ github.run_id }}"`, "--out durachk-out"} {
		if !strings.Contains(explore, want) {
			t.Errorf("the explore step %q lacks %s", explore, want)
		}
	}
	if !strings.Contains(uploads["explore"], "durachk-out/") {
		t.Errorf("the explore job uploads %q, not its durachk-out/", uploads["explore"])
	}
	if merge.Needs != "explore" || !strings.Contains(merge.If, "!cancelled()") {
		t.Errorf("the merge job needs %q if %q: want needs explore, and to run when a shard failed", merge.Needs, merge.If)
	}
	if !strings.Contains(mergeRun, "durachk merge shards/durachk-shard-*/result.json --out durachk-out") {
		t.Errorf("the merge step %q does not merge every shard into durachk-out", mergeRun)
	}
	for _, f := range []string{"report.html", "junit.xml", "summary.md", "result.json", "histories/"} {
		if !strings.Contains(uploads["merge"], "durachk-out/"+f) {
			t.Errorf("the merge job does not upload %s", f)
		}
	}
}

// TestShardsIndexedJob: the Kubernetes example is an Indexed Job of N
// completions, all at once, each pod exploring shard JOB_COMPLETION_INDEX+1
// of the N its SHARDS says, into its own directory of a shared volume, with
// one seed; its exit codes 1 and 2 (a finding, unknown rounds) do not fail the
// pod; the merge Job merges every shard from the same volume; the manifests
// select by the labels its instructions apply them with.
func TestShardsIndexedJob(t *testing.T) {
	raw, err := os.ReadFile("../examples/k8s-explore-shards.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type container struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Env     []struct {
			Name  string `yaml:"name"`
			Value string `yaml:"value"`
		} `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	type object struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			AccessModes          []string `yaml:"accessModes"`
			CompletionMode       string   `yaml:"completionMode"`
			Completions          int      `yaml:"completions"`
			Parallelism          int      `yaml:"parallelism"`
			BackoffLimitPerIndex *int     `yaml:"backoffLimitPerIndex"`
			Template             struct {
				Spec struct {
					RestartPolicy  string      `yaml:"restartPolicy"`
					InitContainers []container `yaml:"initContainers"`
					Containers     []container `yaml:"containers"`
					Volumes        []struct {
						Name string `yaml:"name"`
						PVC  *struct {
							ClaimName string `yaml:"claimName"`
						} `yaml:"persistentVolumeClaim"`
					} `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	objs := map[string]object{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(false)
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("k8s-explore-shards.yaml: %v", err)
		}
		objs[o.Kind+"/"+o.Metadata.Name] = o
	}
	pvc, ex, merge := objs["PersistentVolumeClaim/durachk-results"], objs["Job/durachk-explore"], objs["Job/durachk-merge"]
	if pvc.APIVersion != "v1" || !slices.Contains(pvc.Spec.AccessModes, "ReadWriteMany") {
		t.Errorf("the results volume %+v: want a v1 PersistentVolumeClaim, ReadWriteMany (every shard pod writes it)", pvc)
	}
	for name, o := range map[string]object{"explore": ex, "merge": merge} {
		if o.APIVersion != "batch/v1" || o.Spec.Template.Spec.RestartPolicy != "Never" || o.Metadata.Labels["durachk.dev/step"] != name {
			t.Errorf("job %s: apiVersion %q, restartPolicy %q, labels %v: want batch/v1, Never, durachk.dev/step=%s", name,
				o.APIVersion, o.Spec.Template.Spec.RestartPolicy, o.Metadata.Labels, name)
		}
		claim := ""
		for _, v := range o.Spec.Template.Spec.Volumes {
			if v.Name == "results" && v.PVC != nil {
				claim = v.PVC.ClaimName
			}
		}
		if claim != "durachk-results" {
			t.Errorf("job %s mounts the claim %q as results, want durachk-results", name, claim)
		}
		for _, c := range o.Spec.Template.Spec.InitContainers {
			if strings.Contains(strings.Join(c.Command, " "), "@latest") || strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
				t.Errorf("job %s: init container %s is not pinned (%s %q)", name, c.Name, c.Image, c.Command)
			}
		}
	}
	if pvc.Metadata.Labels["durachk.dev/step"] != "explore" {
		t.Errorf("the volume is not applied with the explore step")
	}
	if ex.Spec.CompletionMode != "Indexed" || ex.Spec.Completions < 2 || ex.Spec.Parallelism != ex.Spec.Completions || ex.Spec.BackoffLimitPerIndex == nil {
		t.Errorf("explore job: completionMode %q, completions %d, parallelism %d, backoffLimitPerIndex %v: want Indexed, N ≥ 2 at once, retried per index",
			ex.Spec.CompletionMode, ex.Spec.Completions, ex.Spec.Parallelism, ex.Spec.BackoffLimitPerIndex)
	}
	c := ex.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["SHARDS"] != strconv.Itoa(ex.Spec.Completions) || env["SEED"] == "" {
		t.Errorf("explore job: SHARDS %q, SEED %q: want SHARDS = completions (%d) and one seed", env["SHARDS"], env["SEED"], ex.Spec.Completions)
	}
	// The broker kills start a private redis-server: the image has one.
	if !regexp.MustCompile(`^redis:[0-9]+\.[0-9]+\.[0-9]+`).MatchString(c.Image) {
		t.Errorf("explore job: image %q: want a pinned redis image (its redis-server runs the private instances)", c.Image)
	}
	for _, ic := range ex.Spec.Template.Spec.InitContainers {
		if cmd := strings.Join(ic.Command, " "); !strings.Contains(cmd, `git checkout --quiet "$DURACHK_REF"`) || !strings.Contains(cmd, "go build -o /opt/durachk/durachk ./cmd/durachk") {
			t.Errorf("explore job: init container %s runs %q: want durachk built from its repository at DURACHK_REF", ic.Name, cmd)
		}
	}
	script := strings.Join(c.Command, " ")
	for _, re := range []string{`i=\$\(\(JOB_COMPLETION_INDEX \+ 1\)\)`, `out=/results/shard-\$i`, `--shard "\$i/\$SHARDS"`, `--seed "\$SEED"`, `--out "\$out"`,
		`echo "\$code" > "\$out/exit-code"`, `\[ "\$code" -le 2 \]`} {
		if !regexp.MustCompile(re).MatchString(script) {
			t.Errorf("the shard's script lacks %s:\n%s", re, script)
		}
	}
	if m := strings.Join(merge.Spec.Template.Spec.Containers[0].Command, " "); !strings.Contains(m, "durachk merge /results/shard-*/result.json --out /results/merged") {
		t.Errorf("the merge job runs %q: want every shard merged into /results/merged", m)
	}
	for _, step := range []string{"explore", "merge"} {
		if !strings.Contains(string(raw), "kubectl apply -f examples/k8s-explore-shards.yaml -l durachk.dev/step="+step) {
			t.Errorf("the instructions do not apply the %s step by its label", step)
		}
	}
}
