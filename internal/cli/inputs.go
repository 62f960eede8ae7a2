package cli

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// maxJobs bounds --jobs: far above any scenario's default (24), and the
// largest workload the embedded target is measured to drain
// (tools/bench-jobs.sh).
const maxJobs = 10000

// maxSeeds bounds selftest --seeds.
const maxSeeds = 1000

// maxJobRuns bounds --jobs × --trials: the trials of a contract are kept
// until the last one ends, history and all.
const maxJobRuns = 100_000

// Bound is the range a numeric flag accepts, checked before anything runs
// (exit 3, one line naming the flag and its bounds). Durations are in
// nanoseconds.
type Bound struct {
	Min, Max int64
	// Zero says what 0 means where 0 is accepted below Min ("": it is not).
	Zero     string
	Duration bool
	// Shard: the flag is "i/N" (--shard), N within Min and Max, i from 1 to
	// N; an empty value takes the whole.
	Shard bool
	// Why a bound is lower than the rest of durachk's, said with the error.
	Why string
}

func (b Bound) value(v int64) string {
	if b.Duration {
		return shortDuration(time.Duration(v))
	}
	return strconv.FormatInt(v, 10)
}

// shortDuration writes 168h and 5m where Go writes 168h0m0s and 5m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// String is the bound as the README writes it: "1 to 10000 (0: …)".
func (b Bound) String() string {
	if b.Shard {
		return fmt.Sprintf("i/N, N %d to %d, i 1 to N", b.Min, b.Max)
	}
	s := b.value(b.Min) + " to " + b.value(b.Max)
	if b.Zero != "" {
		s += " (0: " + b.Zero + ")"
	}
	return s
}

// Check returns the configuration error of flag set to v, or nil.
func (b Bound) Check(flag string, v int64) error {
	if v == 0 && b.Zero != "" || v >= b.Min && v <= b.Max {
		return nil
	}
	if b.Why != "" {
		return ConfigError(fmt.Errorf("--%s %s: want %s: %s", flag, b.value(v), b, b.Why))
	}
	return ConfigError(fmt.Errorf("--%s %s: want %s", flag, b.value(v), b))
}

var jobsBound = Bound{Min: 1, Max: maxJobs, Zero: "each contract's default, 24"}

// Bounds are the bounds of every numeric flag, by command and flag. --seed
// (every command) takes any integer from 0 to 2^64-1, which its parser
// enforces. README's "Bounds" table lists them; a test checks that every
// numeric flag is here and in the README, and refused outside its bounds.
var Bounds = map[string]map[string]Bound{
	"run": {
		"jobs":     jobsBound,
		"trials":   {Min: 1, Max: 1000},
		"parallel": {Min: 1, Max: 64, Zero: "the default, 8"},
	},
	"plan": {"jobs": jobsBound},
	"atlas": {
		"trials":   {Min: 1, Max: 1000},
		"parallel": {Min: 1, Max: 64, Zero: "the default, 8"},
	},
	// A sabotaged run may never drain: it goes on to its limit, which grows
	// with the workload (retry.bounded's unbounded-retry at 10000 jobs records
	// 4.5 million operations: 58 s, 2.5 GB). 1000 jobs show every sabotage
	// caught in 3 s and 100 MB.
	"selftest": {
		"jobs": {Min: 1, Max: 1000, Zero: "each contract's default, 24",
			Why: "a sabotaged run may never drain and goes on to its limit, which grows with the workload"},
		"seeds": {Min: 1, Max: maxSeeds},
	},
	"explore": {
		"duration": {Min: int64(time.Second), Max: int64(7 * 24 * time.Hour), Zero: "until --rounds", Duration: true},
		"rounds":   {Min: 1, Max: 1_000_000, Zero: "until --duration"},
		// A round has 30 minutes of scenario time (explore's roundLimit): with
		// 2 % of slow jobs (25 s) on as few as 3 workers, 6000 jobs left 1 of
		// 48 rounds undrained (unknown), 5000 none.
		"jobs":       {Min: 1, Max: 5000, Why: "a round drains about that many in its 30 minutes of scenario time"},
		"max-faults": {Min: 1, Max: 100},
		// One job every 0.5 to 3.5 ms at 20: past what one producer sends.
		"pace":         {Min: 1, Max: 20, Zero: "1, the drawn pace: a job every 10 to 70 ms"},
		"parallel":     {Min: 1, Max: 64, Zero: "one per CPU on mem, 1 on real targets"},
		"shard":        shardBound,
		"shrink-tries": {Min: 1, Max: 100_000},
		"shrink-time":  {Min: int64(time.Second), Max: int64(24 * time.Hour), Duration: true},
		"shrink-k":     {Min: 1, Max: 100, Zero: "--shrink-n (every run)"},
		"shrink-n":     {Min: 1, Max: 100, Zero: "1 on mem, 3 on real targets"},
		"replay":       {Min: 1, Max: 1000, Zero: "10", Why: "each replay is a whole run of the shrunk plan"},
		"progress":     {Min: int64(100 * time.Millisecond), Max: int64(time.Hour), Duration: true},
	},
}

