// Command durachk checks what a broker configuration really guarantees to a
// durable pipeline when processes die and the network breaks.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/durachk/durachk/internal/cli"
	"github.com/durachk/durachk/internal/lazyfs"
	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/runner"
	"github.com/durachk/durachk/reports"
)

func main() {
	err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "durachk:", err)
	}
	os.Exit(cli.Code(err))
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "durachk",
		Short:         "Jepsen for your queue configuration",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.ConfigError(err) })
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
	f.Uint64Var(&o.Seed, "seed", 1, "seed for workload, fault plan and every random choice (default 1, or the config file's)")
	f.IntVar(&o.Jobs, "jobs", 0, "jobs per contract (default 24)")
	f.StringVar(&o.Out, "out", "durachk-out", "directory for result.json, histories/, junit.xml, summary.md, report.html")
	f.StringVar(&o.Baseline, "baseline", "", "expected verdicts (target → contract → verdict, or a previous result.json): exit 0 when they match, 1 on a difference")
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
	sf.Uint64Var(&so.Seed, "seed", 1, "seed")
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

	var reportFormat, reportOut string
	reportCmd := &cobra.Command{
		Use:   "report result.json",
		Short: "Re-render a past run as html, junit, md or json",
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
	reportCmd.Flags().StringVar(&reportFormat, "format", "md", "html, junit, md or json")
	reportCmd.Flags().StringVarP(&reportOut, "output", "o", "", "file to write (default: stdout)")

	var compareFormat, compareOut string
	compareCmd := &cobra.Command{
		Use:   "compare a/result.json b/result.json ...",
		Short: "The matrix of several runs: contracts as rows, targets and configurations as columns",
		RunE: func(cmd *cobra.Command, args []string) error {
			return cli.Compare(args, compareFormat, compareOut, cmd.OutOrStdout())
		},
	}
	compareCmd.Flags().StringVar(&compareFormat, "format", "text", "text, md or html")
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

	root.AddCommand(runCmd, selftestCmd, listCmd, reportCmd, compareCmd, doctorCmd, cleanupCmd, replayCmd, workerCmd, watchdogCmd, lazyfsCmd)
	err := root.Execute()
	var ee *cli.ExitError
	if err != nil && !errors.As(err, &ee) {
		return cli.ConfigError(err) // unknown command, bad flag: exit 3
	}
	return err
}

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
