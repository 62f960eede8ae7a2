package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/config"
	"github.com/durachk/durachk/reports"
)

// AtlasOptions are the flags of `durachk atlas`.
type AtlasOptions struct {
	Profiles  string   // atlas/profiles.yaml
	Contracts []string // only these contracts (each profile runs those of its own it names)
	Only      []string // only these profiles (the others keep what DIR has)
	Seed      uint64
	SeedSet   bool
	Trials    int
	Parallel  int // contracts of a profile evaluated at a time (run's --parallel)
	Out       string
	Render    string // re-render DIR's atlas.md and atlas.html without running
	Command   string
}

// atlasFile is atlas/profiles.yaml.
type atlasFile struct {
	Format    string                `yaml:"format"`
	Title     string                `yaml:"title"`
	Note      string                `yaml:"note"`
	Seed      yaml.Node             `yaml:"seed"` // read exactly: atlasSeed
	Contracts []string              `yaml:"contracts"`
	Brokers   []reports.AtlasBroker `yaml:"brokers"`
	Profiles  []atlasProfileFile    `yaml:"profiles"`
}

type atlasProfileFile struct {
	Name      string    `yaml:"name"`
	Broker    string    `yaml:"broker"`
	Choose    string    `yaml:"choose"`
	Emulator  bool      `yaml:"emulator"`
	Contracts []string  `yaml:"contracts"`
	Target    yaml.Node `yaml:"target"`
}

// atlasProfile is a profile loaded: its column and its target URL ("" when
// it cannot run here: NotRun says why), and its entry in the profiles file
// (canonical YAML), which its definition is named from.
type atlasProfile struct {
	reports.AtlasProfile
	url   string
	entry []byte
}

// loadAtlas reads a profiles file: every profile's target is a durachk.yaml
// target (url and knobs, ${VAR} expanded); a profile whose target names an
// unset variable is kept, marked as not run with the reason.
func loadAtlas(path string, only []string) (reports.AtlasIndex, []atlasProfile, error) {
	var idx reports.AtlasIndex
	b, err := os.ReadFile(path)
	if err != nil {
		return idx, nil, ConfigError(err)
	}
	var f atlasFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return idx, nil, ConfigError(fmt.Errorf("%s: %v", path, err))
	}
	if f.Format != reports.AtlasSchema {
		return idx, nil, ConfigError(fmt.Errorf("%s: format %q: want %s", path, reports.Clip(f.Format), reports.AtlasSchema))
	}
	if len(f.Profiles) == 0 {
		return idx, nil, ConfigError(fmt.Errorf("%s: no profiles", path))
	}
	entries, err := profileEntries(b)
	if err != nil || len(entries) != len(f.Profiles) {
		return idx, nil, ConfigError(fmt.Errorf("%s: profiles: %v", path, err))
	}
	idx = reports.AtlasIndex{Schema: reports.AtlasSchema, Title: f.Title, Note: strings.TrimSpace(f.Note), Brokers: f.Brokers}
	if f.Seed.Kind != 0 {
		if idx.Seed, err = atlasSeed(&f.Seed); err != nil {
			return idx, nil, ConfigError(fmt.Errorf("%s: %w", path, err))
		}
	}
	names := map[string]bool{}
	var ps []atlasProfile
	for i, pf := range f.Profiles {
		where := fmt.Sprintf("%s: profiles[%d]", path, i)
		if pf.Name == "" || pf.Broker == "" || pf.Choose == "" {
			return idx, nil, ConfigError(fmt.Errorf("%s: want name, broker and choose (what a team would choose it for)", where))
		}
		if strings.ContainsAny(pf.Name, "/\\ ") || pf.Name == "." || pf.Name == ".." {
			return idx, nil, ConfigError(fmt.Errorf("%s: name %q: want a name without / or spaces (it names a directory)", where, reports.Clip(pf.Name)))
		}
		if names[pf.Name] {
			return idx, nil, ConfigError(fmt.Errorf("%s: name %q used twice", where, pf.Name))
		}
		names[pf.Name] = true
		cs := pf.Contracts
		if len(cs) == 0 {
			cs = f.Contracts
		}
		if len(cs) == 0 {
			for _, c := range contracts.Catalogue {
				cs = append(cs, c.ID)
			}
		}
		if _, err := contracts.Select(cs); err != nil {
			return idx, nil, ConfigError(fmt.Errorf("%s: %w", where, err))
		}
		p := atlasProfile{AtlasProfile: reports.AtlasProfile{Name: pf.Name, Broker: pf.Broker, Choose: pf.Choose,
			Emulator: pf.Emulator, Contracts: cs, Dir: pf.Name, Definition: reports.ProfileDefinition(entries[i], cs)}, entry: entries[i]}
		u, err := atlasTarget(pf)
		switch {
		case errors.Is(err, config.ErrUnset):
			p.NotRun = strings.TrimPrefix(err.Error(), "configuration: ")
		case err != nil:
			return idx, nil, ConfigError(fmt.Errorf("%s: %w", where, err))
		default:
			// Its kind, URL and knobs, before any profile runs (a bad knob
			// of the fifth was reported once the first four had run).
			if _, err := specName(u); err != nil {
				return idx, nil, ConfigError(fmt.Errorf("%s (%s): %w", where, pf.Name, err))
			}
		}
		p.url = u
		ps = append(ps, p)
	}
	for _, n := range only {
		if !names[n] {
			return idx, nil, ConfigError(fmt.Errorf("--profile %q: no such profile in %s", reports.Clip(n), path))
		}
	}
	for _, p := range ps {
		idx.Profiles = append(idx.Profiles, p.AtlasProfile)
	}
	return idx, ps, nil
}

