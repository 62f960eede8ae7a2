package reports

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/durachk/durachk/checker"
)

// StampFile is the stamp `durachk atlas` writes beside each profile's
// result.json: what the profile was measured with and on.
const StampFile = "stamp.json"

// StampSchema names the version of stamp.json.
const StampSchema = "durachk.atlas-stamp/v1"

// AtlasStamp is what one profile of an atlas was measured with and on: the
// profile's definition and the checker's properties as they were (so that a
// later change to either shows the atlas stale), the durachk that measured
// it, when, and the machine.
type AtlasStamp struct {
	Schema  string `json:"schema"`
	Profile string `json:"profile"`
	// Definition is the profile's definition as measured (ProfileDefinition
	// of its entry in the profiles file and the contracts it ran).
	Definition string `json:"definition"`
	// Properties is PropertiesHash of the checker that judged it.
	Properties string `json:"properties"`
	Seed       uint64 `json:"seed"`
	Trials     int    `json:"trials"`
	// Commit is durachk's VCS revision ("" when the build carries none);
	// Dirty: the tree it was built from had uncommitted changes.
	Commit   string    `json:"commit,omitempty"`
	Dirty    bool      `json:"dirty,omitempty"`
	Version  string    `json:"durachk_version"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
}

// AtlasRun is one invocation of `durachk atlas`: the durachk that ran it
// (VCS revision, uncommitted changes, version), when, and the machine.
type AtlasRun struct {
	Commit   string    `json:"commit,omitempty"`
	Dirty    bool      `json:"dirty,omitempty"`
	Version  string    `json:"durachk_version"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Machine  Machine   `json:"machine"`
}

// Machine is what a measurement ran on: the CPUs, the kernel, and the
// one-minute load average when it started and when it ended (the machine
// may be shared: its load slows private brokers and stretches the
// scenario's times).
type Machine struct {
	CPUs      int    `json:"cpus"`
	Kernel    string `json:"kernel,omitempty"`
	LoadStart string `json:"load_start,omitempty"`
	LoadEnd   string `json:"load_end,omitempty"`
}

// ThisMachine is the machine durachk runs on now (LoadEnd empty).
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), LoadStart: LoadAverage()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = runtime.GOOS + " " + strings.TrimSpace(string(b))
	} else {
		m.Kernel = runtime.GOOS
	}
	return m
}

// LoadAverage is the machine's one-minute load average ("" where unknown).
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return ""
}

// PropertiesHash names the checker's property list: each property's name
// and claim. An atlas measured under another list is stale.
func PropertiesHash() string {
	var b strings.Builder
	for _, p := range checker.Properties {
		fmt.Fprintf(&b, "%s\x00%s\n", p.Name, p.Claim)
	}
	return shortHash(b.String())
}

// ProfileDefinition names a profile's definition: its entry in the profiles
// file (canonical, comments left out) and the contracts it runs. Two
// measurements with one definition measured the same thing.
func ProfileDefinition(entry []byte, contracts []string) string {
	return shortHash(string(entry) + "\x00contracts=" + strings.Join(contracts, ","))
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:16]
}

// WriteStamp writes dir/stamp.json.
func WriteStamp(dir string, s AtlasStamp) error {
	s.Schema = StampSchema
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, StampFile), append(b, '\n'))
}

// ReadStamp reads dir/stamp.json; nil without one.
func ReadStamp(dir string) (*AtlasStamp, error) {
	b, err := os.ReadFile(filepath.Join(dir, StampFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s AtlasStamp
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, StampFile), err)
	}
	if s.Schema != StampSchema {
		return nil, fmt.Errorf("%s: schema %q, want %q", filepath.Join(dir, StampFile), Clip(s.Schema), StampSchema)
	}
	return &s, nil
}

// AtlasWant is what an atlas should be the measurement of: the profiles
// file as it is now (each profile's definition, in file order, and its
// seed), the checker's properties now, and the trials a cell needs.
type AtlasWant struct {
	Seed        uint64
	Definitions []ProfileDef
	Properties  string
	MinTrials   int
}

// ProfileDef is one profile's name and definition.
type ProfileDef struct{ Name, Definition string }

// Stale lists why the atlas is not the measurement of want (none: it is):
// a profile of the file missing from the atlas or unmeasured, one measured
// under another definition, seed, checker or fewer trials, one no longer in
// the file, a run that did not finish.
func (a *Atlas) Stale(want AtlasWant) []string {
	var out []string
	cols := map[string]AtlasColumn{}
	for _, c := range a.Columns {
		cols[c.Name] = c
	}
	var names []string
	for _, d := range want.Definitions {
		names = append(names, d.Name)
		c, ok := cols[d.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("profile %s is in the profiles file, not in the atlas", d.Name))
			continue
		case c.NotRun != "":
			out = append(out, fmt.Sprintf("profile %s was not run: %s", d.Name, c.NotRun))
			continue
		case c.MeasuredOn == "":
			out = append(out, fmt.Sprintf("profile %s has no result", d.Name))
			continue
		case c.Stamp == nil:
			out = append(out, fmt.Sprintf("profile %s has no stamp (%s): measured before durachk recorded what with", d.Name, StampFile))
			continue
		}
		s := c.Stamp
		if s.Definition != d.Definition {
			out = append(out, fmt.Sprintf("profile %s changed in the profiles file since it was measured (or ran other contracts)", d.Name))
		}
		if s.Properties != want.Properties {
			out = append(out, fmt.Sprintf("profile %s was judged by another list of the checker's properties (checker/properties.go changed since)", d.Name))
		}
		if s.Seed != want.Seed {
			out = append(out, fmt.Sprintf("profile %s was measured with seed %d, the profiles file's is %d", d.Name, s.Seed, want.Seed))
		}
		if s.Trials < want.MinTrials {
			out = append(out, fmt.Sprintf("profile %s has %d trial(s) a cell, want at least %d", d.Name, s.Trials, want.MinTrials))
		}
		if c.Partial {
			out = append(out, fmt.Sprintf("profile %s: its run did not finish", d.Name))
		}
	}
	for _, c := range a.Columns {
		if !slices.Contains(names, c.Name) {
			out = append(out, fmt.Sprintf("profile %s is in the atlas, no longer in the profiles file", c.Name))
		}
	}
	return out
}
