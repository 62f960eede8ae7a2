package runnertest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
)

// recorder is a testing.TB that keeps what a seek reports instead of ending
// the test.
type recorder struct {
	testing.TB
	errors, fatals []string
}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(f string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(f, args...))
}
func (r *recorder) Fatalf(f string, args ...any) {
	r.fatals = append(r.fatals, fmt.Sprintf(f, args...))
}
func (r *recorder) failed() bool   { return len(r.errors)+len(r.fatals) > 0 }
func (r *recorder) String() string { return fmt.Sprint(r.errors, r.fatals) }

// seeds is a run whose verdict per seed is given (pass for the others); a
// violation is of lost, witnessed unless the seed is in bare. skip maps a seed
// to the last seed its run tried (a run that did not exercise its claim).
type seeds struct {
	verdicts map[uint64]contracts.Verdict
	bare     map[uint64]bool
	skip     map[uint64]uint64
	ran      []uint64
}

func (s *seeds) run(seed uint64) contracts.Result {
	s.ran = append(s.ran, seed)
	r := contracts.Result{Seed: seed, Verdict: contracts.Pass}
	if last, ok := s.skip[seed]; ok {
		r.Seed = last
	}
	if v, ok := s.verdicts[r.Seed]; ok {
		r.Verdict = v
	}
	if r.Verdict == contracts.Violated {
		v := contracts.Violation{Property: contracts.PropLost, Job: "j1"}
		if !s.bare[r.Seed] {
			v.Witness = []history.Op{{F: history.Enqueue, Job: "j1"}}
		}
		r.Violations = []contracts.Violation{v}
	}
	return r
}

func TestSeekViolation(t *testing.T) {
	V, U := contracts.Violated, contracts.Unknown
	tests := []struct {
		name    string
		s       seeds
		wantRan []uint64
		fail    bool
	}{
		{"seed 1 shows it", seeds{verdicts: map[uint64]contracts.Verdict{1: V}}, []uint64{1}, false},
		{"seed 3 shows it", seeds{verdicts: map[uint64]contracts.Verdict{3: V, 2: U}}, []uint64{1, 2, 3}, false},
		{"a violation without its witness is not it", seeds{verdicts: map[uint64]contracts.Verdict{1: V, 2: V}, bare: map[uint64]bool{1: true}}, []uint64{1, 2}, false},
		{"seeds a run tried are not run again", seeds{verdicts: map[uint64]contracts.Verdict{4: V}, skip: map[uint64]uint64{1: 3}}, []uint64{1, 4}, false},
		{"none in five seeds fails", seeds{verdicts: map[uint64]contracts.Verdict{6: V}}, []uint64{1, 2, 3, 4, 5}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			r := SeekViolation(rec, "x", contracts.PropLost, tt.s.run)
			if !slices.Equal(tt.s.ran, tt.wantRan) {
				t.Errorf("ran seeds %v, want %v", tt.s.ran, tt.wantRan)
			}
			if rec.failed() != tt.fail {
				t.Errorf("failed %v (%s), want %v", rec.failed(), rec, tt.fail)
			}
			if !tt.fail && (r.Verdict != V || !Witnessed(r, contracts.PropLost)) {
				t.Errorf("returned %s without a witnessed lost", r.Verdict)
			}
		})
	}
}

func TestSeekPasses(t *testing.T) {
	V, U := contracts.Violated, contracts.Unknown
	tests := []struct {
		name    string
		n       int
		s       seeds
		wantRan []uint64
		fail    bool
	}{
		{"three passes", 3, seeds{}, []uint64{1, 2, 3}, false},
		{"an unknown tries the next seed", 1, seeds{verdicts: map[uint64]contracts.Verdict{1: U}}, []uint64{1, 2}, false},
		{"a violation fails at once", 3, seeds{verdicts: map[uint64]contracts.Verdict{2: V}}, []uint64{1, 2}, true},
		{"unknown throughout fails", 1, seeds{verdicts: map[uint64]contracts.Verdict{1: U, 2: U, 3: U, 4: U, 5: U}}, []uint64{1, 2, 3, 4, 5}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			SeekPasses(rec, "x", tt.n, tt.s.run)
			if !slices.Equal(tt.s.ran, tt.wantRan) {
				t.Errorf("ran seeds %v, want %v", tt.s.ran, tt.wantRan)
			}
			if rec.failed() != tt.fail {
				t.Errorf("failed %v (%s), want %v", rec.failed(), rec, tt.fail)
			}
		})
	}
}