// profileEntries are the profiles of a profiles file, each as canonical
// YAML: comments and layout left out, so that only a change to what a
// profile says changes its definition.
func profileEntries(file []byte) ([][]byte, error) {
	var raw struct {
		Profiles []yaml.Node `yaml:"profiles"`
	}
	if err := yaml.Unmarshal(file, &raw); err != nil {
		return nil, err
	}
	var out [][]byte
	for i := range raw.Profiles {
		n := &raw.Profiles[i]
		uncomment(n)
		b, err := yaml.Marshal(n)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func uncomment(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	n.Style &^= yaml.FlowStyle | yaml.LiteralStyle | yaml.FoldedStyle
	for _, c := range n.Content {
		uncomment(c)
	}
}

// AtlasWanted is what an atlas generated from the profiles file at path
// must be the measurement of (reports.Atlas.Stale): each profile's
// definition, the file's seed, the checker's properties now and at least
// minTrials trials a cell.
func AtlasWanted(path string, minTrials int) (reports.AtlasWant, error) {
	idx, _, err := loadAtlas(path, nil)
	if err != nil {
		return reports.AtlasWant{}, err
	}
	w := reports.AtlasWant{Seed: idx.Seed, Properties: reports.PropertiesHash(), MinTrials: minTrials}
	for _, p := range idx.Profiles {
		w.Definitions = append(w.Definitions, reports.ProfileDef{Name: p.Name, Definition: p.Definition})
	}
	return w, nil
}

// atlasSeed reads the profiles file's seed as a decimal integer that fits
// 64 bits: YAML decoding into a uint64 read 1.5 as 1 and 2^64 as 2^63.
func atlasSeed(n *yaml.Node) (uint64, error) {
	v, err := strconv.ParseUint(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || err != nil {
		return 0, fmt.Errorf("line %d: seed %s: want a decimal integer from 0 to %d", n.Line, reports.Clip(cmp.Or(n.Value, "(not a number)")), uint64(math.MaxUint64))
	}
	return v, nil
}

// atlasTarget turns a profile's target mapping into its URL through the
// durachk.yaml parser, named after the profile.
func atlasTarget(pf atlasProfileFile) (string, error) {
	t := pf.Target
	if t.Kind != yaml.MappingNode {
		return "", fmt.Errorf("target: want a mapping with url and knobs, as a durachk.yaml target")
	}
	for i := 0; i+1 < len(t.Content); i += 2 {
		if t.Content[i].Value == "name" {
			return "", fmt.Errorf("target: no name: the profile's name is the target's")
		}
	}
	t.Content = append([]*yaml.Node{{Kind: yaml.ScalarNode, Value: "name"}, {Kind: yaml.ScalarNode, Value: pf.Name}}, t.Content...)
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Value: "targets"},
		{Kind: yaml.SequenceNode, Content: []*yaml.Node{&t}},
	}}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return "", err
	}
	c, err := config.Parse(b)
	if err != nil {
		return "", err
	}
	return c.Targets[0].URL, nil
}

