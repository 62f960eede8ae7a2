package reports

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/contracts"
)

// atlasDoc is a profile's document with one result per verdict list: each
// contract's trials (one trial: no Trials list).
func atlasDoc(target string, settings map[string]string, trials int, results map[string][]contracts.Verdict) *Document {
	d := NewDocument(1, "durachk run", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	d.Trials, d.Complete = trials, true
	d.Targets = []TargetInfo{{Name: target, MeasuredOn: "mem (embedded reference broker, virtual clock)", Settings: settings}}
	for id, vs := range results {
		r := contracts.Result{Contract: id, Target: target, Verdict: contracts.Pass}
		lost := []contracts.Violation{{Property: checker.Lost, Message: "acknowledged and gone"}}
		for i, v := range vs {
			tr := contracts.Trial{Seed: uint64(i + 1), Verdict: v}
			if v == contracts.Violated {
				tr.Violations = lost
				if r.Verdict != contracts.Violated {
					r.Verdict, r.Violations, r.Seed = v, lost, tr.Seed
				}
			} else if v != contracts.Pass && r.Verdict == contracts.Pass {
				r.Verdict = v
			}
			if len(vs) > 1 {
				r.Trials = append(r.Trials, tr)
			}
		}
		d.Results = append(d.Results, r)
		d.Evidence[Key(target, id)] = &Evidence{Reproduce: "durachk run --seed 3 --target 'mem?name=" + target + "' --contract " + id}
	}
	return d
}

// The cells of an atlas: the verdict with its rate over the trials, rows
// with a violation first, column headings naming the settings that differ,
// and "what to choose" written from the cells.
func TestAtlasCells(t *testing.T) {
	P, V, U := contracts.Pass, contracts.Violated, contracts.Unknown
	idx := AtlasIndex{Schema: AtlasSchema, Seed: 1, Trials: 3, Command: "durachk atlas -c p.yaml --trials 3",
		Brokers: []AtlasBroker{{Name: "mem", Title: "Embedded"}},
		Profiles: []AtlasProfile{
			{Name: "safe", Broker: "mem", Choose: "keeping everything", Contracts: []string{"lease.redelivery", "durability.ack"}, Dir: "safe"},
			{Name: "fast", Broker: "mem", Choose: "speed", Contracts: []string{"lease.redelivery", "durability.ack"}, Dir: "fast"},
			{Name: "absent", Broker: "mem", Choose: "nothing here", Contracts: []string{"durability.ack"}, Dir: "absent", NotRun: "environment variable X is not set"},
		}}
	docs := map[string]*Document{
		"safe": atlasDoc("safe", map[string]string{"fsync": "always"}, 3, map[string][]contracts.Verdict{"lease.redelivery": {P, P, P}, "durability.ack": {P, P, P}}),
		"fast": atlasDoc("fast", map[string]string{"fsync": "never"}, 3, map[string][]contracts.Verdict{"lease.redelivery": {P, U, P}, "durability.ack": {V, U, V}}),
	}
	a := BuildAtlas(idx, docs)
	if len(a.Contracts) != 2 || a.Contracts[0] != "durability.ack" {
		t.Fatalf("rows %v: want durability.ack (violated) first", a.Contracts)
	}
	want := [][]string{{"pass in 3 of 3", "lost in 2 of 3, unknown in 1", ""}, {"pass in 3 of 3", "unknown in 1 of 3", ""}}
	for r := range want {
		for c := range want[r] {
			if got := a.Cells[r][c].Text; got != want[r][c] {
				t.Errorf("cell %s × %s: %q, want %q", a.Contracts[r], a.Columns[c].Name, got, want[r][c])
			}
		}
	}
	if got := a.Cells[0][1].Reproduce; got != "durachk run --seed 1 --target 'mem?name=fast' --contract durability.ack --trials 3" {
		t.Errorf("reproduce %q: want the profile's seed and trials", got)
	}
	if got := a.Cells[0][1].WitnessReproduce; !strings.Contains(got, "--seed 3") {
		t.Errorf("the witness's trial %q: want the result's own command", got)
	}
	if d := a.Columns[1].Differs; len(d) != 1 || d[0] != "fsync=never" {
		t.Errorf("fast differs by %v, want fsync=never", d)
	}
	if len(a.Groups) != 1 || len(a.Groups[0].Tables) != 2 {
		t.Fatalf("groups %+v: want one broker, two tables (the profiles that run two contracts, the one that runs one)", a.Groups)
	}
	choose := strings.Join(append(a.Groups[0].Tables[0].Choose, a.Groups[0].Tables[1].Choose...), "\n")
	for _, s := range []string{"**Choose** `safe` (keeping everything): of the 2 configurations that ran the same contracts here, it alone held them all.",
		"`fast` violates `durability.ack` (lost in 2 of 3, unknown in 1)", "`absent` was not run (environment variable X is not set)"} {
		if !strings.Contains(choose, s) {
			t.Errorf("what to choose lacks %q:\n%s", s, choose)
		}
	}
	var md bytes.Buffer
	if err := WriteAtlasMarkdown(&md, a); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| configuration | `durability.ack` | `lease.redelivery` |",
		"| `safe` | [✅ 3/3][c1] | [✅ 3/3][c2] |",
		"| `fast` | [❌ lost 2/3 ?1][c3] | [❓ ? 1/3][c4] |",
		"[c3]: #c-fast--durability.ack",
	} {
		if !strings.Contains(md.String(), row) {
			t.Errorf("atlas.md lacks %q:\n%s", row, md.String())
		}
	}
	if long := longLines(md.String()); len(long) > 0 {
		t.Errorf("lines longer than %d characters: %q", AtlasLineWidth, long)
	}
	if i, j := strings.Index(md.String(), `id="c-fast--durability.ack"`), strings.Index(md.String(), `id="c-safe--durability.ack"`); i < 0 || j < 0 || i > j {
		t.Errorf("evidence: the violation at %d, the pass at %d: want violations first", i, j)
	}
}

