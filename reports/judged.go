package reports

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/durachk/durachk/checker"
	"github.com/durachk/durachk/history"
)

// FinalFormat names the format of the final-state files a run writes beside
// its histories (Judged).
const FinalFormat = "durachk.final/v1"

// Judged is what one verdict was judged on besides its history: the final
// state of broker and store, the checker's options, and what the engine's
// verdict takes beyond the checker (the contract, whose own properties and
// exercise check apply; a cluster that did not settle; a broker outage). A
// run writes it as histories/NNN-<target>_<contract>.final.json beside the
// history, NNN-<target>_<contract>.jsonl (a trial other than the one the
// result shows: .seed-<seed> before the extension). Its JSON is a final-state
// file of `durachk check --final` (checker.FinalFile reads final, check,
// contract, target, seed and sabotage); `durachk check --result` re-judges a
// whole run from these files.
type Judged struct {
	Format   string `json:"format"`
	Contract string `json:"contract"`
	Target   string `json:"target"`
	Seed     uint64 `json:"seed"`
	Sabotage string `json:"sabotage,omitempty"`
	// History is the history this verdict was judged on, whole: a file beside
	// this one. HistoryOps counts its operations.
	History    string `json:"history"`
	HistoryOps int    `json:"history_ops"`
	// Final and Check are the checker's inputs besides the history.
	Final checker.Final   `json:"final"`
	Check checker.Options `json:"check"`
	// Plan is the plan file a plan contract (plan/<name>) ran, as JSON
	// (durachk.plan/v1): its exercise check and own properties come from it.
	Plan json.RawMessage `json:"plan,omitempty"`
	// Unsettled and Unavailable are the engine's own steps: a replicated
	// target that did not settle after its last fault, a broker that stopped
	// answering, a run stopped at its wall-time budget (contracts.Execution).
	// Each makes the verdict unknown.
	Unsettled   string `json:"unsettled,omitempty"`
	Unavailable string `json:"unavailable,omitempty"`
	OverBudget  string `json:"over_budget,omitempty"`
}

// Recorded is one execution behind a result: what it was judged on and its
// whole history.
type Recorded struct {
	Judged Judged
	Ops    []history.Op
}

// ReadJudged reads a final-state file a run wrote (Judged) and checks its
// format.
func ReadJudged(path string) (Judged, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Judged{}, fmt.Errorf("final state: %w", err)
	}
	var j Judged
	if err := json.Unmarshal(b, &j); err != nil {
		return Judged{}, fmt.Errorf("final state %s: %w", path, err)
	}
	if j.Format != FinalFormat {
		return Judged{}, fmt.Errorf("final state %s: format %q, want %q", path, Clip(j.Format), FinalFormat)
	}
	return j, nil
}

// historyBeside is the path of j's history, beside its final-state file at
// path; an error when j names none or one elsewhere.
func (j Judged) historyBeside(path string) (string, error) {
	if j.History == "" || strings.ContainsAny(j.History, "/\\\x00") || strings.HasPrefix(j.History, ".") {
		return "", fmt.Errorf("final state %s: history %q is not a file beside it", path, Clip(j.History))
	}
	return filepath.Join(filepath.Dir(path), j.History), nil
}

// IsJudged reports whether the final-state file at path is one a run wrote
// (format durachk.final/v1) rather than a bare final state.
func IsJudged(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var probe struct {
		Format string `json:"format"`
	}
	return json.Unmarshal(b, &probe) == nil && probe.Format == FinalFormat
}

// pendingFile is a history or final-state file a document still has to
// write (relative to result.json's directory), kept until WriteJSON writes
// it; whole histories are not kept in memory after that.
type pendingFile struct {
	path string
	ops  []history.Op // a history, or
	rec  *Judged      // a final state
}

func (p pendingFile) write(dir string) error {
	full := filepath.Join(dir, filepath.FromSlash(p.path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	if p.rec != nil {
		b, err := json.MarshalIndent(p.rec, "", "  ")
		if err != nil {
			return err
		}
		return WriteFileAtomic(full, append(b, '\n'))
	}
	// A whole history may be large: streamed to a file beside, then renamed.
	f, err := os.CreateTemp(filepath.Dir(full), "."+filepath.Base(full)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	w := bufio.NewWriterSize(f, 1<<16)
	enc := json.NewEncoder(w)
	for _, op := range p.ops {
		if err = enc.Encode(op); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, full)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// copyFile copies from to to (atomically), for a document written to a second
// directory after its files were written to the first.
func copyFile(from, to string) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return WriteFileAtomic(to, b)
}
