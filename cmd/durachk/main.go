// Command durachk checks what a broker configuration really guarantees to a
// durable pipeline when processes die and the network breaks.
package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/durachk/durachk/explore"
	"github.com/durachk/durachk/internal/cli"
	"github.com/durachk/durachk/internal/interrupt"
	"github.com/durachk/durachk/internal/kafkaserver"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/natsserver"
	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/redact"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/reports"
)

func main() {
	err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "durachk:", redact.Line(err.Error()))
	}
	os.Exit(cli.Code(err))
}

// emptyFlags refuses a flag given with an empty value (`--target ”`, often an
// unset variable): it would silently mean the default.
func emptyFlags(cmd *cobra.Command) error {
	for _, name := range []string{"target", "config", "out", "baseline", "contract", "scenario", "format", "output", "plan", "sabotage", "property", "faults", "result", "final", "shard", "profile", "render"} {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		empty := f.Value.String() == ""
		if sv, ok := f.Value.(interface{ GetSlice() []string }); ok {
			vs := sv.GetSlice()
			empty = len(vs) == 0 || slices.Contains(vs, "")
		}
		if empty {
			return cli.ConfigError(fmt.Errorf("--%s: empty value (an unset variable?): give a value or leave the flag out", name))
		}
	}
	return nil
}

// numericFlags checks every numeric flag of cmd, as parsed, against its
// documented bounds (cli.Bounds) before the command runs. Seeds (uint64) take
// every value their parser accepts.
func numericFlags(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err != nil {
			return
		}
		var v int64
		switch f.Value.Type() {
		case "int":
			v, _ = strconv.ParseInt(f.Value.String(), 10, 64)
		case "duration":
			d, _ := time.ParseDuration(f.Value.String())
			v = int64(d)
		default:
			return
		}
		err = cli.CheckFlag(cmd.Name(), f.Name, v)
	})
	return err
}

