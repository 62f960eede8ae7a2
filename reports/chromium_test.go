package reports

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/durachk/durachk/contracts"
)

// catalogueWithOneViolation runs the catalogue on the embedded target, with
// durability.power-loss (the 15th contract) against its no-persistence
// sabotage: one violation among 19 results, 15 passes and 4 skips (the
// cluster contracts), each with its history.
func catalogueWithOneViolation(t *testing.T) *Document {
	t.Helper()
	d := NewDocument(1, "durachk run --seed 1", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	d.AddTarget(contracts.MemTarget{})
	for i, c := range contracts.Catalogue {
		sab := ""
		if c.ID == "durability.power-loss" {
			sab = "no-persistence"
		}
		var e Entry
		if c.Needs != nil && c.Needs(contracts.MemTarget{}.Capabilities()) != "" {
			r, err := contracts.Evaluate(context.Background(), contracts.MemTarget{}, c, contracts.Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			e = NewEntry(r, nil, Evidence{})
		} else {
			e = judgedRun(t, c.ID, sab)
		}
		d.Place(i, e)
	}
	d.Complete = true
	d.Finish(d.Wall.StartedAt.Add(time.Second))
	return d
}

// chromium renders page headless and returns its screenshot and its DOM.
func chromium(t *testing.T, page string) (image.Image, string) {
	t.Helper()
	bin := "/usr/bin/chromium"
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("Chromium is absent (%s); .ci/run installs Debian's chromium", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := func(args ...string) []byte {
		args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--hide-scrollbars",
			"--user-data-dir=" + t.TempDir(), "--window-size=1280,1400"}, args...)
		cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
		}
		return out.Bytes()
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	run("--screenshot=" + shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return img, string(run("--dump-dom"))
}

// firstRowOf is the first pixel row of img holding colour c (in 8 bits per
// channel), or -1.
func firstRowOf(img image.Image, c [3]uint32) int { return firstPixel(img, c, false) }

// firstPixel is the first y (columns: the first x) at which a pixel has
// colour c, scanning rows top down (columns left to right); -1: none.
func firstPixel(img image.Image, c [3]uint32, columns bool) int {
	b := img.Bounds()
	outer, inner, off := b.Dy(), b.Dx(), b.Min.Y
	if columns {
		outer, inner, off = inner, outer, b.Min.X
	}
	for i := range outer {
		for j := range inner {
			x, y := b.Min.X+j, b.Min.Y+i
			if columns {
				x, y = b.Min.X+i, b.Min.Y+j
			}
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == c[0] && g>>8 == c[1] && bl>>8 == c[2] {
				return off + i
			}
		}
	}
	return -1
}

// The report of a run with one violation among 19, as Chromium renders it:
// the violation is the first row of the verdict table and the first result of
// the evidence (the DOM's order), and in the screenshot the violation's red
// cell sits above every green pass. With DURACHK_SCREENSHOTS set to a
// directory, the screenshot is saved there as report-one-violation.png.
func TestReportViolationFirstInChromium(t *testing.T) {
	d := catalogueWithOneViolation(t)
	if d.Summary["violation"] != 1 || len(d.Results) != 19 || d.Results[14].Verdict != contracts.Violated {
		t.Fatalf("summary %v, %d results: want one violation among 19, the 15th", d.Summary, len(d.Results))
	}
	dir := t.TempDir()
	if err := d.WriteJSON(filepath.Join(dir, "result.json")); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, render(t, d, "html"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, dom := chromium(t, page)

	rows := regexp.MustCompile(`<tr><td><code>([^<]+)</code></td><td class="(v-[a-z]+)"`).FindAllStringSubmatch(dom, -1)
	if len(rows) != 19 || rows[0][1] != "durability.power-loss" || rows[0][2] != "v-violation" {
		t.Errorf("verdict table as rendered: %d rows, the first %v: want durability.power-loss, a violation", len(rows), rows[:min(1, len(rows))])
	}
	for _, r := range rows[1:] {
		if r[2] == "v-violation" {
			t.Errorf("another violation row: %v", r)
		}
	}
	secs := regexp.MustCompile(`<div class="result" id="([^"]+)"`).FindAllStringSubmatch(dom, -1)
	if len(secs) != 19 || secs[0][1] != Anchor("mem", "durability.power-loss") {
		t.Errorf("evidence as rendered: %d results, the first %v: want durability.power-loss", len(secs), secs[:min(1, len(secs))])
	}
	if !strings.Contains(dom, "<details><summary>lease native") {
		t.Errorf("the declared capabilities are not a summary with details")
	}

	red, green := firstRowOf(img, [3]uint32{0xff, 0xeb, 0xe9}), firstRowOf(img, [3]uint32{0xda, 0xfb, 0xe1})
	if red < 0 || green < 0 || red >= green {
		t.Errorf("screenshot: the violation's colour first at y=%d, a pass's at y=%d: want the violation above every pass", red, green)
	}
	if out := os.Getenv("DURACHK_SCREENSHOTS"); out != "" {
		f, err := os.Create(filepath.Join(out, "report-one-violation.png"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := png.Encode(f, img); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", f.Name())
	}
}
