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
	"github.com/durachk/durachk/internal/runner"
)

func main() {
	err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "durachk:", err)
	}
	os.Exit(cli.Code(err))
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
	command := "durachk " + strings.Join(args, " ")

	var o cli.RunOptions
	runCmd := &cobra.Command{
		Use:   "run",
		Short: "Run the contract catalogue (or --contract / --scenario) against targets",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Command = command
			return cli.Run(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := runCmd.Flags()
	f.StringArrayVar(&o.Targets, "target", nil, "target: mem (default) or a broker URL; repeatable")
	f.StringArrayVar(&o.Contracts, "contract", nil, "contract id to run; repeatable (default: the whole catalogue)")
	f.StringArrayVar(&o.Scenarios, "scenario", nil, "seed scenario to run (or all); repeatable")
	f.Uint64Var(&o.Seed, "seed", 1, "seed for workload, fault plan and every random choice")
	f.IntVar(&o.Jobs, "jobs", 0, "jobs per contract (default 24)")
	f.StringVar(&o.Out, "out", "durachk-out", "directory for result.json and histories")

	var so cli.RunOptions
	selftestCmd := &cobra.Command{
		Use:   "selftest",
		Short: "Run every contract against its sabotage and show that each is caught",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.Selftest(ctx, so, cmd.OutOrStdout())
		},
	}
	sf := selftestCmd.Flags()
	sf.StringArrayVar(&so.Targets, "target", nil, "target: mem (default) or a broker URL; repeatable")
	sf.StringArrayVar(&so.Contracts, "contract", nil, "contract id; repeatable (default: all)")
	sf.Uint64Var(&so.Seed, "seed", 1, "seed")
	sf.IntVar(&so.Jobs, "jobs", 0, "jobs per contract (default 24)")

	var listTargets []string
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List the contracts and seed scenarios, their claims and which targets support them",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cli.List(ctx, cmd.OutOrStdout(), listTargets)
		},
	}
	listCmd.Flags().StringArrayVar(&listTargets, "target", nil, "target to check support on; repeatable")

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
	workerCmd.Flags().StringVar(&workerConfig, "config", "", "child config file")

	root.AddCommand(runCmd, selftestCmd, listCmd, workerCmd)
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
