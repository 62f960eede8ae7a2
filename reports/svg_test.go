package reports

import (
	"regexp"
	"strconv"
	"testing"
)

// A quantile label stays inside the picture wherever its quantile falls: at
// the right edge (p99 = max) it reads leftwards from its line.
func TestHistogramLabelsInside(t *testing.T) {
	const width, labelW = 300, 15 // three characters of 8 px type
	for name, xs := range map[string][]float64{
		"tail at the right edge": append(make([]float64, 98), 900, 1000),
		"all at the left":        {1, 1, 1, 1, 2},
		"spread":                 {1, 10, 100, 200, 500, 700, 800, 1000},
		"one value":              {5},
	} {
		svg := string(Histogram("queue wait (ms)", xs))
		labels := regexp.MustCompile(`<text x="([0-9.]+)" y="[0-9]+" font-size="8" text-anchor="(start|end)" fill="#e45756">(p\d\d)</text>`).FindAllStringSubmatch(svg, -1)
		if len(labels) != 3 {
			t.Fatalf("%s: %d quantile labels, want p50, p90, p99:\n%s", name, len(labels), svg)
		}
		for _, l := range labels {
			x, _ := strconv.ParseFloat(l[1], 64)
			from, to := x, x+labelW
			if l[2] == "end" {
				from, to = x-labelW, x
			}
			if from < 0 || to > width {
				t.Errorf("%s: %s spans %.0f–%.0f px, outside the %d px picture", name, l[3], from, to, width)
			}
		}
	}
}
