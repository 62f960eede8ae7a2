package loadavg

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		loadavg string
		cpus    int
		want    float64
	}{
		{"0.50 0.40 0.30 1/200 999", 2, 0.25},
		{"6.00 3.00 1.00 5/200 999", 2, 3},
		{"", 2, 0},
		{"x 1 1", 2, 0},
		{"-1 1 1", 2, 0},
		{"4.00 1.00 1.00 1/1 1", 0, 0},
	}
	for _, tt := range tests {
		if got := Parse(tt.loadavg, tt.cpus); got != tt.want {
			t.Errorf("Parse(%q, %d) = %v, want %v", tt.loadavg, tt.cpus, got, tt.want)
		}
	}
}

func TestClampAndFixed(t *testing.T) {
	for _, tt := range []struct{ in, max, want float64 }{{0.2, 8, 1}, {3, 8, 3}, {80, 8, 8}, {2, 1.5, 1.5}} {
		if got := Clamp(tt.in, tt.max); got != tt.want {
			t.Errorf("Clamp(%v, %v) = %v, want %v", tt.in, tt.max, got, tt.want)
		}
	}
	t.Setenv(Env, "")
	if _, ok := Fixed(8); ok {
		t.Error("unset: fixed")
	}
	t.Setenv(Env, "2.5")
	if f, ok := Fixed(8); !ok || f != 2.5 {
		t.Errorf("2.5: %v %v", f, ok)
	}
	t.Setenv(Env, "20")
	if f, ok := Fixed(4); !ok || f != 4 {
		t.Errorf("20 with max 4: %v %v", f, ok)
	}
	t.Setenv(Env, "fast")
	if _, ok := Fixed(8); ok {
		t.Error("unparsable: fixed")
	}
}

func TestPatience(t *testing.T) {
	t.Setenv(Env, "3")
	if got := Patience(time.Second, 8); got != 3*time.Second {
		t.Errorf("fixed 3: %v, want 3s", got)
	}
	t.Setenv(Env, "20")
	if got := Patience(time.Second, 8); got != 8*time.Second {
		t.Errorf("fixed 20, max 8: %v, want 8s", got)
	}
	t.Setenv(Env, "")
	want := time.Duration(float64(time.Second) * Clamp(PerCPU(), 8))
	if got := Patience(time.Second, 8); got < time.Second || got > 8*time.Second || got != want {
		t.Errorf("from the load average: %v, want %v (between 1s and 8s)", got, want)
	}
}
