package reports

import (
	"time"

	"github.com/durachk/durachk/faults"
)

func planFor() faults.Plan {
	return faults.Plan{Name: "p", Faults: []faults.Fault{
		{Kind: faults.CrashAt, Point: "after_lease", Nth: 2},
		{Kind: faults.LinkDown, Link: "broker", At: 100 * time.Millisecond, For: 300 * time.Millisecond},
	}}
}
