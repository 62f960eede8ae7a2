package contracts_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/durachk/durachk/contracts"
)

// Evaluate runs one contract on the embedded target; the seed makes the run,
// and so the verdict, the same every time.
func ExampleEvaluate() {
	c, err := contracts.Lookup("fencing.zombie")
	if err != nil {
		panic(err)
	}
	r, err := contracts.Evaluate(context.Background(), contracts.MemTarget{}, c, contracts.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Contract, "on", r.Target+":", r.Verdict)
	fmt.Println("stale commits rejected:", r.Stats.StaleRejected > 0)
	// Output:
	// fencing.zombie on mem: pass
	// stale commits rejected: true
}

// EvaluateSabotage runs a contract's negative control: the checker must catch it.
func ExampleEvaluateSabotage() {
	c, _ := contracts.Lookup("fencing.zombie")
	s := c.Sabotages[0]
	r, err := contracts.EvaluateSabotage(context.Background(), contracts.MemTarget{}, c, s, contracts.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Name+":", r.Verdict)
	fmt.Println("property:", r.Violations[0].Property)
	// Output:
	// no-fence-check: violation
	// property: stale_commit_accepted
}

// Lookup finds a contract by its stable id.
func ExampleLookup() {
	c, err := contracts.Lookup("outbox.relay")
	if err != nil {
		panic(err)
	}
	fmt.Println(c.ID, c.Labels)
	fmt.Println(c.Claim)

	_, err = contracts.Lookup("no.such.contract")
	fmt.Println(errors.Is(err, contracts.ErrUnknownContract), err)
	// Output:
	// outbox.relay [fault:kill]
	// a relay killed after publishing and before marking re-publishes; the consumer applies each event id exactly once
	// true unknown contract "no.such.contract"
}