// shardBound bounds explore --shard i/N: far more shards than any CI matrix
// or Indexed Job runs at once.
var shardBound = Bound{Min: 1, Max: 1000, Shard: true}

// ParseShard reads --shard "i/N" (1 ≤ i ≤ N, N within its bound); "" is
// the whole seed space (the zero Shard).
func ParseShard(s string) (explore.Shard, error) {
	if s == "" {
		return explore.Shard{}, nil
	}
	bad := func() (explore.Shard, error) {
		return explore.Shard{}, ConfigError(fmt.Errorf("--shard %q: want %s", reports.Clip(s), shardBound))
	}
	is, ns, ok := strings.Cut(s, "/")
	if !ok {
		return bad()
	}
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if err1 != nil || err2 != nil || strings.HasPrefix(is, "+") || strings.HasPrefix(ns, "+") ||
		int64(n) < shardBound.Min || int64(n) > shardBound.Max || i < 1 || i > n {
		return bad()
	}
	return explore.Shard{Index: i, Of: n}, nil
}

// CheckFlag checks a numeric flag of a command, as parsed, against Bounds
// (main calls it for every numeric flag before the command runs). A flag
// without a bound is durachk's bug; the tests look for one.
func CheckFlag(command, flag string, v int64) error {
	b, ok := Bounds[command][flag]
	if !ok {
		return ConfigError(fmt.Errorf("--%s of %s has no bound (durachk's bug: add it to cli.Bounds)", flag, command))
	}
	return b.Check(flag, v)
}

// checkBounds checks the named values of a command's options against Bounds,
// in the order of their names.
func checkBounds(command string, values map[string]int64) error {
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if err := CheckFlag(command, name, values[name]); err != nil {
			return err
		}
	}
	return nil
}

// checkRunFlags checks the numeric options of durachk run. Zero values are
// the defaults of the Go API (Trials 0 is one trial); the flag itself
// refuses --trials 0 (CheckFlag).
func checkRunFlags(o *RunOptions) error {
	trials := cmp.Or(o.Trials, 1)
	if err := checkBounds("run", map[string]int64{"jobs": int64(o.Jobs), "trials": int64(trials), "parallel": int64(o.Parallel)}); err != nil {
		return err
	}
	if jobs := cmp.Or(o.Jobs, contracts.DefaultJobs); jobs*trials > maxJobRuns {
		return ConfigError(fmt.Errorf("--jobs %d × --trials %d: want at most %d jobs over a contract's trials (the run keeps every trial until the last one ends)", jobs, trials, maxJobRuns))
	}
	return nil
}

// checkExploreFlags checks the numeric options of durachk explore (zero
// values: the explore package's defaults).
func checkExploreFlags(o ExploreOptions) error {
	sh := o.Shrink
	if err := checkBounds("explore", map[string]int64{"duration": int64(o.Duration), "rounds": int64(o.Rounds),
		"jobs": int64(cmp.Or(o.Jobs, explore.DefaultJobs)), "max-faults": int64(cmp.Or(o.MaxFaults, explore.DefaultMaxFaults)), "pace": int64(o.Pace),
		"parallel": int64(o.Parallel), "shrink-tries": int64(cmp.Or(sh.Tries, explore.DefaultShrinkTries)),
		"shrink-time": int64(cmp.Or(sh.Time, explore.DefaultShrinkTime)), "shrink-k": int64(cmp.Or(sh.K, explore.DefaultK)),
		"shrink-n": int64(sh.N), "replay": int64(cmp.Or(sh.Replay, explore.DefaultReplay)),
		"progress": int64(cmp.Or(o.Every, explore.DefaultEvery))}); err != nil {
		return err
	}
	if _, err := ParseShard(o.Shard); err != nil {
		return err
	}
	if o.Duration == 0 && o.Rounds == 0 {
		return ConfigError(fmt.Errorf("explore: give --duration (such as 5m) or --rounds"))
	}
	if sh.N > 0 && cmp.Or(sh.K, explore.DefaultK) > sh.N {
		return ConfigError(fmt.Errorf("--shrink-k %d: want at most --shrink-n %d", sh.K, sh.N))
	}
	return checkOut(o.Out)
}