// Atlas carries out `durachk atlas`: each profile of the profiles file run
// as `durachk run` would (its contracts in parallel, --trials each) into
// DIR/<profile>/, then DIR/atlas.md and DIR/atlas.html rendered from the
// results. It is resumable: a profile whose result.json in DIR is complete
// and was measured with the same seed, trials and contracts is kept, not run
// again, so an interrupted atlas continues where it stopped. With Render it
// only re-renders DIR from its files.
func Atlas(ctx context.Context, o AtlasOptions, stdout, stderr io.Writer) error {
	if o.Render != "" {
		return renderAtlas(o.Render, stdout)
	}
	if o.Profiles == "" {
		return ConfigError(fmt.Errorf("atlas: give -c atlas/profiles.yaml (or --render DIR)"))
	}
	if err := checkOut(o.Out); err != nil {
		return err
	}
	if err := checkBounds("atlas", map[string]int64{"trials": int64(max(o.Trials, 1)), "parallel": int64(o.Parallel)}); err != nil {
		return err
	}
	idx, ps, err := loadAtlas(o.Profiles, o.Only)
	if err != nil {
		return err
	}
	if o.SeedSet {
		idx.Seed = o.Seed
	}
	trials := max(o.Trials, 1)
	if trials > 1 {
		idx.Trials = trials
	}
	idx.Command = reports.RedactCommand(o.Command)
	if len(o.Contracts) > 0 {
		if _, err := contracts.Select(o.Contracts); err != nil {
			return ConfigError(err)
		}
		for i := range ps {
			ps[i].Contracts = slices.DeleteFunc(slices.Clone(ps[i].Contracts), func(c string) bool { return !slices.Contains(o.Contracts, c) })
			idx.Profiles[i].Contracts = ps[i].Contracts
		}
	}
	// Nothing to run is a mistake (a filter that selects nothing, an empty
	// file): say so, and write nothing.
	if !slices.ContainsFunc(ps, func(p atlasProfile) bool {
		return p.NotRun == "" && len(p.Contracts) > 0 && (len(o.Only) == 0 || slices.Contains(o.Only, p.Name))
	}) {
		return ConfigError(fmt.Errorf("atlas: nothing to run: no profile of %s selected (--profile, --contract) runs a contract with its variables set", o.Profiles))
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return ConfigError(err)
	}
	if err := reports.WriteAtlasIndex(filepath.Join(o.Out, "atlas.json"), idx); err != nil {
		return ConfigError(err)
	}
	start, load0, build, machine := time.Now(), loadAverage(), reports.ReadBuild(), reports.ThisMachine()
	ran, kept, failed := 0, 0, 0
	for i, p := range ps {
		switch {
		case p.NotRun != "":
			fmt.Fprintf(stderr, "durachk: atlas: %s not run: %s\n", p.Name, p.NotRun)
			continue
		case len(p.Contracts) == 0:
			continue
		case len(o.Only) > 0 && !slices.Contains(o.Only, p.Name):
			continue
		case ctx.Err() != nil:
			continue
		}
		dir := filepath.Join(o.Out, p.Dir)
		def := reports.ProfileDefinition(p.entry, p.Contracts)
		if atlasDone(dir, idx.Seed, trials, p.Contracts, def) {
			fmt.Fprintf(stderr, "durachk: atlas: %s: kept %s (complete and stamped: same definition, seed, trials and contracts)\n", p.Name, filepath.Join(dir, "result.json"))
			kept++
			continue
		}
		fmt.Fprintf(stderr, "durachk: atlas: profile %d of %d: %s (%s)\n", i+1, len(ps), p.Name, plural(len(p.Contracts), "contract"))
		log, err := os.Create(filepath.Join(o.Out, p.Dir+".log"))
		if err != nil {
			return ConfigError(err)
		}
		ro := RunOptions{Targets: []string{p.url}, Contracts: p.Contracts, Seed: idx.Seed, SeedSet: true,
			Trials: o.Trials, Parallel: o.Parallel, Out: dir, Command: atlasRunCommand(p, idx.Seed, trials)}
		stamp := reports.AtlasStamp{Profile: p.Name, Definition: def, Properties: reports.PropertiesHash(), Seed: idx.Seed, Trials: trials,
			Commit: build.Revision, Dirty: build.Modified, Version: build.Version, Started: time.Now().UTC(), Machine: reports.ThisMachine()}
		err = Run(ctx, ro, log, stderr)
		log.Close()
		ran++
		stamp.Finished, stamp.Machine.LoadEnd = time.Now().UTC(), reports.LoadAverage()
		if _, serr := os.Stat(filepath.Join(dir, "result.json")); serr == nil {
			if serr := reports.WriteStamp(dir, stamp); serr != nil {
				return ConfigError(serr)
			}
		}
		if c := Code(err); err != nil && c != ExitViolation && c != ExitUnknown {
			failed++
			fmt.Fprintf(stderr, "durachk: atlas: %s: %v\n", p.Name, err)
		}
	}
	idx.Run = &reports.AtlasRun{Commit: build.Revision, Dirty: build.Modified, Version: build.Version,
		Started: start.UTC(), Finished: time.Now().UTC(), Machine: machine}
	idx.Run.Machine.LoadEnd = reports.LoadAverage()
	idx.Measured = fmt.Sprintf("this invocation ran %s in %s on %s (load average %s at its start, %s at its end)",
		plural(ran, "profile"), time.Since(start).Round(time.Second), plural(runtime.NumCPU(), "CPU"), load0, loadAverage())
	if kept > 0 {
		idx.Measured += fmt.Sprintf(" and kept %d complete from an earlier one", kept)
	}
	if err := reports.WriteAtlasIndex(filepath.Join(o.Out, "atlas.json"), idx); err != nil {
		return ConfigError(err)
	}
	a, err := reports.LoadAtlas(o.Out)
	if err != nil {
		return ConfigError(err)
	}
	if err := writeAtlas(o.Out, a); err != nil {
		return ConfigError(err)
	}
	fmt.Fprintf(stdout, "atlas: %d profiles run, %d kept, %d failed in %s; %s, %s\n", ran, kept, failed,
		time.Since(start).Round(time.Second), filepath.Join(o.Out, "atlas.md"), filepath.Join(o.Out, "atlas.html"))
	switch {
	case ctx.Err() != nil:
		return &ExitError{Code: ExitUnknown, Err: fmt.Errorf("atlas interrupted (%s): run it again to continue where it stopped", interruption(ctx))}
	case failed > 0:
		return ConfigError(fmt.Errorf("atlas: %d profile(s) failed to run (see above)", failed))
	}
	return nil
}

