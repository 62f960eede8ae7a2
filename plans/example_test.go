package plans_test

import (
	"fmt"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/plans"
)

// A catalogue contract written out as a plan: the jobs, then the faults, in
// the schema of docs/plans.md.
func ExampleFromContract() {
	c, _ := contracts.Lookup("lease.redelivery")
	p, _ := plans.FromContract(c, 1, 2)
	b, _ := p.Marshal(false)
	fmt.Print(string(b))
	// Output:
	// format: durachk.plan/v1
	// name: workers killed after lease
	// contract: lease.redelivery
	// seed: 1
	// workers: 4
	// lease: 10s
	// poll: 200ms
	// limit: 5m0s
	// jobs:
	//   - id: job-000
	//     tenant: acme
	//     doc: doc-000
	//     text: invoice 87045
	//   - id: job-001
	//     tenant: globex
	//     doc: doc-001
	//     at: 50ms
	//     text: invoice 29963
	// faults:
	//   - kind: crash_at
	//     point: after_lease
	//     nth: 1
	//   - kind: crash_at
	//     point: after_extract
	//     nth: 1
	//   - kind: crash_at
	//     point: mid_commit
	//     nth: 1
	//   - kind: kill
	//     process: w2
	//     at: 700ms
}
