package explore

import (
	"slices"
	"testing"
)

// ddmin finds the two elements a failure needs among a hundred, and the
// empty set when nothing is needed; a failure that needs every element
// keeps them all.
func TestDDMin(t *testing.T) {
	cases := []struct {
		name  string
		need  []int
		least int
		want  []int
	}{
		{"two of a hundred", []int{17, 83}, 0, []int{17, 83}},
		{"none needed", nil, 0, nil},
		{"none needed, at least one kept", nil, 1, []int{0}},
		{"one", []int{99}, 1, []int{99}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			got, err := ddmin(100, tc.least, func(idx []int) (bool, error) {
				runs++
				for _, n := range tc.need {
					if !slices.Contains(idx, n) {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ddmin = %v, %v; want %v", got, err, tc.want)
			}
			if runs > 200 {
				t.Errorf("%d tests for a hundred elements", runs)
			}
		})
	}
	all, _ := ddmin(8, 0, func(idx []int) (bool, error) { return len(idx) == 8, nil })
	if len(all) != 8 {
		t.Errorf("a failure needing every element kept %v", all)
	}
}