// What to choose compares only configurations that ran the same contracts:
// two that ran durability.ack and durability.power-loss, two clusters that
// ran durability.failover and partition.minority, and one that skipped
// durability.power-loss. (The atlas recommended "among redis-always;
// redis-sentinel-wait1", which ran different contracts.)
func TestAtlasRecommendsAmongTheSameContracts(t *testing.T) {
	P, V := contracts.Pass, contracts.Violated
	single, cluster := []string{"durability.ack", "durability.power-loss"}, []string{"durability.failover", "partition.minority"}
	idx := AtlasIndex{Schema: AtlasSchema, Seed: 1, Command: "durachk atlas", Brokers: []AtlasBroker{{Name: "redis"}},
		Profiles: []AtlasProfile{
			{Name: "always", Broker: "redis", Choose: "fsync always", Contracts: single, Dir: "always"},
			{Name: "everysec", Broker: "redis", Choose: "fsync every second", Contracts: single, Dir: "everysec"},
			{Name: "nopower", Broker: "redis", Choose: "no power loss here", Contracts: single, Dir: "nopower"},
			{Name: "async", Broker: "redis", Choose: "asynchronous replicas", Contracts: cluster, Dir: "async"},
			{Name: "wait1", Broker: "redis", Choose: "WAIT 1", Contracts: cluster, Dir: "wait1"},
		}}
	docs := map[string]*Document{
		"always":   atlasDoc("always", nil, 1, map[string][]contracts.Verdict{"durability.ack": {P}, "durability.power-loss": {P}}),
		"everysec": atlasDoc("everysec", nil, 1, map[string][]contracts.Verdict{"durability.ack": {P}, "durability.power-loss": {V}}),
		"nopower":  atlasDoc("nopower", nil, 1, map[string][]contracts.Verdict{"durability.ack": {P}, "durability.power-loss": {contracts.Skipped}}),
		"async":    atlasDoc("async", nil, 1, map[string][]contracts.Verdict{"durability.failover": {V}, "partition.minority": {V}}),
		"wait1":    atlasDoc("wait1", nil, 1, map[string][]contracts.Verdict{"durability.failover": {P}, "partition.minority": {P}}),
	}
	a := BuildAtlas(idx, docs)
	tables := a.Groups[0].Tables
	if len(tables) != 2 {
		t.Fatalf("%d tables: want the single servers and the clusters apart", len(tables))
	}
	for i, tt := range []struct{ want, not []string }{
		{want: []string{"**Choose** `always` (fsync always): of the 2 configurations that ran the same contracts here, it alone held them all.",
			"`everysec` violates `durability.power-loss`", "`nopower` skipped `durability.power-loss`"},
			not: []string{"wait1", "async"}},
		{want: []string{"**Choose** `wait1` (WAIT 1): of the 2 configurations", "`async` violates `durability.failover`"},
			not: []string{"always", "everysec"}},
	} {
		choose := strings.Join(tables[i].Choose, "\n")
		for _, w := range tt.want {
			if !strings.Contains(choose, w) {
				t.Errorf("table %d: what to choose lacks %q:\n%s", i, w, choose)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(choose, "`"+n+"`") {
				t.Errorf("table %d names %s, which ran other contracts:\n%s", i, n, choose)
			}
		}
		if nr := a.notRun(a.Groups[0], tables[i]); len(nr) != 2 {
			t.Errorf("table %d: did not run %v: want the other table's two contracts", i, nr)
		}
	}
}

// TestDocsAtlasIsItsOutput: docs/atlas.md is what `durachk atlas --render`
// makes of the files it came from (docs/atlas/); `go test ./reports -run
// TestDocsAtlasIsItsOutput -update` rewrites it from them.
func TestDocsAtlasIsItsOutput(t *testing.T) {
	a, err := LoadAtlas("../docs/atlas")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteAtlasMarkdown(&b, a); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("../docs/atlas.md", b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("../docs/atlas.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(b.String(), "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("docs/atlas.md differs from the atlas of docs/atlas/ at line %d:\n  docs: %s\n  atlas: %s\n(regenerate: durachk atlas --render docs/atlas && mv docs/atlas/atlas.md docs/, or go test ./reports -run TestDocsAtlasIsItsOutput -update)", i+1, g, w)
			}
		}
	}
	// A screen wide: no line outside a code block longer than
	// AtlasLineWidth, no HTML table of more than atlasHTMLColumns contracts.
	if long := longLines(b.String()); len(long) > 0 {
		t.Errorf("%d lines of docs/atlas.md longer than %d characters outside code blocks, the first: %s", len(long), AtlasLineWidth, long[0])
	}
	var page bytes.Buffer
	if err := WriteAtlasHTML(&page, a); err != nil {
		t.Fatal(err)
	}
	for _, tb := range regexp.MustCompile(`(?s)<table class="atlas">.*?</tr>`).FindAllString(page.String(), -1) {
		if n := strings.Count(tb, "<th>") - 1; n > atlasHTMLColumns {
			t.Errorf("an HTML table of %d contracts, want at most %d", n, atlasHTMLColumns)
		}
	}
	// Every profile of the file it came from has a column, and every cell
	// measured names its rate.
	if len(a.Columns) != len(a.Index.Profiles) {
		t.Errorf("%d columns for %d profiles", len(a.Columns), len(a.Index.Profiles))
	}
	measured := 0
	for r := range a.Contracts {
		for _, c := range a.Cells[r] {
			if c.Measured() {
				measured++
				if !regexp.MustCompile(`^(skipped|.+ in \d+ of \d+.*)$`).MatchString(c.Text) {
					t.Errorf("%s × %s: %q: want the verdict with its rate", c.Profile, c.Contract, c.Text)
				}
			}
		}
	}
	if measured == 0 {
		t.Errorf("docs/atlas holds no measured cell")
	}
	// The docs that link to the atlas's cells name cells it measured.
	anchors := map[string]bool{}
	for r := range a.Contracts {
		for _, c := range a.Cells[r] {
			if c.Measured() {
				anchors[c.Anchor()] = true
			}
		}
	}
	docs, _ := filepath.Glob("../docs/*.md")
	links := 0
	for _, doc := range append(docs, "../README.md") {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`atlas\.md#(c-[A-Za-z0-9._-]+)`).FindAllStringSubmatch(string(b), -1) {
			links++
			if !anchors[m[1]] {
				t.Errorf("%s links to atlas.md#%s: no such cell in the atlas", doc, m[1])
			}
		}
	}
	if links == 0 {
		t.Errorf("no doc links to a cell of the atlas")
	}
}