// atlasRunCommand is the durachk run a profile's results come from.
func atlasRunCommand(p atlasProfile, seed uint64, trials int) string {
	parts := []string{"durachk", "run", "--target", shellQuote(reports.RedactURL(p.url)), "--seed", fmt.Sprint(seed)}
	for _, c := range p.Contracts {
		parts = append(parts, "--contract", c)
	}
	if trials > 1 {
		parts = append(parts, "--trials", fmt.Sprint(trials))
	}
	return strings.Join(parts, " ")
}

// atlasDone says dir holds a complete result of the profile as asked,
// stamped with its definition as it is now (def).
func atlasDone(dir string, seed uint64, trials int, cs []string, def string) bool {
	if st, err := reports.ReadStamp(dir); err != nil || st == nil || st.Definition != def || st.Properties != reports.PropertiesHash() {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		return false
	}
	d, err := reports.DecodeJSON(b)
	if err != nil || !d.Complete || d.Seed != seed || max(d.Trials, 1) != trials || len(d.Results) != len(cs) {
		return false
	}
	for _, r := range d.Results {
		if !slices.Contains(cs, r.Contract) {
			return false
		}
	}
	return true
}

// loadAverage is the machine's one-minute load average ("?" where unknown).
func loadAverage() string { return cmp.Or(reports.LoadAverage(), "?") }

func renderAtlas(dir string, stdout io.Writer) error {
	a, err := reports.LoadAtlas(dir)
	if err != nil {
		return ConfigError(err)
	}
	if err := writeAtlas(dir, a); err != nil {
		return ConfigError(err)
	}
	fmt.Fprintf(stdout, "atlas: %s, %s\n", filepath.Join(dir, "atlas.md"), filepath.Join(dir, "atlas.html"))
	return nil
}

func writeAtlas(dir string, a *reports.Atlas) error {
	for name, w := range map[string]func(io.Writer, *reports.Atlas) error{"atlas.md": reports.WriteAtlasMarkdown, "atlas.html": reports.WriteAtlasHTML} {
		var b bytes.Buffer
		if err := w(&b, a); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
