package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/reaper"
	"github.com/durachk/durachk/internal/redact"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// Doctor checks that every target is reachable and prints what it declares:
// version, endpoint, fingerprint, capabilities, whether durachk can kill and
// restart a private instance, and which contracts will skip and why. An
// unreachable target is reported and makes the command fail (exit 3) after
// every target was checked.
func Doctor(ctx context.Context, o RunOptions, w io.Writer) error {
	if err := checkFormat("doctor", cmp.Or(o.Format, "text"), "text", "json"); err != nil {
		return err
	}
	ss, store, err := specs(&o)
	if err != nil {
		return err
	}
	if strings.EqualFold(o.Format, "json") {
		return doctorJSON(ctx, ss, store, w)
	}
	var failed []string
	for _, spec := range ss {
		t, err := resolve(ctx, spec, store, nil)
		if err != nil {
			secrets := append(reports.Secrets(spec), reports.Secrets(store)...)
			fmt.Fprintf(w, "%s: UNREACHABLE: %v\n\n", reports.Clip(reports.RedactURL(spec)), redact.Line(scrub(err.Error(), secrets)))
			var se *targets.StoreError
			if errors.As(err, &se) {
				failed = append(failed, "effect store "+reports.Clip(reports.RedactURL(se.URL)))
			} else {
				failed = append(failed, reports.Clip(reports.RedactURL(spec)))
			}
			continue
		}
		ti := t.info
		fmt.Fprintf(w, "%s: reachable\n", ti.Name)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  measured on\t%s\n  endpoint\t%s\n  fingerprint\t%s\n", ti.MeasuredOn, ti.Endpoint, ti.Fingerprint)
		if ti.URL != "" {
			fmt.Fprintf(tw, "  url\t%s\n", ti.URL)
		}
		c := ti.Capabilities
		fmt.Fprintf(tw, "  lease\t%s\n  lease extension\t%s\n  fencing token\t%s\n  fenced ack\t%v\n  delivery count\t%s\n  dead letter\t%s\n  delayed nack\t%s\n  FIFO\t%v\n  durable\t%v\n",
			c.Lease, c.LeaseExtension, c.Token, c.FencedAck, c.DeliveryCount, c.DeadLetter, c.DelayedNack, c.FIFO, c.Durable)
		fmt.Fprintf(tw, "  broker kill\t%s\n", brokerKill(t))
		if nf := nodeFaults(t); nf != "" {
			fmt.Fprintf(tw, "  node faults\t%s\n", nf)
		}
		fmt.Fprintf(tw, "  power loss\t%v\n", c.PowerLoss)
		if d := ti.Durability; d != nil {
			// What durability.ack and durability.power-loss will run on.
			line := "private " + d.Private
			if d.Server != "" && d.Server != d.Private {
				line += " (the target runs " + d.Server + ")"
			}
			fmt.Fprintf(tw, "  durability on\t%s\n", line)
			for _, st := range d.Settings {
				fmt.Fprintf(tw, "  durability\t%s\n", st.Describe())
			}
		}
		for _, n := range c.Notes {
			fmt.Fprintf(tw, "  note\t%s\n", n)
		}
		tw.Flush()
		var skips []string
		for _, ct := range contracts.Catalogue {
			if ct.Needs != nil {
				if why := ct.Needs(c); why != "" {
					skips = append(skips, ct.ID+" ("+why+")")
				}
			}
		}
		if len(skips) > 0 {
			fmt.Fprintf(w, "  will skip: %s\n", strings.Join(skips, "; "))
		} else {
			fmt.Fprintf(w, "  runs all %d contracts\n", len(contracts.Catalogue))
		}
		fmt.Fprintln(w)
	}
	if len(failed) > 0 {
		return ConfigError(fmt.Errorf("unreachable: %s", strings.Join(failed, ", ")))
	}
	return nil
}

func scrub(s string, secrets []string) string {
	for _, x := range secrets {
		if len(x) >= 3 {
			s = strings.ReplaceAll(s, x, reports.Redacted)
		}
	}
	return s
}

// cleanupNeedsTarget is the error of `cleanup --run` without a target: what
// a run left on its target is reached only through that target's URL,
// credentials and control commands, none of which the run records (its
// registry names the endpoint alone, which it says where it can).
func cleanupNeedsTarget(ctx context.Context, runs []string) error {
	for _, r := range runs {
		if err := targets.CheckRunID(r); err != nil {
			return ConfigError(err)
		}
	}
	used := "its registry in the effect store names none"
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	eps, err := targets.RunTargets(lctx, targets.DefaultStoreURL(), runs)
	switch {
	case err != nil:
		used = "its registry could not be read: " + scrub(err.Error(), reports.Secrets(targets.DefaultStoreURL()))
	case len(eps) > 0:
		used = "it used " + strings.Join(eps, ", ")
	}
	return ConfigError(fmt.Errorf("cleanup --run %s needs the target the run used, with --target URL or -c durachk.yaml (%s): what a run left is reached through its target's own URL, credentials and control commands, which the run does not record",
		strings.Join(runs, " --run "), used))
}

// namedRunGrace is how long cleanup waits for a run it was named to release
// its run lock (AwaitDead).
const namedRunGrace = 10 * time.Second

