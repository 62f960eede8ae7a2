// Package tests is the Ginkgo front end of the contract catalogue: one spec per
// contract per target, labelled so that a run can be narrowed from the command
// line, e.g.
//
//	go test ./tests/ -ginkgo.label-filter='contract:fencing.zombie'
//	go test ./tests/ -ginkgo.label-filter='target:mem && fault:kill' -ginkgo.junit-report=junit.xml
//	go test ./tests/ -ginkgo.label-filter='selftest'
package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/durachk/durachk/contracts"
)

func TestContracts(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "durachk contracts")
}

// target is one entry of the target table. Only the embedded target runs here;
// real brokers join the table as their adapters land.
type target struct {
	name string
	new  func() contracts.Target
}

var targets = []target{
	{name: "mem", new: func() contracts.Target { return contracts.MemTarget{} }},
}

// seed is the one seed every spec runs with; the failure message repeats it so
// that a run can be reproduced.
const seed = 1

func labels(t target, c *contracts.Contract, extra ...string) Labels {
	ls := Labels{"target:" + t.name, "contract:" + labelSafe(c.ID)}
	ls = append(ls, c.Labels...)
	return append(ls, extra...)
}

// labelSafe replaces the characters Ginkgo does not allow in a label.
func labelSafe(s string) string {
	return strings.NewReplacer("/", ":", "&", "-", "|", "-", "!", "-", ",", "-", "(", "-", ")", "-").Replace(s)
}

func describe(r contracts.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s (seed %d, scenario %q): %s: %s", r.Contract, r.Target, r.Seed, r.Scenario, r.Verdict, r.Reason)
	for _, v := range r.Violations[:min(3, len(r.Violations))] {
		fmt.Fprintf(&b, "\n  %s: %s", v.Property, v.Message)
		for _, w := range v.Witness {
			fmt.Fprintf(&b, "\n      %s", w)
		}
	}
	return b.String()
}

var _ = Describe("contract catalogue", func() {
	for _, t := range targets {
		Context("on target "+t.name, func() {
			for _, c := range contracts.Catalogue {
				It(c.ID+" holds", labels(t, c), func(ctx SpecContext) {
					r, err := contracts.Evaluate(ctx, t.new(), c, contracts.Options{Seed: seed})
					Expect(err).NotTo(HaveOccurred())
					if r.Verdict == contracts.Skipped {
						Skip(fmt.Sprintf("%s on %s: %s", c.ID, t.name, r.Reason))
					}
					Expect(r.Verdict).To(Equal(contracts.Pass), describe(r))
					Expect(r.Violations).To(BeEmpty())
				})
			}
			for _, c := range contracts.SeedScenarios {
				It(c.ID+" keeps every promise", labels(t, c), func(ctx SpecContext) {
					r, err := contracts.Evaluate(ctx, t.new(), c, contracts.Options{Seed: seed})
					Expect(err).NotTo(HaveOccurred())
					if r.Verdict == contracts.Skipped {
						Skip(fmt.Sprintf("%s on %s: %s", c.ID, t.name, r.Reason))
					}
					Expect(r.Verdict).To(Equal(contracts.Pass), describe(r))
				})
			}
		})
	}
})

// The negative controls run on the embedded target only: a sabotage is a
// broken pipeline or broker configuration that only mem can be told to be.
var _ = Describe("self-test", func() {
	t := targets[0]
	for _, c := range contracts.Catalogue {
		if c.Needs != nil && c.Needs(t.new().Capabilities()) != "" {
			continue // a replicated topology's contract: its negative controls are recorded real runs (contracts/cluster_test.go)
		}
		for _, s := range c.Sabotages {
			It(fmt.Sprintf("%s catches sabotage %s", c.ID, s.Name), labels(t, c, "selftest", "sabotage:"+s.Name), func() {
				r, err := contracts.EvaluateSabotage(context.Background(), t.new(), c, s, contracts.Options{Seed: seed})
				Expect(err).NotTo(HaveOccurred())
				Expect(r.Verdict).To(Equal(contracts.Violated),
					"sabotage %q (%s) of %s passed undetected: %s", s.Name, s.What, c.ID, describe(r))
				Expect(r.Violations).To(ContainElement(HaveField("Witness", Not(BeEmpty()))), "no violation carries a witness")
			})
		}
	}
})