// The atlas of two configurations, one with a violation among 19 contracts,
// as Chromium renders it: the configurations are rows, the contracts
// columns, at most six to a table (no 19-column table); the violated contract
// is the first column of the first table, its cell on no-persistence's row
// red, and in the screenshot that red is as far left as any green pass. With
// DURACHK_SCREENSHOTS set to a directory the screenshot is saved there as
// atlas.png.
func TestAtlasViolationFirstInChromium(t *testing.T) {
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Skip("Chromium is absent (/usr/bin/chromium); .ci/run installs Debian's chromium")
	}
	bad := catalogueWithOneViolation(t)
	good := NewDocument(1, "durachk run --seed 1", bad.Wall.StartedAt)
	good.AddTarget(contracts.MemTarget{})
	for i, c := range contracts.Catalogue {
		r, err := contracts.Evaluate(context.Background(), contracts.MemTarget{}, c, contracts.Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		good.Place(i, NewEntry(r, nil, Evidence{}))
	}
	good.Complete = true
	var ids []string
	for _, c := range contracts.Catalogue {
		ids = append(ids, c.ID)
	}
	idx := AtlasIndex{Schema: AtlasSchema, Seed: 1, Command: "durachk atlas -c profiles.yaml",
		Brokers: []AtlasBroker{{Name: "mem", Title: "The embedded reference"}},
		Profiles: []AtlasProfile{
			{Name: "reference", Broker: "mem", Choose: "the reference pipeline", Contracts: ids, Dir: "reference"},
			{Name: "no-persistence", Broker: "mem", Choose: "a broker that keeps nothing through a power loss", Contracts: ids, Dir: "no-persistence"},
		}}
	a := BuildAtlas(idx, map[string]*Document{"reference": good, "no-persistence": bad})
	page := filepath.Join(t.TempDir(), "atlas.html")
	var b bytes.Buffer
	if err := WriteAtlasHTML(&b, a); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	img, dom := chromium(t, page)

	tables := regexp.MustCompile(`(?s)<table class="atlas">(.*?)</table>`).FindAllStringSubmatch(dom, -1)
	if len(tables) != 4 {
		t.Fatalf("%d tables for 19 contracts: want 4 of at most 6 columns", len(tables))
	}
	heads := regexp.MustCompile(`<th><code>([^<]+)</code></th>`).FindAllStringSubmatch(tables[0][1], -1)
	rows := regexp.MustCompile(`<tr><td><code>([^<]+)</code></td><td class="(v-[a-z]+)"`).FindAllStringSubmatch(tables[0][1], -1)
	if len(heads) == 0 || heads[0][1] != "durability.power-loss" || len(rows) != 2 || rows[0][1] != "reference" || rows[0][2] != "v-pass" ||
		rows[1][1] != "no-persistence" || rows[1][2] != "v-violation" {
		t.Fatalf("first table as rendered: columns %v, rows %v: want durability.power-loss first, passed by the reference and violated by no-persistence", heads, rows)
	}
	if n := strings.Count(dom, `<td class="v-violation"`); n != 1 {
		t.Errorf("%d violation cells, want 1", n)
	}
	if !strings.Contains(dom, `id="e-c-no-persistence--durability.power-loss"`) {
		t.Errorf("no evidence of the violation")
	}
	red, green := firstColOf(img, [3]uint32{0xff, 0xeb, 0xe9}), firstColOf(img, [3]uint32{0xda, 0xfb, 0xe1})
	if red < 0 || green < 0 || red > green {
		t.Errorf("screenshot: the violation's colour first at x=%d, a pass's at x=%d: want the violated contract in the first column", red, green)
	}
	if out := os.Getenv("DURACHK_SCREENSHOTS"); out != "" {
		savePNG(t, filepath.Join(out, "atlas.png"), img)
	}
}

// firstColOf is the leftmost x of a pixel of colour c (-1: none).
func firstColOf(img image.Image, c [3]uint32) int { return firstPixel(img, c, true) }

// longLines are the lines of a Markdown text outside code blocks longer
// than AtlasLineWidth characters.
func longLines(md string) []string {
	var out []string
	code := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			code = !code
			continue
		}
		if !code && utf8.RuneCountInString(l) > AtlasLineWidth {
			out = append(out, l)
		}
	}
	return out
}

func savePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
