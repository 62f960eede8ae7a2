package reports

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/durachk/durachk/contracts"
	"github.com/durachk/durachk/history"
)

// Loaded is one result of a document read back from its directory with
// everything beside result.json that its verdicts were judged on: the whole
// history the result shows, and each execution (the shown one first, then
// every other trial) with its final state and history. `durachk merge`
// places loaded results in a new document, which writes them again under
// its own names.
type Loaded struct {
	Evidence Evidence // the result's evidence, without its file names
	Ops      []history.Op
	Judged   []Recorded
}

// Load reads result i of d, whose result.json is in dir.
func (d *Document) Load(dir string, i int) (Loaded, error) {
	r := d.Results[i]
	var l Loaded
	ev := d.EvidenceFor(r.Target, r.Contract)
	read := func(rel string) ([]history.Op, error) {
		if rel == "" {
			return nil, nil
		}
		if !inHistories(rel) {
			return nil, fmt.Errorf("%s: %q is not a file in histories/", dir, Clip(rel))
		}
		ops, err := history.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, fmt.Errorf("read result %s: %w", dir, err)
		}
		return ops, nil
	}
	var err error
	if l.Ops, err = read(ev.History); err != nil {
		return l, err
	}
	finals := []string{}
	if ev.Final != "" {
		finals = append(finals, ev.Final)
	}
	for _, seed := range slices.Sorted(maps.Keys(ev.TrialFinals)) {
		if f := ev.TrialFinals[seed]; f != ev.Final {
			finals = append(finals, f)
		}
	}
	for k, f := range finals {
		if !inHistories(f) {
			return l, fmt.Errorf("%s: %q is not a file in histories/", dir, Clip(f))
		}
		path := filepath.Join(dir, filepath.FromSlash(f))
		j, err := ReadJudged(path)
		if err != nil {
			return l, err
		}
		ops := l.Ops
		if k > 0 {
			h, err := j.historyBeside(path)
			if err != nil {
				return l, err
			}
			if ops, err = history.ReadFile(h); err != nil && !errors.Is(err, os.ErrNotExist) {
				return l, fmt.Errorf("read result %s: %w", dir, err)
			}
		}
		l.Judged = append(l.Judged, Recorded{Judged: j, Ops: ops})
	}
	ev.History, ev.Final, ev.TrialFinals, ev.HistoryOps = "", "", nil, 0
	l.Evidence = ev
	return l, nil
}

// Entry is result r, loaded as l, as an entry to place in another document
// (Document.Place writes its files there under the names it gives them).
func (l Loaded) Entry(r contracts.Result) Entry {
	e := NewEntry(r, l.Ops, l.Evidence)
	e.Judged = l.Judged
	return e
}
