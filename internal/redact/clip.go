package redact

import (
	"fmt"
	"strings"
)

// MaxEcho bounds how much of a user's input an error message repeats.
const MaxEcho = 120

// Clip shortens an echoed input for an error message: at most MaxEcho bytes,
// cut on a rune boundary, with the full length said, and control characters
// replaced by '?' so that the message stays on one line.
func Clip(s string) string {
	if len(s) > MaxEcho {
		cut := MaxEcho
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
	}
	if strings.IndexFunc(s, isControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isControl(r) {
			return '?'
		}
		return r
	}, s)
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// maxWord is the longest word Line keeps whole.
const maxWord = 300

// Line keeps a message to one line of sane length: line breaks and runs of
// spaces become one space, and a word longer than maxWord (an echoed input)
// is clipped.
func Line(s string) string {
	words := strings.Fields(s)
	for i, w := range words {
		if len(w) > maxWord {
			words[i] = Clip(w)
		}
	}
	return strings.Join(words, " ")
}