// checkOut refuses an --out that cannot be a directory (an existing file,
// or below one) before the run says anything.
func checkOut(dir string) error {
	if dir == "" {
		return ConfigError(fmt.Errorf("--out: empty: name the directory for result.json and the reports"))
	}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		switch {
		case err == nil && !st.IsDir():
			if p == filepath.Clean(dir) {
				return ConfigError(fmt.Errorf("--out %s: is a file, not a directory", dir))
			}
			return ConfigError(fmt.Errorf("--out %s: %s is a file, not a directory", dir, p))
		case err == nil:
			return nil
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return ConfigError(fmt.Errorf("--out %s: %w", dir, err))
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// noRepeats refuses a flag value given twice (--contract X --contract X
// would run X twice and write two rows).
func noRepeats(flag string, values []string) error {
	seen := map[string]bool{}
	for _, v := range values {
		if seen[v] {
			return ConfigError(fmt.Errorf("--%s %s: given twice", flag, reports.Clip(v)))
		}
		seen[v] = true
	}
	return nil
}

// checkRun validates what a run was asked before it connects to any broker:
// --out, --jobs, the selection and the baseline, which must name only targets
// and contracts the run measures (a strict baseline: anything else is a
// configuration error, exit 3, not a regression). It returns the selection
// and the baseline (nil without --baseline).
func checkRun(o *RunOptions) ([]*contracts.Contract, reports.Baseline, error) {
	if err := checkOut(o.Out); err != nil {
		return nil, nil, err
	}
	if err := checkRunFlags(o); err != nil {
		return nil, nil, err
	}
	if err := noRepeats("contract", o.Contracts); err != nil {
		return nil, nil, err
	}
	if err := noRepeats("scenario", o.Scenarios); err != nil {
		return nil, nil, err
	}
	cs, err := selection(*o)
	if err != nil {
		return nil, nil, err
	}
	pcs, infos, err := loadPlans(o.Plans)
	if err != nil {
		return nil, nil, err
	}
	cs, o.plans = append(cs, pcs...), infos
	for _, c := range pcs {
		if pi, trials := infos[c.ID], cmp.Or(o.Trials, 1); pi.jobs*trials > maxJobRuns {
			return nil, nil, ConfigError(fmt.Errorf("--plan %s: %d jobs × --trials %d: want at most %d jobs over a contract's trials (the run keeps every trial until the last one ends)",
				pi.path, pi.jobs, trials, maxJobRuns))
		}
	}
	seen := map[string]bool{}
	for _, c := range cs {
		if seen[c.ID] {
			return nil, nil, ConfigError(fmt.Errorf("%s: selected twice (--scenario all holds every seed scenario)", c.ID))
		}
		seen[c.ID] = true
	}
	if len(pcs) == len(cs) && len(pcs) > 0 && !o.SeedSet {
		o.Seed = infos[pcs[0].ID].seed // the document's seed: the plan's
	}
	if o.Baseline == "" {
		if o.UpdateBaseline {
			return nil, nil, ConfigError(fmt.Errorf("--update-baseline: give the baseline file to update with --baseline"))
		}
		return cs, nil, nil
	}
	if o.UpdateBaseline {
		if _, err := os.Stat(o.Baseline); errors.Is(err, fs.ErrNotExist) {
			// A first baseline: this run's verdicts, once it is complete.
			if st, err := os.Stat(filepath.Dir(o.Baseline)); err != nil || !st.IsDir() {
				return nil, nil, ConfigError(fmt.Errorf("--update-baseline %s: its directory %s does not exist", o.Baseline, filepath.Dir(o.Baseline)))
			}
			if _, err := targetNames(o); err != nil {
				return nil, nil, err
			}
			o.createBaseline = true
			return cs, nil, nil
		}
	}
	if o.UpdateBaseline && reports.IsResultBaseline(o.Baseline) {
		return nil, nil, ConfigError(fmt.Errorf("--update-baseline: %s is a result.json (a run's record, not rewritten): give a baseline file ({\"target\": {\"contract\": \"verdict\"}})", o.Baseline))
	}
	bl, err := reports.ReadBaseline(o.Baseline)
	if err != nil {
		return nil, nil, ConfigError(err)
	}
	names, err := targetNames(o)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	if err := bl.Check(names, ids); err != nil {
		return nil, nil, ConfigError(fmt.Errorf("%s: %w", o.Baseline, err))
	}
	return cs, bl, nil
}

func checkJobs(command string, n int) error {
	return checkBounds(command, map[string]int64{"jobs": int64(n)})
}

// targetNames returns the names the run's targets will have, from their specs
// alone (no broker is reached).
func targetNames(o *RunOptions) ([]string, error) {
	ss, _, err := specs(o)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, spec := range ss {
		name, err := specName(spec)
		if err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// specName checks a target spec as far as it can without reaching the
// broker (its kind, URL and knobs) and returns the target's name.
func specName(spec string) (string, error) {
	if isMem(spec) {
		t, err := resolveMem(spec)
		if err != nil {
			return "", err
		}
		return t.Name(), nil
	}
	s, err := targets.Parse(spec)
	if err != nil {
		return "", ConfigError(err)
	}
	return s.Name, nil
}

func isMem(spec string) bool { return spec == "mem" || strings.HasPrefix(spec, "mem?") }

// checkSpecs refuses an empty target (`--target ”`, `url: ${UNSET}` expanded
// to nothing): it would silently mean the embedded target.
func checkSpecs(ss []string) error {
	for i, s := range ss {
		if strings.TrimSpace(s) == "" {
			return ConfigError(fmt.Errorf("target %d is empty: want mem or a broker URL", i+1))
		}
	}
	return nil
}
