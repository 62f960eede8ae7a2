// Package existingclusters holds the recipes of docs/existing-clusters.md
// (no Go code): every node fault of an existing cluster as a control
// command, through Kubernetes with Chaos Mesh (kubernetes/) and through
// nft, tc and systemctl over ssh on plain hosts (hosts/); the Docker
// Compose recipe is compose/clusters.yml's, checked by compose's own test.
//
// This test checks the recipes without a cluster: every manifest parses,
// uses only the kinds and fields that Kubernetes and Chaos Mesh document,
// every chaos resource selects the pod it is named after and cuts or delays
// it towards the pods it means to; every control command of the durachk.yaml
// files and of the doc names a control key durachk knows, a file that exists
// and the node it belongs to; fault.sh, run with a stand-in ssh, builds the
// nftables and tc rules between the right addresses. Its negative controls
// (TestRecipesRejects) feed the same checks broken copies.
package existingclusters

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/durachk/durachk/internal/config"
	"github.com/durachk/durachk/internal/targets"
)

// Paths below the repository root.
const (
	dirK8s   = "examples/existing-clusters/kubernetes"
	dirHosts = "examples/existing-clusters/hosts"
	docPath  = "docs/existing-clusters.md"
	ns       = "durachk"
	podLabel = "statefulset.kubernetes.io/pod-name" // set by the StatefulSet controller
)

// The control keys durachk knows (internal/targets/control.go and issue 21):
// for the broker as a whole, and per node.
var (
	knownControl     = []string{"kill", "start", "pause", "resume", "timeout", "status"}
	knownNodeControl = []string{"kill", "start", "pause", "resume", "partition", "heal", "lag", "unlag", "addr"}
)

