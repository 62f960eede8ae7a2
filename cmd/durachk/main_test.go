package main

import (
	"testing"

	"github.com/durachk/durachk/internal/cli"
)

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"unknown contract", []string{"run", "--contract", "nope", "--out", t.TempDir()}, cli.ExitConfig},
		{"unknown flag", []string{"run", "--bogus"}, cli.ExitConfig},
		{"unknown command", []string{"frobnicate"}, cli.ExitConfig},
		{"unexpected argument", []string{"run", "extra"}, cli.ExitConfig},
		{"unknown broker kind", []string{"run", "--target", "pulsar://127.0.0.1:6650", "--out", t.TempDir()}, cli.ExitConfig},
		{"unknown knob", []string{"run", "--target", "postgres://127.0.0.1:5432/test?no_such_knob=1", "--out", t.TempDir()}, cli.ExitConfig},
		{"embedded catalogue passes", []string{"run", "--out", t.TempDir(), "--format", "json"}, cli.ExitPass},
		{"selftest catches every sabotage", []string{"selftest"}, cli.ExitPass},
		{"selftest catches every sabotage on every seed", []string{"selftest", "--seeds", "3", "--seed", "7"}, cli.ExitPass},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cli.Code(run(tt.args)); got != tt.want {
				t.Fatalf("durachk %v: exit %d, want %d", tt.args, got, tt.want)
			}
		})
	}
}
