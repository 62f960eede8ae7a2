package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/internal/targets"
	"github.com/durachk/durachk/reports"
)

// Doctor checks that every target is reachable and prints what it declares:
// version, endpoint, fingerprint, capabilities, whether durachk can kill and
// restart a private instance, and which contracts will skip and why. An
// unreachable target is reported and makes the command fail (exit 3) after
// every target was checked.
func Doctor(ctx context.Context, o RunOptions, w io.Writer) error {
	ss, store, err := specs(&o)
	if err != nil {
		return err
	}
	var failed []string
	for _, spec := range ss {
		t, err := resolve(ctx, spec, store, nil)
		if err != nil {
			fmt.Fprintf(w, "%s: UNREACHABLE: %v\n\n", reports.RedactURL(spec), scrub(err.Error(), reports.Secrets(spec)))
			failed = append(failed, reports.RedactURL(spec))
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
		if t.parsed.Kind != "" {
			if err := targets.CanKillBroker(t.parsed); err != nil {
				fmt.Fprintf(tw, "  broker kill\tno: %v\n", err)
			} else {
				fmt.Fprintf(tw, "  broker kill\tyes (private instance)\n")
			}
		} else {
			fmt.Fprintf(tw, "  broker kill\t%v (simulated)\n", c.BrokerKill)
		}
		fmt.Fprintf(tw, "  power loss\t%v\n", c.PowerLoss)
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

// Cleanup removes what earlier runs left behind on each target, through the
// target kind's optional Cleanup; a kind without one is named, not an error.
func Cleanup(ctx context.Context, o RunOptions, w io.Writer) error {
	ss, store, err := specs(&o)
	if err != nil {
		return err
	}
	var errs []string
	for _, spec := range ss {
		if spec == "mem" || spec == "" {
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
		k, ok := targets.Lookup(s.Kind)
		if !ok || k.Cleanup == nil {
			fmt.Fprintf(w, "%s: the %s target kind has no cleanup yet; nothing removed\n", s.Name, s.Kind)
			continue
		}
		removed, err := k.Cleanup(ctx, s)
		for _, r := range removed {
			fmt.Fprintf(w, "%s: removed %s\n", s.Name, r)
		}
		if err != nil {
			msg := scrub(err.Error(), reports.Secrets(spec))
			fmt.Fprintf(w, "%s: cleanup failed: %s\n", s.Name, msg)
			errs = append(errs, s.Name+": "+msg)
			continue
		}
		if len(removed) == 0 {
			fmt.Fprintf(w, "%s: nothing left behind\n", s.Name)
		}
	}
	if len(errs) > 0 {
		return ConfigError(fmt.Errorf("cleanup: %s", strings.Join(errs, "; ")))
	}
	return nil
}
