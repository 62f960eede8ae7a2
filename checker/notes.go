package checker

import (
	"strings"
	"time"
)

// The controller's notes the checker reads (history.Node records): what a
// fault is measured against in the broker's terms, which the history alone
// must say, so that a history is judged again the same without the run.
const (
	flushWindowPrefix = "flush window "
	outlastPrefix     = "partition must outlast "
)

// FlushWindowNote is the controller's note, before a power cut, of how long
// the broker may keep an acknowledged write unsynced (its configuration's
// flush or sync interval) and the setting that says so; window 0: no age
// tells (every write synced before its acknowledgement, or none ever).
// Stats.AckedInFlushWindow counts against it.
func FlushWindowNote(window time.Duration, why string) string {
	if window <= 0 {
		return flushWindowPrefix + "none: " + why
	}
	return flushWindowPrefix + window.String() + ": " + why
}

// OutlastNote is the controller's note, as it cuts a node off, of the
// topology's timeout the partition must outlast to show what the cut-off side
// does (a semi-synchronous primary's fallback, a node noticing its peers
// gone). Stats.PartitionsOutlasting counts against it.
func OutlastNote(timeout time.Duration, why string) string {
	return outlastPrefix + timeout.String() + ": " + why
}

// note reads the duration of a note with prefix ("none" is 0).
func note(value, prefix string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(value, prefix)
	if !ok {
		return 0, false
	}
	head, _, _ := strings.Cut(rest, ": ")
	if head == "none" {
		return 0, true
	}
	d, err := time.ParseDuration(head)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// msUp is d in milliseconds, rounded up.
func msUp(d time.Duration) int { return int((d + time.Millisecond - 1) / time.Millisecond) }