// knownKey says whether k (without "control.") is a control key durachk knows.
func knownKey(k string) bool {
	node, action, perNode := strings.Cut(k, ".")
	if !perNode {
		return slices.Contains(knownControl, k)
	}
	return (node == "<node>" || regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`).MatchString(node)) &&
		slices.Contains(knownNodeControl, action)
}

// ---- schemas: the documented fields, per kind ----

// A schema is a leaf type name, an obj (the fields allowed, each with its
// schema) or a list (of objects).
type (
	obj  map[string]any
	list struct{ of any }
)

const (
	tStr     = "string"
	tInt     = "int"
	tBool    = "bool"
	tStrMap  = "map[string]string"
	tStrList = "[]string"
	tListMap = "map[string][]string"
)

// Kubernetes API reference (v1.31): ObjectMeta, Service/ServiceSpec,
// StatefulSetSpec, PodSpec, Container, Probe, ConfigMap, ServiceAccount,
// Role/RoleBinding (rbac.authorization.k8s.io/v1). Only the subset the
// recipes may use; a field outside it is refused as unknown.
var (
	k8sMeta  = obj{"name": tStr, "namespace": tStr, "labels": tStrMap, "annotations": tStrMap}
	k8sProbe = obj{"exec": obj{"command": tStrList}, "periodSeconds": tInt, "timeoutSeconds": tInt,
		"initialDelaySeconds": tInt, "failureThreshold": tInt, "successThreshold": tInt}
	k8sContainer = obj{
		"name": tStr, "image": tStr, "command": tStrList, "args": tStrList, "workingDir": tStr,
		"ports": list{obj{"name": tStr, "containerPort": tInt, "protocol": tStr}},
		"env": list{obj{"name": tStr, "value": tStr,
			"valueFrom": obj{"fieldRef": obj{"fieldPath": tStr, "apiVersion": tStr}}}},
		"readinessProbe": k8sProbe, "livenessProbe": k8sProbe, "startupProbe": k8sProbe,
		"volumeMounts": list{obj{"name": tStr, "mountPath": tStr, "subPath": tStr, "readOnly": tBool}},
		"resources":    obj{"requests": tStrMap, "limits": tStrMap},
	}
	k8sPodSpec = obj{
		"containers": list{k8sContainer}, "initContainers": list{k8sContainer},
		"shareProcessNamespace": tBool, "terminationGracePeriodSeconds": tInt,
		"serviceAccountName": tStr, "restartPolicy": tStr,
		"securityContext": obj{"runAsUser": tInt, "runAsGroup": tInt, "fsGroup": tInt, "runAsNonRoot": tBool},
		"volumes": list{obj{"name": tStr, "configMap": obj{"name": tStr, "defaultMode": tInt},
			"emptyDir": obj{"medium": tStr, "sizeLimit": tStr}}},
	}
	k8sPVC = obj{"metadata": obj{"name": tStr, "labels": tStrMap}, "spec": obj{
		"accessModes": tStrList, "storageClassName": tStr, "resources": obj{"requests": tStrMap}}}
)

// Chaos Mesh API (chaos-mesh.org/v1alpha1; api/v1alpha1/selector.go
// PodSelector and PodSelectorSpec, podchaos_types.go PodChaosSpec,
// networkchaos_types.go NetworkChaosSpec with its TcParameter).
var (
	chaosSelector = obj{"namespaces": tStrList, "nodes": tStrList, "pods": tListMap, "nodeSelectors": tStrMap,
		"fieldSelectors": tStrMap, "labelSelectors": tStrMap, "annotationSelectors": tStrMap, "podPhaseSelectors": tStrList,
		"expressionSelectors": list{obj{"key": tStr, "operator": tStr, "values": tStrList}}}
	podChaosSpec = obj{"selector": chaosSelector, "mode": tStr, "value": tStr, "containerNames": tStrList,
		"action": tStr, "duration": tStr, "gracePeriod": tInt}
	networkChaosSpec = obj{"selector": chaosSelector, "mode": tStr, "value": tStr, "action": tStr, "duration": tStr,
		"delay": obj{"latency": tStr, "correlation": tStr, "jitter": tStr,
			"reorder": obj{"reorder": tStr, "correlation": tStr, "gap": tInt}},
		"loss":      obj{"loss": tStr, "correlation": tStr},
		"duplicate": obj{"duplicate": tStr, "correlation": tStr},
		"corrupt":   obj{"corrupt": tStr, "correlation": tStr},
		"bandwidth": obj{"rate": tStr, "limit": tInt, "buffer": tInt, "peakrate": tInt, "minburst": tInt},
		"direction": tStr, "externalTargets": tStrList, "device": tStr,
		"target": obj{"selector": chaosSelector, "mode": tStr, "value": tStr}}
)

func top(extra obj) obj {
	o := obj{"apiVersion": tStr, "kind": tStr, "metadata": k8sMeta}
	for k, v := range extra {
		o[k] = v
	}
	return o
}

// kinds are the documented kinds the recipes may use, by apiVersion/kind.
var kinds = map[string]obj{
	"v1/Namespace":      top(nil),
	"v1/ServiceAccount": top(nil),
	"v1/ConfigMap":      top(obj{"data": tStrMap}),
	"v1/Service": top(obj{"spec": obj{"clusterIP": tStr, "publishNotReadyAddresses": tBool, "selector": tStrMap, "type": tStr,
		"ports": list{obj{"name": tStr, "port": tInt, "targetPort": tInt, "protocol": tStr}}}}),
	"v1/Pod": top(obj{"spec": k8sPodSpec}),
	"apps/v1/StatefulSet": top(obj{"spec": obj{"serviceName": tStr, "replicas": tInt, "podManagementPolicy": tStr,
		"selector":             obj{"matchLabels": tStrMap},
		"template":             obj{"metadata": obj{"labels": tStrMap, "annotations": tStrMap}, "spec": k8sPodSpec},
		"volumeClaimTemplates": list{k8sPVC}}}),
	"rbac.authorization.k8s.io/v1/Role": top(obj{"rules": list{obj{"apiGroups": tStrList, "resources": tStrList, "verbs": tStrList}}}),
	"rbac.authorization.k8s.io/v1/RoleBinding": top(obj{"subjects": list{obj{"kind": tStr, "name": tStr, "namespace": tStr}},
		"roleRef": obj{"apiGroup": tStr, "kind": tStr, "name": tStr}}),
	"chaos-mesh.org/v1alpha1/PodChaos":     top(obj{"spec": podChaosSpec}),
	"chaos-mesh.org/v1alpha1/NetworkChaos": top(obj{"spec": networkChaosSpec}),
}

// conform checks v against schema s at path p.
func conform(p string, v any, s any) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(p+": "+format, a...)) }
	strs := func(x any) bool {
		l, ok := x.([]any)
		for _, e := range l {
			if _, isStr := e.(string); !isStr {
				return false
			}
		}
		return ok
	}
	switch s := s.(type) {
	case string:
		ok := false
		switch s {
		case tStr:
			_, ok = v.(string)
		case tInt:
			_, ok = v.(int)
		case tBool:
			_, ok = v.(bool)
		case tStrList:
			ok = strs(v)
		case tStrMap, tListMap:
			var m map[string]any
			if m, ok = v.(map[string]any); ok {
				for _, e := range m {
					if s == tStrMap {
						_, isStr := e.(string)
						ok = ok && isStr
					} else {
						ok = ok && strs(e)
					}
				}
			}
		}
		if !ok {
			bad("want %s, have %T", s, v)
		}
	case obj:
		m, ok := v.(map[string]any)
		if !ok {
			bad("want an object, have %T", v)
			break
		}
		for _, k := range sortedKeys(m) {
			sub, known := s[k]
			if !known {
				bad("unknown field %q (not among the documented fields this recipe may use)", k)
				continue
			}
			errs = append(errs, conform(p+"."+k, m[k], sub)...)
		}
	case list:
		l, ok := v.([]any)
		if !ok {
			bad("want a list, have %T", v)
			break
		}
		for i, e := range l {
			errs = append(errs, conform(fmt.Sprintf("%s[%d]", p, i), e, s.of)...)
		}
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ---- helpers over decoded YAML ----

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any, path ...string) string { s, _ := get(v, path...).(string); return s }

func strMap(v any) map[string]string {
	out := map[string]string{}
	if m, ok := v.(map[string]any); ok {
		for k, e := range m {
			out[k], _ = e.(string)
		}
	}
	return out
}

func strList(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, e := range l {
			s, _ := e.(string)
			out = append(out, s)
		}
	}
	return out
}

// ---- the tree under check ----

// tree is a copy of the files the recipes consist of, read from root (the
// repository, or a mutated copy of it).
type tree struct {
	root  string
	files map[string]string // repository-relative path → content
}

func (t tree) has(p string) bool { _, ok := t.files[p]; return ok }

// recipeFiles lists what the recipes consist of, below the repository root.
func recipeFiles(root string) ([]string, error) {
	var out []string
	for _, dir := range []string{dirK8s, dirHosts} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return append(out, docPath, "compose/clusters/pg-node.sh", "compose/clusters/pg-watcher.sh",
		"compose/clusters.yml", "compose/clusters.yaml", "compose/clusters/status.sh", "compose/clusters/toxiproxy.json"), nil
}

func readTree(root string) (tree, error) {
	ps, err := recipeFiles(root)
	if err != nil {
		return tree{}, err
	}
	t := tree{root: root, files: map[string]string{}}
	for _, p := range ps {
		b, err := os.ReadFile(filepath.Join(root, p))
		if errors.Is(err, fs.ErrNotExist) && strings.HasPrefix(p, "compose/") {
			continue // named by the doc, checked there (and by compose's test)
		}
		if err != nil {
			return tree{}, err
		}
		t.files[p] = string(b)
	}
	return t, nil
}

// ---- Kubernetes ----

type object struct {
	where string // file#index
	m     map[string]any
}

func (o object) kind() string { return str(o.m, "apiVersion") + "/" + str(o.m, "kind") }

type pod struct {
	name, ns, set string // set: its StatefulSet, "" for a bare Pod
	labels        map[string]string
	containers    []string
	sharedPIDs    bool
	ports         []int
}

type k8s struct {
	objects  []object
	pods     map[string]*pod // by name
	services map[string]map[string]any
}

func loadK8s(t tree) (*k8s, []error) {
	var errs []error
	k := &k8s{pods: map[string]*pod{}, services: map[string]map[string]any{}}
	for _, p := range sortedKeys(t.files) {
		if !strings.HasPrefix(p, dirK8s+"/") || !strings.HasSuffix(p, ".yaml") || p == dirK8s+"/durachk.yaml" {
			continue
		}
		dec := yaml.NewDecoder(strings.NewReader(t.files[p]))
		for i := 0; ; i++ {
			var m map[string]any
			err := dec.Decode(&m)
			if errors.Is(err, io.EOF) {
				break
			}
			where := fmt.Sprintf("%s#%d", p, i)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: does not parse: %v", where, err))
				break
			}
			if m == nil {
				continue
			}
			o := object{where: where, m: m}
			schema, ok := kinds[o.kind()]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: apiVersion/kind %s is not one the recipes may use (%s)", where, o.kind(), strings.Join(sortedKeys(kinds), ", ")))
				continue
			}
			errs = append(errs, conform(where, m, schema)...)
			if str(m, "metadata", "name") == "" {
				errs = append(errs, fmt.Errorf("%s: no metadata.name", where))
			}
			if n := str(m, "metadata", "namespace"); o.kind() != "v1/Namespace" && n != ns {
				errs = append(errs, fmt.Errorf("%s: namespace %q, want %s", where, n, ns))
			}
			k.objects = append(k.objects, o)
		}
	}
	for _, o := range k.objects {
		name := str(o.m, "metadata", "name")
		switch o.kind() {
		case "v1/Service":
			k.services[name] = o.m
		case "apps/v1/StatefulSet":
			tpl := get(o.m, "spec", "template")
			labels := strMap(get(tpl, "metadata", "labels"))
			for key, v := range strMap(get(o.m, "spec", "selector", "matchLabels")) {
				if labels[key] != v {
					errs = append(errs, fmt.Errorf("%s: spec.selector.matchLabels %s=%s does not match the template's labels", o.where, key, v))
				}
			}
			n, _ := get(o.m, "spec", "replicas").(int)
			if n < 1 {
				errs = append(errs, fmt.Errorf("%s: replicas %v", o.where, get(o.m, "spec", "replicas")))
			}
			for i := range n {
				p := podOf(get(tpl, "spec"), labels)
				p.name, p.ns, p.set = fmt.Sprintf("%s-%d", name, i), ns, name
				p.labels[podLabel] = p.name
				k.pods[p.name] = p
			}
		case "v1/Pod":
			p := podOf(get(o.m, "spec"), strMap(get(o.m, "metadata", "labels")))
			p.name, p.ns = name, ns
			k.pods[name] = p
		}
	}
	// A StatefulSet's serviceName is a headless Service selecting its pods.
	for _, o := range k.objects {
		if o.kind() != "apps/v1/StatefulSet" {
			continue
		}
		svc := k.services[str(o.m, "spec", "serviceName")]
		if svc == nil || str(svc, "spec", "clusterIP") != "None" {
			errs = append(errs, fmt.Errorf("%s: serviceName %q is no headless Service of the recipes", o.where, str(o.m, "spec", "serviceName")))
			continue
		}
		labels := strMap(get(o.m, "spec", "template", "metadata", "labels"))
		for key, v := range strMap(get(svc, "spec", "selector")) {
			if labels[key] != v {
				errs = append(errs, fmt.Errorf("%s: Service %s selects %s=%s, which its pods do not carry", o.where, str(svc, "metadata", "name"), key, v))
			}
		}
	}
	return k, errs
}

func podOf(spec any, labels map[string]string) *pod {
	p := &pod{labels: map[string]string{}}
	for k, v := range labels {
		p.labels[k] = v
	}
	p.sharedPIDs, _ = get(spec, "shareProcessNamespace").(bool)
	cs, _ := get(spec, "containers").([]any)
	for _, c := range cs {
		p.containers = append(p.containers, str(c, "name"))
		ports, _ := get(c, "ports").([]any)
		for _, port := range ports {
			if n, ok := get(port, "containerPort").(int); ok {
				p.ports = append(p.ports, n)
			}
		}
	}
	return p
}

// selects reports which pods the Chaos Mesh selector sel (in a resource of
// namespace ns) selects. Only the selectors the recipes use are evaluated;
// any other is an error (it could not be checked here).
func (k *k8s) selects(sel any) ([]string, error) {
	m, _ := sel.(map[string]any)
	for _, f := range sortedKeys(m) {
		if !slices.Contains([]string{"namespaces", "pods", "labelSelectors", "expressionSelectors"}, f) {
			return nil, fmt.Errorf("selector field %s is not evaluated by this test: use pods, namespaces, labelSelectors, expressionSelectors", f)
		}
	}
	nss := strList(m["namespaces"])
	if len(nss) == 0 {
		nss = []string{ns} // Chaos Mesh: the resource's own namespace
	}
	byNS, hasPods := m["pods"].(map[string]any)
	if hasPods && (m["labelSelectors"] != nil || m["expressionSelectors"] != nil) {
		return nil, errors.New("selector: pods with label selectors: say one or the other")
	}
	var out []string
	for _, name := range sortedKeys(k.pods) {
		p := k.pods[name]
		if hasPods {
			if slices.Contains(strList(byNS[p.ns]), p.name) {
				out = append(out, name)
			}
			continue
		}
		if !slices.Contains(nss, p.ns) {
			continue
		}
		ok := true
		for key, v := range strMap(m["labelSelectors"]) {
			ok = ok && p.labels[key] == v
		}
		exprs, _ := m["expressionSelectors"].([]any)
		for _, e := range exprs {
			v, has := p.labels[str(e, "key")]
			vals := strList(get(e, "values"))
			switch op := str(e, "operator"); op {
			case "In":
				ok = ok && has && slices.Contains(vals, v)
			case "NotIn":
				ok = ok && !(has && slices.Contains(vals, v))
			case "Exists":
				ok = ok && has
			case "DoesNotExist":
				ok = ok && !has
			default:
				return nil, fmt.Errorf("expressionSelectors: operator %q (In, NotIn, Exists, DoesNotExist)", op)
			}
		}
		if ok {
			out = append(out, name)
		}
	}
	if hasPods {
		for nsName, names := range byNS {
			for _, n := range strList(names) {
				if p := k.pods[n]; p == nil || p.ns != nsName {
					return nil, fmt.Errorf("selector names pod %s/%s, which no StatefulSet or Pod of the recipes makes", nsName, n)
				}
			}
		}
	}
	return out, nil
}

// companions: the pods a node of each StatefulSet is cut off from (besides
// the other nodes of its set and durachk's pod): the Sentinels, the watcher.
var companions = map[string][]string{"redis": {"redis-sentinel"}, "pg": {"pg-watcher"}, "rabbit": nil}

const runnerPod = "durachk-runner"

var (
	chaosFile  = regexp.MustCompile(`^` + regexp.QuoteMeta(dirK8s) + `/chaos/([a-z0-9-]+)-(kill|partition|lag)\.yaml$`)
	podModes   = []string{"one", "all", "fixed", "fixed-percent", "random-max-percent"}
	directions = []string{"to", "from", "both"}
)

// checkChaos checks every chaos resource against the pods of the manifests.
func (k *k8s) checkChaos(t tree) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	names := map[string]string{}
	for _, o := range k.objects {
		kind := o.kind()
		if !strings.HasPrefix(kind, "chaos-mesh.org/") {
			continue
		}
		file, _, _ := strings.Cut(o.where, "#")
		m := chaosFile.FindStringSubmatch(file)
		if m == nil {
			bad("%s: a chaos resource outside chaos/<node>-<kill|partition|lag>.yaml", o.where)
			continue
		}
		node, fault := m[1], m[2]
		name := str(o.m, "metadata", "name")
		if other, dup := names[name]; dup {
			bad("%s: name %s is also %s's: kubectl apply would replace one with the other", o.where, name, other)
		}
		names[name] = o.where
		spec := get(o.m, "spec")
		if mode := str(spec, "mode"); !slices.Contains(podModes, mode) {
			bad("%s: spec.mode %q, want one of %v", o.where, mode, podModes)
		}
		want := map[string][2]string{"kill": {"chaos-mesh.org/v1alpha1/PodChaos", "pod-kill"},
			"partition": {"chaos-mesh.org/v1alpha1/NetworkChaos", "partition"}, "lag": {"chaos-mesh.org/v1alpha1/NetworkChaos", "delay"}}[fault]
		if kind != want[0] || str(spec, "action") != want[1] {
			bad("%s: %s with action %q, want a %s with action %s for %s", o.where, kind, str(spec, "action"), want[0], want[1], fault)
		}
		sel, err := k.selects(get(spec, "selector"))
		switch {
		case err != nil:
			bad("%s: spec.selector: %v", o.where, err)
		case len(sel) != 1 || sel[0] != node:
			bad("%s: spec.selector selects %v, want exactly the pod %s the file is named after", o.where, sel, node)
		}
		if fault == "kill" {
			continue
		}
		dir := str(spec, "direction")
		switch {
		case !slices.Contains(directions, dir):
			bad("%s: spec.direction %q, want one of %v", o.where, dir, directions)
		case fault == "partition" && dir != "both":
			bad("%s: spec.direction %q: a partition cuts both ways (both)", o.where, dir)
		case fault == "lag" && dir == "from":
			bad("%s: spec.direction from delays what the others send to %s, not its replication stream", o.where, node)
		}
		if fault == "lag" {
			d, err := time.ParseDuration(str(spec, "delay", "latency"))
			if err != nil || d <= 0 {
				bad("%s: spec.delay.latency %q is no positive duration", o.where, str(spec, "delay", "latency"))
			}
		}
		if mode := str(spec, "target", "mode"); mode != "all" {
			bad("%s: spec.target.mode %q: want all (every pod the target selects)", o.where, mode)
		}
		tgt, err := k.selects(get(spec, "target", "selector"))
		if err != nil {
			bad("%s: spec.target.selector: %v", o.where, err)
			continue
		}
		if slices.Contains(tgt, node) {
			bad("%s: spec.target selects %s itself", o.where, node)
		}
		p := k.pods[node]
		if p == nil {
			continue
		}
		var need []string
		for _, set := range append([]string{p.set}, companions[p.set]...) {
			for _, q := range sortedKeys(k.pods) {
				if k.pods[q].set == set && q != node {
					need = append(need, q)
				}
			}
		}
		need = append(need, runnerPod)
		for _, q := range need {
			if !slices.Contains(tgt, q) {
				bad("%s: spec.target does not select %s: %s would still reach it", o.where, q, node)
			}
		}
	}
	return errs
}

// ---- durachk.yaml ----

// knobsOf returns the control knobs of a target, without "control.".
func knobsOf(tg config.Target) map[string]string {
	out := map[string]string{}
	for k, v := range tg.Knobs {
		if rest, ok := strings.CutPrefix(k, "control."); ok {
			out[rest] = v
		}
	}
	return out
}

// parseTarget parses a target's URL as durachk does.
func parseTarget(raw string) (targets.Spec, error) { return targets.Parse(raw) }

// commandFiles are the files a command names (below the repository root).
var commandFile = regexp.MustCompile(`(?:examples|compose)/[A-Za-z0-9_./-]+\.(?:yaml|yml|sh|json|conf)`)

// checkConfig checks one durachk.yaml: it loads, every target parses as
// durachk parses it into an existing cluster, every control key is known,
// every file a command names exists; node(target, node, knobs) checks the
// commands of each node, kind the status command.
func checkConfig(t tree, path string, node func(tg config.Target, s targets.Spec, name string, c map[string]string) []error) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(path+": "+format, a...)) }
	cfg, err := config.Parse([]byte(t.files[path]))
	if err != nil {
		return []error{fmt.Errorf("%s: %v", path, err)}
	}
	if len(cfg.Targets) != 3 {
		bad("%d targets, want the three topologies", len(cfg.Targets))
	}
	for _, tg := range cfg.Targets {
		s, err := parseTarget(tg.URL)
		if err != nil {
			bad("target %s does not parse: %v", tg.Name, err)
		} else if !targets.HasExternalCluster(s) {
			bad("target %s is not an existing cluster of two or more nodes under control commands", tg.Name)
		}
		c := knobsOf(tg)
		nodes := map[string]map[string]string{}
		for _, k := range sortedKeys(c) {
			if !knownKey(k) {
				bad("target %s: control.%s is no control key durachk knows", tg.Name, k)
				continue
			}
			for _, f := range commandFile.FindAllString(c[k], -1) {
				if !t.has(f) {
					if _, err := os.Stat(filepath.Join(t.root, f)); err != nil {
						bad("target %s: control.%s names %s, which does not exist", tg.Name, k, f)
					}
				}
			}
			if n, a, ok := strings.Cut(k, "."); ok {
				if nodes[n] == nil {
					nodes[n] = map[string]string{}
				}
				nodes[n][a] = c[k]
			}
		}
		if c["status"] == "" {
			bad("target %s has no control.status", tg.Name)
		}
		for _, n := range sortedKeys(nodes) {
			for _, a := range knownNodeControl {
				if nodes[n][a] == "" {
					bad("target %s: node %s has no control.%s.%s: the recipe gives every node fault", tg.Name, n, n, a)
				}
			}
			if err == nil {
				errs = append(errs, node(tg, s, n, nodes[n])...)
			}
		}
	}
	return errs
}

var statusCmd = regexp.MustCompile(`^sh (\S+/status\.sh) (redis|postgres|rabbitmq)$`)

var kindName = map[string]string{"redis": "redis", "postgres": "postgres", "amqp": "rabbitmq"}

func checkStatus(tg config.Target, s targets.Spec, prefix string) error {
	m := statusCmd.FindStringSubmatch(knobsOf(tg)["status"])
	if m == nil || m[1] != prefix+"/status.sh" || m[2] != kindName[s.Kind] {
		return fmt.Errorf("target %s: control.status %q, want sh %s/status.sh %s", tg.Name, knobsOf(tg)["status"], prefix, kindName[s.Kind])
	}
	return nil
}

// checkK8sConfig: each node's commands apply and delete the chaos resources
// named after it, exec into its own pod and container, and its address is
// its pod's DNS name on a port its container serves.
func checkK8sConfig(t tree, k *k8s) []error {
	path := dirK8s + "/durachk.yaml"
	var statusErrs []error
	errs := checkConfig(t, path, func(tg config.Target, s targets.Spec, n string, c map[string]string) []error {
		var errs []error
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("%s: target %s: node %s: "+format, append([]any{path, tg.Name, n}, a...)...))
		}
		p := k.pods[n]
		if p == nil || p.set == "" {
			bad("no StatefulSet of the recipes makes a pod %s", n)
			return errs
		}
		for fault, pair := range map[string][2]string{"kill": {"kill", "start"}, "partition": {"partition", "heal"}, "lag": {"lag", "unlag"}} {
			file := dirK8s + "/chaos/" + n + "-" + fault + ".yaml"
			if c[pair[0]] != "kubectl apply -f "+file {
				bad("control.%s.%s = %q, want kubectl apply -f %s", n, pair[0], c[pair[0]], file)
			}
			if !strings.HasPrefix(c[pair[1]], "kubectl delete --ignore-not-found -f "+file) {
				bad("control.%s.%s = %q, want kubectl delete --ignore-not-found -f %s first", n, pair[1], c[pair[1]], file)
			}
		}
		if !strings.Contains(c["start"], "pod/"+n+" ") {
			bad("control.%s.start does not wait for pod/%s", n, n)
		}
		exec := regexp.MustCompile(`^kubectl -n ` + ns + ` exec (\S+) -c (\S+) -- sh -c 'kill -(STOP|CONT) -1'$`)
		for a, sig := range map[string]string{"pause": "STOP", "resume": "CONT"} {
			m := exec.FindStringSubmatch(c[a])
			switch {
			case m == nil || m[3] != sig:
				bad("control.%s.%s = %q, want kubectl -n %s exec %s -c CONTAINER -- sh -c 'kill -%s -1'", n, a, c[a], ns, n, sig)
			case m[1] != n:
				bad("control.%s.%s acts on pod %s", n, a, m[1])
			case !slices.Contains(p.containers, m[2]):
				bad("control.%s.%s: pod %s has no container %s (%v)", n, a, n, m[2], p.containers)
			case !p.sharedPIDs:
				bad("control.%s.%s: pod %s does not share its process namespace: the broker is PID 1, which kill -%s from inside does not reach", n, a, n, sig)
			}
		}
		host, port, err := net.SplitHostPort(c["addr"])
		if want := n + "." + k.serviceOf(p.set) + "." + ns + ".svc.cluster.local"; err != nil || host != want {
			bad("control.%s.addr = %q, want %s:PORT", n, c["addr"], want)
		} else if !slices.Contains(p.ports, atoi(port)) {
			bad("control.%s.addr: port %s is no containerPort of pod %s (%v)", n, port, n, p.ports)
		}
		return errs
	})
	cfg, err := config.Parse([]byte(t.files[path]))
	if err != nil {
		return errs
	}
	for _, tg := range cfg.Targets {
		s, err := parseTarget(tg.URL)
		if err != nil {
			continue
		}
		if err := checkStatus(tg, s, dirK8s); err != nil {
			statusErrs = append(statusErrs, err)
		}
		u, _ := url.Parse(tg.URL)
		for _, hp := range append(strings.Split(u.Host, ","), u.Query()["addr"]...) {
			host, port, _ := net.SplitHostPort(hp)
			pname, _, _ := strings.Cut(host, ".")
			p := k.pods[pname]
			if p == nil || host != pname+"."+k.serviceOf(p.set)+"."+ns+".svc.cluster.local" || !slices.Contains(p.ports, atoi(port)) {
				statusErrs = append(statusErrs, fmt.Errorf("%s: target %s: %s is no pod's DNS name and port", path, tg.Name, hp))
			}
		}
	}
	su, err := url.Parse(cfg.Store)
	if err != nil || cfg.Store == "" {
		statusErrs = append(statusErrs, fmt.Errorf("%s: no store", path))
	} else {
		host, _, _ := net.SplitHostPort(su.Host)
		pname, _, _ := strings.Cut(host, ".")
		if p := k.pods[pname]; p == nil || p.labels["durachk.io/net"] != "" {
			statusErrs = append(statusErrs, fmt.Errorf("%s: store %s is no pod of the recipes outside every partition", path, su.Host))
		}
	}
	return append(errs, statusErrs...)
}

func (k *k8s) serviceOf(set string) string {
	for _, o := range k.objects {
		if o.kind() == "apps/v1/StatefulSet" && str(o.m, "metadata", "name") == set {
			return str(o.m, "spec", "serviceName")
		}
	}
	return ""
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return -1
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// checkK8sScripts: the Postgres ConfigMap carries compose's scripts as they are.
func checkK8sScripts(t tree, k *k8s) []error {
	var errs []error
	found := false
	for _, o := range k.objects {
		if o.kind() != "v1/ConfigMap" || str(o.m, "metadata", "name") != "pg-scripts" {
			continue
		}
		found = true
		for _, f := range []string{"pg-node.sh", "pg-watcher.sh"} {
			if str(o.m, "data", f) != t.files["compose/clusters/"+f] {
				errs = append(errs, fmt.Errorf("%s: data.%s differs from compose/clusters/%s", o.where, f, f))
			}
		}
	}
	if !found {
		errs = append(errs, errors.New("kubernetes: no ConfigMap pg-scripts"))
	}
	return errs
}

// checkK8sStatus: every pod status.sh names (in its loops and execs) is a
// pod of the manifests, with the container it names.
func checkK8sStatus(t tree, k *k8s) []error {
	var errs []error
	src := t.files[dirK8s+"/status.sh"]
	for _, name := range regexp.MustCompile(`\b(?:redis-sentinel|redis|pg|rabbit)-[0-9]+\b`).FindAllString(src, -1) {
		if k.pods[name] == nil {
			errs = append(errs, fmt.Errorf("%s/status.sh names pod %s, which no StatefulSet makes", dirK8s, name))
		}
	}
	for _, m := range regexp.MustCompile(`ex "\$(?:n|s)" -c ([a-z0-9-]+) --`).FindAllStringSubmatch(src, -1) {
		found := false
		for _, p := range k.pods {
			found = found || slices.Contains(p.containers, m[1])
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s/status.sh execs into container %s, which no pod has", dirK8s, m[1]))
		}
	}
	return errs
}

// ---- plain hosts ----

type hostNode struct{ group, name, dest, addr, port, unit string }

func parseNodesConf(s string) (map[string]hostNode, []string, []string, error) {
	nodes := map[string]hostNode{}
	var clients, sentinels []string
	for i, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch {
		case f[0] == "node" && len(f) == 7:
			nodes[f[2]] = hostNode{f[1], f[2], f[3], f[4], f[5], f[6]}
		case f[0] == "client" && len(f) == 2:
			clients = append(clients, f[1])
		case f[0] == "sentinel" && len(f) == 3:
			_, host, _ := strings.Cut(f[1], "@")
			sentinels = append(sentinels, net.JoinHostPort(host, f[2]))
		default:
			return nil, nil, nil, fmt.Errorf("nodes.conf:%d: %q", i+1, l)
		}
	}
	return nodes, clients, sentinels, nil
}

// checkHosts: each command is fault.sh with its own action and node; the
// addresses are nodes.conf's; and fault.sh, run with a stand-in ssh, sends
// each node the rules that cut or delay exactly its peers.
func checkHosts(t tree, scratch string, run bool) []error {
	path := dirHosts + "/durachk.yaml"
	nodes, clients, sentinels, err := parseNodesConf(t.files[dirHosts+"/nodes.conf"])
	if err != nil {
		return []error{err}
	}
	groups := map[string]string{} // target → group
	errs := checkConfig(t, path, func(tg config.Target, s targets.Spec, n string, c map[string]string) []error {
		var errs []error
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("%s: target %s: node %s: "+format, append([]any{path, tg.Name, n}, a...)...))
		}
		hn, ok := nodes[n]
		if !ok {
			bad("not in nodes.conf")
			return errs
		}
		if g, seen := groups[tg.Name]; seen && g != hn.group {
			bad("in group %s, the target's other nodes in %s", hn.group, g)
		}
		groups[tg.Name] = hn.group
		for _, a := range knownNodeControl {
			if a == "addr" {
				if c[a] != net.JoinHostPort(hn.addr, hn.port) {
					bad("control.%s.addr = %q, nodes.conf says %s:%s", n, c[a], hn.addr, hn.port)
				}
				continue
			}
			if want := "sh " + dirHosts + "/fault.sh " + a + " " + n; c[a] != want {
				bad("control.%s.%s = %q, want %s", n, a, c[a], want)
			}
		}
		return errs
	})
	cfg, err := config.Parse([]byte(t.files[path]))
	if err == nil {
		for _, tg := range cfg.Targets {
			s, err := parseTarget(tg.URL)
			if err != nil {
				continue
			}
			if err := checkStatus(tg, s, dirHosts); err != nil {
				errs = append(errs, err)
			}
			u, _ := url.Parse(tg.URL)
			for _, hp := range append(strings.Split(u.Host, ","), u.Query()["addr"]...) {
				ok := slices.Contains(sentinels, hp)
				for _, hn := range nodes {
					ok = ok || net.JoinHostPort(hn.addr, hn.port) == hp
				}
				if !ok {
					errs = append(errs, fmt.Errorf("%s: target %s: %s is no node or Sentinel of nodes.conf", path, tg.Name, hp))
				}
			}
		}
	}
	if !run {
		return errs
	}
	return append(errs, runFaults(t, nodes, clients, scratch)...)
}

// runFaults runs fault.sh for every node and action with ssh standing in as
// a script that records its arguments and input, and checks what it sent.
func runFaults(t tree, nodes map[string]hostNode, clients []string, scratch string) []error {
	var errs []error
	bin := filepath.Join(scratch, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return []error{err}
	}
	record := filepath.Join(scratch, "ssh.log")
	fake := "#!/bin/sh\nprintf '%s\\n' \"$*\" >>\"$SSH_LOG\"\ncat >>\"$SSH_LOG\"\n"
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte(fake), 0o755); err != nil {
		return []error{err}
	}
	// fault.sh runs with a PATH of the stand-in ssh and the few tools it
	// needs, nothing else: the nodes are documentation addresses, and no
	// packet of this test leaves the machine.
	for _, tool := range []string{"sh", "awk", "sed", "tr", "cut", "dirname", "cat"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			return []error{err}
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			return []error{err}
		}
	}
	if regexp.MustCompile(`/[A-Za-z0-9_./-]*ssh\b`).MatchString(t.files[dirHosts+"/fault.sh"]) {
		return []error{errors.New("fault.sh calls ssh by a path: it must find ssh on PATH (this test stands one in)")}
	}
	set := regexp.MustCompile(`ip ([sd])addr \{ ([^}]*) \} drop`)
	dst := regexp.MustCompile(`match ip dst ([0-9.]+)/32 flowid 1:4`)
	for _, n := range sortedKeys(nodes) {
		hn := nodes[n]
		var peers []string
		for _, o := range nodes {
			if o.group == hn.group && o.name != n {
				peers = append(peers, o.addr)
			}
		}
		slices.Sort(peers)
		cut := slices.Sorted(slices.Values(append(slices.Clone(peers), clients...)))
		for _, a := range knownNodeControl {
			if a == "addr" {
				continue
			}
			_ = os.Remove(record)
			cmd := exec.Command("sh", filepath.Join(t.root, dirHosts, "fault.sh"), a, n)
			cmd.Env = []string{"PATH=" + bin, "SSH_LOG=" + record, "HOME=" + scratch}
			cmd.Stdin = strings.NewReader("")
			if out, err := cmd.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("fault.sh %s %s: %v: %s", a, n, err, out))
				continue
			}
			b, _ := os.ReadFile(record)
			got := string(b)
			bad := func(format string, x ...any) {
				errs = append(errs, fmt.Errorf("fault.sh %s %s: "+format+"; sent:\n%s", append(append([]any{a, n}, x...), got)...))
			}
			if !strings.Contains(got, " "+hn.dest+" ") {
				bad("not sent to %s", hn.dest)
			}
			switch a {
			case "kill", "start", "pause", "resume":
				want := map[string]string{"kill": "systemctl kill -s KILL ", "start": "systemctl start ", "pause": "systemctl kill -s STOP ", "resume": "systemctl kill -s CONT "}[a] + hn.unit
				if !strings.Contains(got, want) {
					bad("want %q", want)
				}
			case "partition":
				ms := set.FindAllStringSubmatch(got, -1)
				if len(ms) != 2 || ms[0][1] == ms[1][1] || !strings.Contains(got, "tcp dport 22 accept") {
					bad("want one saddr and one daddr drop set, ssh kept open")
				}
				for _, m := range ms {
					if have := slices.Sorted(slices.Values(strings.Split(m[2], ","))); !slices.Equal(have, cut) {
						bad("%saddr set %v, want the group's other nodes and the clients %v", m[1], have, cut)
					}
				}
			case "heal":
				if !strings.Contains(got, "nft delete table inet durachk_partition") {
					bad("does not delete the partition's table")
				}
			case "lag":
				var have []string
				for _, m := range dst.FindAllStringSubmatch(got, -1) {
					have = append(have, m[1])
				}
				slices.Sort(have)
				if !slices.Equal(have, peers) || !strings.Contains(got, "netem delay") {
					bad("netem filters for %v, want the group's other nodes %v", have, peers)
				}
			case "unlag":
				if !strings.Contains(got, "tc qdisc del dev $dev root") {
					bad("does not delete the netem qdisc")
				}
			}
		}
	}
	return errs
}

// ---- the doc ----

var (
	docControl = regexp.MustCompile("control\\.((?:<node>|[a-z0-9][a-z0-9_-]*)(?:\\.[a-z]+)?)")
	docPathRE  = regexp.MustCompile("(?:examples/existing-clusters|compose)/[A-Za-z0-9_./<>-]*[A-Za-z0-9_>]")
	yamlBlock  = regexp.MustCompile("(?s)```yaml\n(.*?)```")
)

// checkDoc: every control key the doc names is known, every recipe path it
// names exists, and every YAML block is a part of a recipe file, word for
// word (the doc shows what the files hold).
func checkDoc(t tree) []error {
	var errs []error
	doc, ok := t.files[docPath]
	if !ok {
		return []error{errors.New(docPath + " is missing")}
	}
	for _, ix := range docControl.FindAllStringSubmatchIndex(doc, -1) {
		if ix[0] > 0 && doc[ix[0]-1] == '/' {
			continue // a file: internal/targets/control.go
		}
		if k := doc[ix[2]:ix[3]]; !knownKey(k) {
			errs = append(errs, fmt.Errorf("%s: control.%s is no control key durachk knows", docPath, k))
		}
	}
	for _, p := range docPathRE.FindAllString(doc, -1) {
		if strings.Contains(p, "<") {
			continue // a pattern: chaos/<node>-kill.yaml
		}
		if _, err := os.Stat(filepath.Join(t.root, strings.TrimSuffix(p, "/"))); err != nil && !t.has(p) {
			errs = append(errs, fmt.Errorf("%s names %s, which does not exist", docPath, p))
		}
	}
	for _, m := range yamlBlock.FindAllStringSubmatch(doc, -1) {
		block := m[1]
		found := false
		for _, p := range sortedKeys(t.files) {
			if p != docPath && strings.Contains(t.files[p], block) {
				found = true
				break
			}
		}
		if !found {
			first, _, _ := strings.Cut(block, "\n")
			errs = append(errs, fmt.Errorf("%s: the YAML block starting %q is in no recipe file as written", docPath, first))
		}
	}
	return errs
}

// ---- all of it ----

func checkScripts(t tree) []error {
	var errs []error
	for _, p := range sortedKeys(t.files) {
		if strings.HasSuffix(p, ".sh") && strings.HasPrefix(p, "examples/") {
			if out, err := exec.Command("sh", "-n", filepath.Join(t.root, p)).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s: sh -n: %v: %s", p, err, out))
			}
		}
	}
	return errs
}

// checkRecipes runs every check; runHosts runs fault.sh too (72 runs).
func checkRecipes(t tree, scratch string, runHosts bool) []error {
	k, errs := loadK8s(t)
	errs = append(errs, k.checkChaos(t)...)
	errs = append(errs, checkK8sConfig(t, k)...)
	errs = append(errs, checkK8sScripts(t, k)...)
	errs = append(errs, checkK8sStatus(t, k)...)
	errs = append(errs, checkHosts(t, scratch, runHosts)...)
	errs = append(errs, checkDoc(t)...)
	return append(errs, checkScripts(t)...)
}

const repoRoot = "../.."

func TestRecipes(t *testing.T) {
	tr, err := readTree(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := loadK8s(tr)
	chaos := 0
	for _, o := range k.objects {
		if strings.HasPrefix(o.kind(), "chaos-mesh.org/") {
			chaos++
		}
	}
	// Three faults for each of the 3 + 2 + 3 nodes: a check over nothing passes nothing.
	if chaos != 24 || len(k.pods) < 8 {
		t.Errorf("%d chaos resources over %d pods: want 24 (kill, partition, lag for each of 8 nodes)", chaos, len(k.pods))
	}
	for _, err := range checkRecipes(tr, t.TempDir(), true) {
		t.Error(err)
	}
}

// TestRecipesRejects: the negative controls — each broken copy of the
// recipes must be refused, for the reason given.
func TestRecipesRejects(t *testing.T) {
	k := dirK8s + "/"
	tests := []struct {
		name, file, old, new, want string
	}{
		{"undocumented apiVersion", k + "chaos/redis-0-kill.yaml", "apiVersion: chaos-mesh.org/v1alpha1", "apiVersion: chaos-mesh.org/v1beta1", "not one the recipes may use"},
		{"undocumented kind", k + "redis.yaml", "kind: StatefulSet", "kind: Statefulset", "not one the recipes may use"},
		{"unknown field", k + "chaos/pg-1-partition.yaml", "  direction: both", "  directions: both", "unknown field \"directions\""},
		{"unknown pod field", k + "rabbitmq.yaml", "      shareProcessNamespace: true", "      sharedProcessNamespace: true", "unknown field \"sharedProcessNamespace\""},
		{"field of the wrong type", k + "redis.yaml", "  replicas: 3\n  podManagementPolicy", "  replicas: \"3\"\n  podManagementPolicy", "want int"},
		{"does not parse", k + "chaos/rabbit-2-lag.yaml", "  delay:\n", "  delay: [\n", "does not parse"},
		{"selector names no pod", k + "chaos/redis-2-kill.yaml", "durachk: [redis-2]", "durachk: [redis-3]", "no StatefulSet or Pod"},
		{"selector of another node", k + "chaos/pg-0-partition.yaml", "    pods:\n      durachk: [pg-0]", "    pods:\n      durachk: [pg-1]", "want exactly the pod pg-0"},
		{"target label that no pod carries", k + "chaos/redis-1-partition.yaml", "        durachk.io/net: recipes", "        durachk.io/net: recipe", "does not select"},
		{"target includes the node", k + "chaos/rabbit-0-partition.yaml", "          operator: NotIn", "          operator: In", "does not select"},
		{"target without the exclusion", k + "chaos/redis-0-lag.yaml", "      expressionSelectors:\n        - key: statefulset.kubernetes.io/pod-name\n          operator: NotIn\n          values: [redis-0]\n", "", "selects redis-0 itself"},
		{"sentinels not cut off", k + "redis.yaml", "        app: redis-sentinel\n        durachk.io/net: recipes", "        app: redis-sentinel", "does not select redis-sentinel-0"},
		{"partition one way", k + "chaos/redis-0-partition.yaml", "direction: both", "direction: to", "cuts both ways"},
		{"kill that is no pod-kill", k + "chaos/rabbit-1-kill.yaml", "action: pod-kill", "action: pod-failure", "want a chaos-mesh.org/v1alpha1/PodChaos with action pod-kill"},
		{"lag without latency", k + "chaos/pg-1-lag.yaml", "latency: 200ms", "latency: soon", "no positive duration"},
		{"headless service selects nothing", k + "postgres.yaml", "  selector:\n    app: pg\n", "  selector:\n    app: postgres\n", "which its pods do not carry"},
		{"command names a missing file", k + "durachk.yaml", "kubectl apply -f examples/existing-clusters/kubernetes/chaos/redis-1-lag.yaml", "kubectl apply -f examples/existing-clusters/kubernetes/chaos/redis-1-slow.yaml", "does not exist"},
		{"kill of another node", k + "durachk.yaml", "kill: kubectl apply -f examples/existing-clusters/kubernetes/chaos/pg-0-kill.yaml", "kill: kubectl apply -f examples/existing-clusters/kubernetes/chaos/pg-1-kill.yaml", "want kubectl apply -f examples/existing-clusters/kubernetes/chaos/pg-0-kill.yaml"},
		{"unknown control key", k + "durachk.yaml", "        unlag: kubectl delete --ignore-not-found -f examples/existing-clusters/kubernetes/chaos/rabbit-2-lag.yaml", "        unslow: kubectl delete --ignore-not-found -f examples/existing-clusters/kubernetes/chaos/rabbit-2-lag.yaml", "no control key durachk knows"},
		{"pause in another container", k + "durachk.yaml", "exec redis-1 -c redis -- sh -c 'kill -STOP -1'", "exec redis-1 -c sentinel -- sh -c 'kill -STOP -1'", "has no container sentinel"},
		{"pause of PID 1", k + "postgres.yaml", "      shareProcessNamespace: true\n      terminationGracePeriodSeconds: 5\n      securityContext", "      terminationGracePeriodSeconds: 5\n      securityContext", "does not share its process namespace"},
		{"addr on a port nothing serves", k + "durachk.yaml", "addr: rabbit-1.rabbit.durachk.svc.cluster.local:5672", "addr: rabbit-1.rabbit.durachk.svc.cluster.local:5673", "no containerPort"},
		{"status of another broker", k + "durachk.yaml", "status.sh postgres", "status.sh redis", "want sh examples/existing-clusters/kubernetes/status.sh postgres"},
		{"store on a node", k + "durachk.yaml", "durachk-store-0.durachk-store.durachk.svc.cluster.local", "pg-0.pg.durachk.svc.cluster.local", "outside every partition"},
		{"status of a pod that is not there", k + "status.sh", "for n in pg-0 pg-1; do", "for n in pg-0 pg-2; do", "names pod pg-2"},
		{"status in a container that is not there", k + "status.sh", `ex "$n" -c rabbitmq --`, `ex "$n" -c rabbit --`, "container rabbit,"},
		{"script drifts from compose's", "compose/clusters/pg-watcher.sh", `"$misses" -ge 4`, `"$misses" -ge 8`, "differs from compose/clusters/pg-watcher.sh"},
		{"host command on another node", dirHosts + "/durachk.yaml", "partition: sh examples/existing-clusters/hosts/fault.sh partition pg-2", "partition: sh examples/existing-clusters/hosts/fault.sh partition pg-3", "want sh examples/existing-clusters/hosts/fault.sh partition pg-2"},
		{"host addr not nodes.conf's", dirHosts + "/durachk.yaml", "addr: 192.0.2.32:5672", "addr: 192.0.2.32:5673", "nodes.conf says"},
		{"partition cuts no client", dirHosts + "/fault.sh", "cut=$(set_of $peers $clients)", "cut=$(set_of $peers)", "want the group's other nodes and the clients"},
		{"partition locks ssh out", dirHosts + "/fault.sh", "\t\ttcp dport 22 accept\n", "", "ssh kept open"},
		{"lag of every packet", dirHosts + "/fault.sh", "match ip dst $p/32 flowid 1:4", "match ip dst 0.0.0.0/0 flowid 1:4", "want the group's other nodes"},
		{"ssh by a path", dirHosts + "/fault.sh", "on() { ssh -o", "on() { /usr/bin/ssh -o", "calls ssh by a path"},
		{"script syntax", dirHosts + "/status.sh", "esac\nexit 1", "esac\nexit 1\nfi", "sh -n"},
		{"doc names an unknown key", docPath, "control.<node>.lag", "control.<node>.delay", "no control key durachk knows"},
		{"doc block not in a file", docPath, "  - name: rabbit-cluster\n", "  - name: rabbitmq-cluster\n", "is in no recipe file"},
		{"doc names a missing file", docPath, "examples/existing-clusters/hosts/fault.sh", "examples/existing-clusters/hosts/faults.sh", "does not exist"},
	}
	orig, err := readTree(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(orig.files[tc.file], tc.old) {
				t.Fatalf("%s no longer contains %q: update the mutation", tc.file, tc.old)
			}
			root := t.TempDir()
			for p, s := range orig.files {
				if p == tc.file {
					s = strings.Replace(s, tc.old, tc.new, 1)
				}
				dst := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			mutated, err := readTree(root)
			if err != nil {
				t.Fatal(err)
			}
			errs := checkRecipes(mutated, t.TempDir(), tc.file == dirHosts+"/fault.sh")
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tc.want) }) {
				t.Errorf("broken %s accepted (want an error containing %q); errors: %v", tc.file, tc.want, errs)
			}
		})
	}
}

// TestKnownKey: the key check itself refuses what durachk does not know.
func TestKnownKey(t *testing.T) {
	for k, want := range map[string]bool{
		"kill": true, "status": true, "timeout": true, "redis-0.partition": true, "<node>.unlag": true, "pg-1.addr": true,
		"partition": false, "redis-0.status": false, "redis-0.isolate": false, "Redis.kill": false, "redis-0.timeout": false,
	} {
		if knownKey(k) != want {
			t.Errorf("knownKey(%q) = %v, want %v", k, !want, want)
		}
	}
}
