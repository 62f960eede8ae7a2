package runner

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"

	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// historyTail reads what the run's history files gained since the last read
// and keeps what the controller decides on: each job's attempt budget and the
// executions that spent it (a crash loop on a broker that cannot count
// deliveries never ends by itself, and its verdict, a violation, is already
// certain: the run stops early), which processes fenced a job (a zombie is resumed once another worker
// holds its job), and the job of each process's latest fault (the job a
// stopped worker held). Not safe for concurrent use.
type historyTail struct {
	offsets   map[string]int64
	jobs      map[string]*jobTrace
	lastFault map[string]string // process → job of its latest fault record
	leasedAt  map[string]int64  // process → time of its latest lease invoke
	// What a node fault waits for (cluster.go, atRisk): whether the producer
	// has tried an enqueue, and how many jobs it had acknowledged have no
	// outcome yet.
	produced   bool
	unfinished int
	// leased counts the jobs leased (a lease answered) that have no outcome
	// yet: the leases, and their fencing tokens, the broker holds.
	leased int
	// handedOut is when the newest first delivery of a job was answered (a
	// history time, Unix nanoseconds): a delivery a lagging replica may not
	// have yet.
	handedOut int64
	// acked is when the newest acknowledgement of a job's enqueue was
	// answered (a history time, Unix nanoseconds): a write a lagging replica
	// may not have yet.
	acked int64
}

type jobTrace struct {
	max, enqueues int
	// executions the job itself failed: its extract failed (transient or
	// permanent) or it crashed its worker (poison). An execution the
	// infrastructure cut short spends nothing.
	executions int
	fencedBy   map[string]bool
	// accepted: an enqueue was acknowledged; leased: a lease was answered;
	// finished: acked, dead-lettered or cancelled.
	accepted, leased, finished bool
}

func newHistoryTail() *historyTail {
	return &historyTail{offsets: map[string]int64{}, jobs: map[string]*jobTrace{}, lastFault: map[string]string{}, leasedAt: map[string]int64{}}
}

// over returns a job executed more than its budget plus one, if any.
func (w *historyTail) over() (string, bool) {
	for id, b := range w.jobs {
		if b.max > 0 && b.executions > b.max*max(b.enqueues, 1)+1 {
			return id, true
		}
	}
	return "", false
}

// fencedByOther reports whether a process other than proc fenced job.
func (w *historyTail) fencedByOther(job, proc string) bool {
	if b := w.jobs[job]; b != nil {
		for p := range b.fencedBy {
			if p != proc {
				return true
			}
		}
	}
	return false
}

// read takes in what the files gained since the last call.
func (w *historyTail) read(files []string) {
	for _, path := range files {
		w.readFile(path)
	}
}

func (w *historyTail) job(id string) *jobTrace {
	b := w.jobs[id]
	if b == nil {
		b = &jobTrace{fencedBy: map[string]bool{}}
		w.jobs[id] = b
	}
	return b
}

func (w *historyTail) readFile(path string) {
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
		if json.Unmarshal(line, &op) != nil {
			continue
		}
		if op.F == history.Lease && op.Type == history.Invoke {
			w.leasedAt[op.Process] = op.T
		}
		if op.Job == "" {
			continue
		}
		switch {
		case op.F == history.Fault:
			w.lastFault[op.Process] = op.Job
			if op.Value == "crash" && op.Key == string(pipeline.Poison) {
				w.job(op.Job).executions++
			}
		case op.F == history.Fence && op.Type == history.OK:
			w.job(op.Job).fencedBy[op.Process] = true
		case op.F == history.Enqueue && op.Type == history.OK:
			if b := w.job(op.Job); !b.accepted {
				b.accepted = true
				if !b.finished {
					w.unfinished++
					w.acked = max(w.acked, op.T)
				}
			}
		case op.F == history.Lease && op.Type == history.OK:
			if b := w.job(op.Job); !b.leased {
				b.leased = true
				if !b.finished {
					w.leased++
					w.handedOut = max(w.handedOut, op.T)
				}
			}
		case (op.F == history.Ack || op.F == history.DeadLetter || op.F == history.Cancel) && op.Type == history.OK:
			if b := w.job(op.Job); !b.finished {
				b.finished = true
				if b.accepted {
					w.unfinished--
				}
				if b.leased {
					w.leased--
				}
			}
		case op.F == history.Enqueue && op.Type == history.Invoke:
			w.produced = w.produced || strings.HasPrefix(op.Process, RoleProducer)
			b := w.job(op.Job)
			b.enqueues++
			var m pipeline.JobMeta
			if json.Unmarshal([]byte(op.Value), &m) == nil {
				b.max = m.MaxAttempts
			}
		case op.F == history.Extract && op.Type == history.Fail && (op.Err == "transient" || op.Err == "permanent"):
			w.job(op.Job).executions++
		}
	}
}
