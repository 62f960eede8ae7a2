package adapters

import (
	"errors"
	"testing"
)

// TestOpErrorNamesOnlyWhatItHas: a call without a job (Inspect, Lease,
// Enqueue) reads "redis inspect: …", never "job  attempt 0".
func TestOpErrorNamesOnlyWhatItHas(t *testing.T) {
	for _, tc := range []struct {
		e    OpError
		want string
	}{
		{OpError{Target: "redis", Op: "inspect", Err: ErrUnavailable}, "redis inspect: broker unavailable"},
		{OpError{Target: "pg", Op: "ack", JobID: "j7", Attempt: 2, Err: ErrStaleToken}, "pg ack job j7 attempt 2: stale fencing token"},
		{OpError{Target: "rabbit", Op: "nack", JobID: "j1", Err: ErrLeaseLost}, "rabbit nack job j1: lease lost"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
		if !errors.Is(&tc.e, tc.e.Err) {
			t.Errorf("%q does not unwrap to %v", tc.e.Error(), tc.e.Err)
		}
	}
}
