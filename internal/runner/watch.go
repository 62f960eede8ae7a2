package runner

import (
	"bufio"
	"encoding/json"
	"io"
	"os"

	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// budgetWatch tails the run's history files and tells when a job has been
// executed beyond its attempt budget: a crash loop on a broker that cannot count
// deliveries never ends by itself, and the verdict (a violation) is already
// certain, so the run stops early instead of waiting for its time limit.
// Not safe for concurrent use.
type budgetWatch struct {
	offsets map[string]int64
	jobs    map[string]*budget
}

type budget struct {
	max, enqueues, executions int
}

func newBudgetWatch() *budgetWatch {
	return &budgetWatch{offsets: map[string]int64{}, jobs: map[string]*budget{}}
}

// over reads what the files gained since the last call and returns a job
// executed more than its budget plus one, if any.
func (w *budgetWatch) over(files []string) (string, bool) {
	for _, path := range files {
		w.read(path)
	}
	for id, b := range w.jobs {
		if b.max > 0 && b.executions > b.max*max(b.enqueues, 1)+1 {
			return id, true
		}
	}
	return "", false
}

func (w *budgetWatch) read(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(w.offsets[path], io.SeekStart); err != nil {
		return
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return // a partial last line is read again next time
		}
		w.offsets[path] += int64(len(line))
		var op history.Op
		if json.Unmarshal(line, &op) != nil || op.Type != history.Invoke || op.Job == "" {
			continue
		}
		b := w.jobs[op.Job]
		if b == nil {
			b = &budget{}
			w.jobs[op.Job] = b
		}
		switch op.F {
		case history.Enqueue:
			b.enqueues++
			var m pipeline.JobMeta
			if json.Unmarshal([]byte(op.Value), &m) == nil {
				b.max = m.MaxAttempts
			}
		case history.Extract:
			b.executions++
		}
	}
}
