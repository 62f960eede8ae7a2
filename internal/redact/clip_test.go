package redact

import (
	"strings"
	"testing"
)

func TestClipAndLine(t *testing.T) {
	long := strings.Repeat("a", 1000)
	tests := []struct {
		name, in, want string
		f              func(string) string
	}{
		{"short input kept", "redis://h:1", "redis://h:1", Clip},
		{"long input clipped with its length", long, strings.Repeat("a", MaxEcho) + "…(1000 bytes)", Clip},
		{"cut on a rune boundary", strings.Repeat("a", MaxEcho-1) + "é" + long, strings.Repeat("a", MaxEcho-1) + "…(1121 bytes)", Clip},
		{"control characters replaced", "a\nb\x00c", "a?b?c", Clip},
		{"line breaks folded", "one\ntwo\r\n  three", "one two three", Line},
		{"long word clipped, short kept", "bad target: " + long + " refused", "bad target: " + strings.Repeat("a", MaxEcho) + "…(1000 bytes) refused", Line},
	}
	for _, tc := range tests {
		if got := tc.f(tc.in); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