// Cleanup removes what earlier runs left behind: on each target, the run
// namespaces and effect-store schemas of runs that are no longer live
// (targets.Cleanup); on this machine, their temporary directories, cgroups and
// orphaned processes (reaper.Sweep). A run is live while it holds its run lock
// in the effect store or the lock of its directory; nothing of a live run is
// touched. It prints one line per thing removed. runs, if any, narrow it to
// those run ids and to the runs of the commands they name (the id `durachk
// run` and `durachk explore` print: targets.RunsOf).
func Cleanup(ctx context.Context, o RunOptions, runs []string, w io.Writer) error {
	if len(runs) > 0 && len(o.Targets) == 0 && o.Config == "" {
		return cleanupNeedsTarget(ctx, runs)
	}
	ss, store, err := specs(&o)
	if err != nil {
		return err
	}
	var only func(string) bool
	named := map[string]bool{} // the runs named, and the runs of the commands named
	if len(runs) > 0 {
		for _, r := range runs {
			if err := targets.CheckRunID(r); err != nil {
				return ConfigError(err)
			}
			named[r] = true
		}
		only = func(id string) bool { return named[id] }
	}
	var errs []string
	children := map[string][]string{} // store URL: the runs whose parent is named
	awaited := map[string][]string{}  // store URL: the named runs still live
	stores := map[string]bool{targets.DefaultStoreURL(): true}
	if store != "" {
		stores = map[string]bool{store: true}
	}
	for _, spec := range ss {
		if spec == "mem" || spec == "" || strings.HasPrefix(spec, "mem?") {
			fmt.Fprintln(w, "mem: nothing to clean up (the embedded target keeps everything in memory)")
			continue
		}
		s, err := targets.Parse(spec)
		if err != nil {
			return ConfigError(err)
		}
		if store != "" {
			s.StoreURL = store
		}
		stores[s.StoreURL] = true
		// The id a command printed names the runs it started, each with an
		// id of its own: their registry entries name it as their parent.
		these := runs
		if len(runs) > 0 {
			kids, ok := children[s.StoreURL]
			if !ok {
				if kids, err = targets.RunsOf(ctx, s.StoreURL, runs); err != nil {
					msg := scrub(err.Error(), append(reports.Secrets(spec), reports.Secrets(s.StoreURL)...))
					fmt.Fprintf(w, "%s: cleanup failed: %s\n", s.Name, msg)
					errs = append(errs, s.Name+": "+msg)
					continue
				}
				children[s.StoreURL] = kids
			}
			if len(kids) > 0 {
				fmt.Fprintf(w, "%s: the runs of %s: %s\n", s.Name, strings.Join(runs, ", "), strings.Join(kids, ", "))
			}
			these = append(slices.Clone(runs), kids...)
			for _, k := range kids {
				named[k] = true
			}
		}
		// A run named here and killed a moment ago may still hold its lock:
		// give it namedRunGrace to let go, once per store.
		var liveNamed []string
		if len(runs) > 0 {
			if _, ok := awaited[s.StoreURL]; !ok {
				awaited[s.StoreURL], _ = targets.AwaitDead(ctx, s.StoreURL, these, namedRunGrace)
			}
			liveNamed = awaited[s.StoreURL]
		}
		for _, id := range liveNamed {
			fmt.Fprintf(w, "%s: run %s is live (it holds its run lock): left alone\n", s.Name, id)
		}
		lines, err := targets.Cleanup(ctx, s, these)
		for _, l := range lines {
			fmt.Fprintf(w, "%s: %s\n", s.Name, l)
		}
		if err != nil {
			msg := scrub(err.Error(), append(reports.Secrets(spec), reports.Secrets(s.StoreURL)...))
			fmt.Fprintf(w, "%s: cleanup failed: %s\n", s.Name, msg)
			errs = append(errs, s.Name+": "+msg)
			continue
		}
		if len(lines) == 0 && len(liveNamed) == 0 {
			fmt.Fprintf(w, "%s: nothing left behind\n", s.Name)
		}
	}
	// This machine: a run is live if any store it may have used says so (the
	// directory lock says it for every local run).
	var lives []func(string) bool
	for u := range stores {
		if live, done, err := targets.LiveRuns(ctx, u); err == nil {
			defer done()
			lives = append(lives, live)
		}
	}
	keep := func(id string) bool {
		if only != nil && !only(id) {
			return true
		}
		for _, l := range lives {
			if l(id) {
				return true
			}
		}
		return false
	}
	local, err := reaper.Sweep(keep)
	// A private cluster's partitions (nftables tables) outlive a SIGKILLed
	// run whose watchdog was killed too.
	tables, nerr := targets.CleanupNFT(keep)
	locks, lerr := targets.CleanupBlockLocks()
	nerr = errors.Join(nerr, lerr)
	for _, l := range append(append(local, tables...), locks...) {
		fmt.Fprintf(w, "local: removed %s\n", l)
	}
	if err = errors.Join(err, nerr); err != nil {
		errs = append(errs, "local: "+err.Error())
	}
	if len(errs) > 0 {
		return ConfigError(fmt.Errorf("cleanup: %s", strings.Join(errs, "; ")))
	}
	return nil
}