// commandLine is the command as typed, quoted where needed, credentials redacted.
func commandLine(args []string) string {
	parts := []string{"durachk"}
	for _, a := range args {
		a = reports.RedactCommand(a)
		if a == "" || strings.ContainsAny(a, " \t'\"&?*$;|<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func run(args []string) error {
	// The first SIGINT or SIGTERM ends the work in flight and writes what the
	// command has; a second one ends durachk at once (what it leaves,
	// `durachk cleanup` removes). Listened to from the interrupt package's
	// init: a signal during the other packages' init is not lost.
	ctx, stop := interrupt.Context()
	defer stop()
	root := &cobra.Command{
		Use:           "durachk",
		Short:         "Jepsen for your queue configuration",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.ConfigError(err) })
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := emptyFlags(cmd); err != nil {
			return err
		}
		return numericFlags(cmd)
	}
	build := reports.ReadBuild()
	root.Version = build.String()
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetArgs(args)
	command := commandLine(args)

	targetFlags := func(cmd *cobra.Command, o *cli.RunOptions) {
		cmd.Flags().StringArrayVar(&o.Targets, "target", nil, "target: mem (default) or a broker URL with its knobs as query parameters; repeatable")
		cmd.Flags().StringVarP(&o.Config, "config", "c", "", "durachk.yaml with seed, targets and store")
	}

	var o cli.RunOptions
	runCmd := &cobra.Command{
		Use:   "run",
		Short: "Run the contract catalogue (or --contract / --scenario) against targets; write result.json, junit.xml, summary.md, report.html",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Command = command
			o.SeedSet = cmd.Flags().Changed("seed")
			return cli.Run(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	targetFlags(runCmd, &o)
	f := runCmd.Flags()
	f.StringArrayVar(&o.Contracts, "contract", nil, "contract id to run; repeatable (default: the whole catalogue)")
	f.StringArrayVar(&o.Scenarios, "scenario", nil, "seed scenario to run (or all); repeatable")
	f.StringArrayVar(&o.Plans, "plan", nil, "plan file (YAML or JSON, docs/plans.md) to run as contract plan/<file name>, with its own seed unless --seed; repeatable")
	f.Uint64Var(&o.Seed, "seed", 1, "seed for workload, fault plan and every random choice; without it, the config file's seed if it sets one")
	f.IntVar(&o.Jobs, "jobs", 0, "jobs per contract (default 24)")
	f.IntVar(&o.Trials, "trials", 1, "runs of each contract, with successive seeds; a violation in any trial is the verdict")
	f.IntVar(&o.Parallel, "parallel", 0, "contracts run at a time (default 8, fewer where their Postgres connections would pass 48; 1: one after the other)")
	f.StringVar(&o.Out, "out", "durachk-out", "directory for result.json, histories/, junit.xml, summary.md, report.html")
	f.StringVar(&o.Baseline, "baseline", "", "expected verdicts (target → contract → verdict, or a previous result.json): exit 0 when they match, 1 on a difference (a regression, or an improvement until the baseline expects it)")
	f.BoolVar(&o.UpdateBaseline, "update-baseline", false, "after a complete run, rewrite the --baseline file to expect every verdict that differed, or create it from the run if it does not exist (exit 0); never from a partial run")
	f.StringSliceVar(&o.Formats, "format", nil, "reports to write besides result.json: json, junit, md, html (default all)")

	var so cli.RunOptions
	selftestCmd := &cobra.Command{
		Use:   "selftest",
		Short: "Run every contract against its sabotage and show that each is caught",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			so.SeedSet = cmd.Flags().Changed("seed")
			return cli.Selftest(ctx, so, cmd.OutOrStdout())
		},
	}
	targetFlags(selftestCmd, &so)
	sf := selftestCmd.Flags()
	sf.StringArrayVar(&so.Contracts, "contract", nil, "contract id; repeatable (default: all)")
	sf.Uint64Var(&so.Seed, "seed", 1, "seed (the first, with --seeds)")
	sf.IntVar(&so.Seeds, "seeds", 1, "seeds each sabotage runs on, successive from --seed: every one must catch it")
	sf.IntVar(&so.Jobs, "jobs", 0, "jobs per contract (default 24)")

	var lo cli.RunOptions
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List the contracts and seed scenarios, their claims and which targets support them",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.List(ctx, cmd.OutOrStdout(), lo)
		},
	}
	targetFlags(listCmd, &lo)
	listCmd.Flags().StringVar(&lo.Format, "format", "text", "text or json")

	var reportFormat, reportOut string
	reportCmd := &cobra.Command{
		Use:   "report result.json",
		Short: "Re-render a past run (also a partial one) as html, junit, md, json or text",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cli.ConfigError(fmt.Errorf("report: name one result.json"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return cli.Report(args[0], reportFormat, reportOut, cmd.OutOrStdout())
		},
	}
	reportCmd.Flags().StringVar(&reportFormat, "format", "md", "html, junit, md, json or text")
	reportCmd.Flags().StringVarP(&reportOut, "output", "o", "", "file to write (default: stdout)")

	var compareFormat, compareOut string
	compareCmd := &cobra.Command{
		Use:   "compare a/result.json b/result.json ...",
		Short: "The matrix of several runs: contracts as rows, targets and configurations as columns",
		RunE: func(cmd *cobra.Command, args []string) error {
			return cli.Compare(args, compareFormat, compareOut, cmd.OutOrStdout())
		},
	}
	compareCmd.Flags().StringVar(&compareFormat, "format", "text", "text, md, html or json")
	compareCmd.Flags().StringVarP(&compareOut, "output", "o", "", "file to write (default: stdout)")

	var do cli.RunOptions
	doctorCmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that each target is reachable and print its capabilities",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Doctor(ctx, do, cmd.OutOrStdout())
		},
	}
	targetFlags(doctorCmd, &do)
	doctorCmd.Flags().StringVar(&do.Format, "format", "text", "text or json")

	var co cli.RunOptions
	var cleanupRuns []string
	cleanupCmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove what killed runs left behind on each target and on this machine (never anything of a live run)",
		Long: "Remove what runs killed with SIGKILL left behind: their queues, keys and schemas on each\n" +
			"target, their effect-store schemas, and on this machine their temporary directories,\n" +
			"cgroups and orphaned broker processes. A run that is still going holds its run lock\n" +
			"(in the effect store, and on its directory): nothing of it is touched. One line per\n" +
			"thing removed.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Cleanup(ctx, co, cleanupRuns, cmd.OutOrStdout())
		},
	}
	targetFlags(cleanupCmd, &co)
	cleanupCmd.Flags().StringArrayVar(&cleanupRuns, "run", nil, "clean up only this run id; repeatable")

	var workerConfig string
	workerCmd := &cobra.Command{
		Use:    "worker",
		Short:  "Run one child process of a real-target run (started by durachk itself)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runner.Child(ctx, workerConfig)
		},
	}
	workerCmd.Flags().StringVar(&workerConfig, "config", "-", "child config: - for stdin (how durachk hands it over), or a file")

	watchdogCmd := &cobra.Command{
		Use:    "watchdog",
		Short:  "Kill what a durachk process started once it is gone (started by durachk itself)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return reaper.Watchdog()
		},
	}

	lazyfsCmd := &cobra.Command{
		Use:                "lazyfs MOUNTPOINT DIR [journal] [ignore-fsync]",
		Short:              "Serve the lazy file system of a power-loss run (started by durachk itself)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return lazyfs.ServeRemote(args, os.Stdin, cmd.OutOrStdout())
		},
	}
	var natsDir string
	natsServerCmd := &cobra.Command{
		Use:    natsserver.Command,
		Short:  "Serve a private NATS JetStream server (started by durachk itself; config on stdin)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return natsserver.Main(natsDir, os.Stdin)
		},
	}
	natsServerCmd.Flags().StringVar(&natsDir, "dir", "", "the server's directory (store and log)")
	var kafkaDir string
	kafkaServerCmd := &cobra.Command{
		Use:    kafkaserver.Command,
		Short:  "Serve a private Kafka-protocol broker, kfake (started by durachk itself; config on stdin)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return kafkaserver.Main(kafkaDir, os.Stdin)
		},
	}
	kafkaServerCmd.Flags().StringVar(&kafkaDir, "dir", "", "the broker's directory (its data directory)")

	var ao cli.AtlasOptions
	atlasCmd := &cobra.Command{
		Use:   "atlas -c atlas/profiles.yaml [--trials N] [--out DIR] [--contract ID ...] | atlas --render DIR",
		Short: "Run every profile of a profiles file and write the guarantees atlas (atlas.md, atlas.html): contracts × configurations",
		Long: "Run each profile of the profiles file (atlas/profiles.yaml) as durachk run would, into DIR/<profile>/,\n" +
			"then write DIR/atlas.md and DIR/atlas.html from the results. A profile whose complete result is already in\n" +
			"DIR (same seed, trials and contracts) is kept: an interrupted atlas continues where it stopped.\n" +
			"--render DIR re-renders DIR's atlas from its files without running anything.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ao.Command = command
			ao.SeedSet = cmd.Flags().Changed("seed")
			return cli.Atlas(ctx, ao, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	af := atlasCmd.Flags()
	af.StringVarP(&ao.Profiles, "config", "c", "", "the profiles file (atlas/profiles.yaml)")
	af.StringArrayVar(&ao.Contracts, "contract", nil, "run only this contract of each profile's; repeatable")
	af.StringArrayVar(&ao.Only, "profile", nil, "run only this profile (the others keep what DIR holds); repeatable")
	af.Uint64Var(&ao.Seed, "seed", 1, "seed of every profile's run; without it, the profiles file's")
	af.IntVar(&ao.Trials, "trials", 1, "runs of each contract on each profile, with successive seeds")
	af.IntVar(&ao.Parallel, "parallel", 0, "contracts of a profile run at a time (as durachk run's --parallel; default 8)")
	af.StringVar(&ao.Out, "out", "atlas-out", "directory for atlas.json, one directory per profile, atlas.md and atlas.html")
	af.StringVar(&ao.Render, "render", "", "re-render DIR/atlas.md and DIR/atlas.html from DIR/atlas.json and the profiles' result.json; runs nothing")

	var po cli.PlanOptions
	planCmd := &cobra.Command{
		Use:   "plan --contract ID | --scenario NAME [--seed N] [--jobs N] [-o FILE]",
		Short: "Write out a contract's or seed scenario's workload and fault schedule as a plan file (docs/plans.md)",
		Long: "Write out the workload and fault schedule a catalogue contract or seed scenario builds from\n" +
			"the seed, as a plan (YAML; JSON for an -o path ending in .json). Edit it and run it with\n" +
			"durachk run --plan FILE.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Plan(po, cmd.OutOrStdout())
		},
	}
	pf := planCmd.Flags()
	pf.StringVar(&po.Contract, "contract", "", "contract id")
	pf.StringVar(&po.Scenario, "scenario", "", "seed scenario name")
	pf.Uint64Var(&po.Seed, "seed", 1, "seed the scenario is built from, and that the plan runs with")
	pf.IntVar(&po.Jobs, "jobs", 0, "jobs (default 24)")
	pf.StringVarP(&po.Output, "output", "o", "", "file to write (default: stdout)")

	var eo cli.ExploreOptions
	exploreCmd := &cobra.Command{
		Use:   "explore --target URL --duration 5m [--seed N]",
		Short: "Run seeded random workloads while a nemesis draws faults of every kind the target supports; shrink what fails",
		Long: "Explore a target: round after round, a mixed workload (normal, flaky, stubborn, permanent, poison and\n" +
			"slow jobs, poison events, deadlines, jobs sent twice or resent with another payload, tenants sharing\n" +
			"document ids, FIFO groups, an operator) while a seeded nemesis draws 1 to --max-faults faults per round\n" +
			"from every fault kind the target supports, at random overlapping times. Every round is judged by every\n" +
			"property of the checker. A violation ends the exploration (unless --keep-going) and is shrunk: delta\n" +
			"debugging over the round's plan (fewer faults, fewer and plainer jobs, shorter and earlier windows,\n" +
			"fewer workers), each candidate run on the same target, within --shrink-tries and --shrink-time; a\n" +
			"candidate fails when it raises the same property in --shrink-k of --shrink-n runs (default 1 of 1 on\n" +
			"the embedded target, which is deterministic, 3 of 3 on real ones); on a real target the plan the search\n" +
			"ends on is kept only once it raised the property in 80% of --replay runs (8 of 10), else the shrink goes\n" +
			"back to the newest plan it took that does (the round's own, if none does). A round that raised several\n" +
			"properties is shrunk for the one it raised most often. The plan kept, with what its violation needs at\n" +
			"risk (at_risk), is run --replay more times and the finding states the rate over the replays that put\n" +
			"something at risk (\"reproduces 9 of 10 on redis 7.0.15\"). --duration cuts the rounds in flight at\n" +
			"its end; the shrink comes after, within --shrink-time. Writes result.json, the reports, original.yaml\n" +
			"(the round's plan) and shrunk.yaml into --out; rerun either with durachk run --plan.\n" +
			"Progress (jobs/s, faults applied by kind, violations so far) goes to stderr.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			eo.Command = command
			return cli.Explore(ctx, eo, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	ef := exploreCmd.Flags()
	ef.StringVar(&eo.Target, "target", "mem", "target: mem or a broker URL with its knobs")
	ef.Uint64Var(&eo.Seed, "seed", 1, "seed of the exploration: round i runs with seed N*1000000+i")
	ef.DurationVar(&eo.Duration, "duration", 0, "wall time to explore for, such as 5m: no round starts after it and the rounds in flight then are cut (a finding's shrink comes after, within --shrink-time)")
	ef.IntVar(&eo.Rounds, "rounds", 0, "stop after this many rounds (0: until --duration)")
	ef.IntVar(&eo.Jobs, "jobs", explore.DefaultJobs, "jobs per round")
	ef.IntVar(&eo.Pace, "pace", 0, "the producer sends this many times as fast as a round draws (default 1: a job every 10 to 70 ms)")
	ef.IntVar(&eo.MaxFaults, "max-faults", explore.DefaultMaxFaults, "most faults a round draws (at least one)")
	ef.StringSliceVar(&eo.Faults, "faults", nil, "fault kinds to draw, comma-separated (default: every kind the target supports)")
	ef.IntVar(&eo.Parallel, "parallel", 0, "rounds at a time (default: one per CPU on mem, 1 on real targets)")
	ef.StringVar(&eo.Shard, "shard", "", "i/N: explore only rounds i-1, i-1+N, i-1+2N, ... of the seed space (the shards 1/N..N/N together run what one exploration would; durachk merge adds them up)")
	ef.StringArrayVar(&eo.Properties, "property", nil, "only a violation of this property is a finding (others are counted); repeatable")
	ef.StringVar(&eo.Sabotage, "sabotage", "", "break every round's pipeline like this catalogue sabotage (a negative control of explore)")
	ef.BoolVar(&eo.KeepGoing, "keep-going", false, "explore to the end after a finding, counting violations")
	ef.BoolVar(&eo.NoShrink, "no-shrink", false, "do not shrink a finding")
	ef.IntVar(&eo.Shrink.Tries, "shrink-tries", explore.DefaultShrinkTries, "most candidate plans a shrink runs")
	ef.DurationVar(&eo.Shrink.Time, "shrink-time", explore.DefaultShrinkTime, "most wall time a shrink takes")
	ef.IntVar(&eo.Shrink.K, "shrink-k", 0, "a candidate fails when it raises the property in K ... (default: N)")
	ef.IntVar(&eo.Shrink.N, "shrink-n", 0, "... of N runs (default 1 on mem, 3 on real targets)")
	ef.IntVar(&eo.Shrink.Replay, "replay", explore.DefaultReplay, "runs of the shrunk plan whose rate the finding states (on a real target the plan kept first reproduced in 80% of as many)")
	ef.DurationVar(&eo.Every, "progress", explore.DefaultEvery, "interval of the progress lines on stderr")
	ef.StringVar(&eo.Out, "out", "durachk-out", "directory for result.json, the reports, original.yaml and shrunk.yaml")

	var ko cli.CheckOptions
	var fifo, fencedAck, relayRan, approx bool
	checkCmd := &cobra.Command{
		Use:   "check history.jsonl [--final final.json] | check --result DIR/result.json",
		Short: "Judge a recorded history (and the final state of broker and store) with the checker, or every verdict of a run again",
		Long: "Judge a recorded history with the checker: the verdict, each property's answer and every\n" +
			"violation with its witness. The formats are in docs/checker.md. Without --final the\n" +
			"properties that rest on the final state are unknown; with a final-state file a run wrote\n" +
			"(histories/*.final.json) the verdict is the run's engine's, for the contract it names.\n" +
			"--result judges every verdict of a run again from the histories and final states beside\n" +
			"its result.json and says whether each is the run's. Exit codes as for run (1 also when a\n" +
			"verdict judged again differs from the run's).",
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("result") {
				if len(args) > 0 {
					return cli.ConfigError(fmt.Errorf("check --result: takes no history argument, got %d", len(args)))
				}
				return nil
			}
			return exactlyOneHistory(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				ko.History = args[0]
			}
			for name, dst := range map[string]**bool{"fifo": &ko.FIFO, "fenced-ack": &ko.FencedAck, "relay-ran": &ko.RelayRan, "approximate-leases": &ko.ApproximateLeases} {
				if cmd.Flags().Changed(name) {
					v, _ := cmd.Flags().GetBool(name)
					*dst = &v
				}
			}
			return cli.Check(ko, cmd.OutOrStdout())
		},
	}
	kf := checkCmd.Flags()
	kf.StringVar(&ko.Final, "final", "", "final state of store and broker (JSON, docs/checker.md), or a final-state file a run wrote")
	kf.StringVar(&ko.Result, "result", "", "a run's result.json: judge every verdict again from the files beside it")
	kf.StringVar(&ko.Format, "format", "text", "text or json")
	kf.BoolVar(&fifo, "fifo", false, "the target claims FIFO within a group (default: the final-state file's)")
	kf.BoolVar(&fencedAck, "fenced-ack", false, "the broker claims to reject stale acks")
	kf.BoolVar(&relayRan, "relay-ran", false, "an outbox relay ran: every event must be applied")
	kf.BoolVar(&approx, "approximate-leases", false, "the broker's leases are approximate")
	kf.StringArrayVar(&ko.Canaries, "canary", nil, "a string planted in payloads that must never reach a dead-letter record; repeatable")

	var mo cli.MergeOptions
	mergeCmd := &cobra.Command{
		Use:   "merge a/result.json b/result.json ... [--out DIR]",
		Short: "Merge the shards of one exploration, --trials runs or the runs of one gate on several runners into one result and report",
		Long: "Merge result.json files (or the directories holding them) into one result.json, its histories\n" +
			"and every report in --out. The shards of one exploration (explore --shard i/N) are added up:\n" +
			"rounds, jobs, faults and violations counted, the first round that raised a finding in any shard,\n" +
			"one shrunk plan per property (the earliest round's). Runs of one gate (each target × contract\n" +
			"once) are put together; a contract in several runs has their trials as its trials. Inputs that do\n" +
			"not belong together (another durachk version, another configuration of a target, an exploration\n" +
			"with other options or that drew from other fault kinds, the same shard or seed twice) are exit 3.\n" +
			"Exit codes as for run.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cli.ConfigError(fmt.Errorf("merge: name the result.json files to merge"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			mo.Inputs, mo.Command = args, command
			return cli.Merge(mo, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	mergeCmd.Flags().StringVar(&mo.Out, "out", "durachk-out", "directory for the merged result.json, histories/, the reports and the plans")

	var ro cli.ReplayOptions
	replayCmd := &cobra.Command{
		Use:   "replay result.json",
		Short: "Re-run a past run's results with their seeds and say which reproduced",
		Args:  exactlyOne,
		RunE: func(cmd *cobra.Command, args []string) error {
			ro.Result = args[0]
			return cli.Replay(ctx, ro, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	replayCmd.Flags().StringArrayVar(&ro.Contracts, "contract", nil, "replay only this contract; repeatable")
	replayCmd.Flags().StringArrayVar(&ro.Targets, "target", nil, "URL (with credentials) of a real target of the run, matched by its name; repeatable")

	versionCmd := &cobra.Command{
		Use:   "version",
		Short: "Print durachk's module version, VCS revision and Go version (same as --version)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), build.String())
			return nil
		},
	}

	root.AddCommand(versionCmd, runCmd, atlasCmd, planCmd, exploreCmd, selftestCmd, listCmd, reportCmd, compareCmd, mergeCmd, doctorCmd, cleanupCmd, replayCmd, checkCmd, workerCmd, watchdogCmd, natsServerCmd, kafkaServerCmd, lazyfsCmd)
	document(root)
	if captureRoot != nil {
		captureRoot(root)
	}
	err := root.Execute()
	var ee *cli.ExitError
	if err != nil && !errors.As(err, &ee) {
		return cli.ConfigError(err) // unknown command, bad flag: exit 3
	}
	return err
}

// captureRoot, if set, is handed the command tree before it runs (tests).
var captureRoot func(*cobra.Command)

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return cli.ConfigError(fmt.Errorf("unexpected argument %q", args[0]))
	}
	return nil
}

func exactlyOne(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return cli.ConfigError(fmt.Errorf("want exactly one result.json, got %d arguments", len(args)))
	}
	return nil
}

func exactlyOneHistory(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return cli.ConfigError(fmt.Errorf("check: name one history file, got %d arguments", len(args)))
	}
	return nil
}
