package runner

import (
	"bytes"
	"encoding/json"
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
	// The files being read, held open: the supervisor reads every one every
	// 20 ms, and opening each again (five system calls) took 42% of explore's
	// CPU time with 8 rounds of 1,600 jobs overlapping on Redis (2026-12-06).
	files map[string]*tailFile
	// done: files whose writer has exited and that were read to their end.
	done      map[string]bool
	buf       []byte
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

// tailFile is a history file being read: its offset is the file's own, and
// rest a last line not yet whole (read again with what follows).
type tailFile struct {
	f    *os.File
	rest []byte
	// exited: its writer is gone; the next read to the end closes it.
	exited bool
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
	return &historyTail{files: map[string]*tailFile{}, done: map[string]bool{}, jobs: map[string]*jobTrace{}, lastFault: map[string]string{}, leasedAt: map[string]int64{}}
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

// exited says that path's writer has exited: once read to its end, the
// file is closed and read no more.
func (w *historyTail) exited(path string) {
	if tf := w.files[path]; tf != nil {
		tf.exited = true
		return
	}
	w.done[path] = true // never opened: the process died before it wrote
}

// close closes every file still open.
func (w *historyTail) close() {
	for path, tf := range w.files {
		tf.f.Close()
		delete(w.files, path)
	}
}

func (w *historyTail) readFile(path string) {
	if w.done[path] {
		return
	}
	tf := w.files[path]
	if tf == nil {
		f, err := os.Open(path)
		if err != nil {
			return // not created yet
		}
		tf = &tailFile{f: f}
		w.files[path] = tf
	}
	if w.buf == nil {
		w.buf = make([]byte, 64<<10)
	}
	for {
		n, err := tf.f.Read(w.buf)
		if n > 0 {
			tf.rest = w.lines(append(tf.rest, w.buf[:n]...))
		}
		if err != nil || n == 0 {
			break
		}
	}
	if tf.exited {
		tf.f.Close()
		delete(w.files, path)
		w.done[path] = true
	}
}

// lines takes in every whole line of b and returns what is left of it: a
// partial last line, read again with what follows it.
func (w *historyTail) lines(b []byte) []byte {
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return b
		}
		line := b[:i+1]
		b = b[i+1:]
		w.line(line)
	}
}

// line takes in one history line.
func (w *historyTail) line(line []byte) {
	var op history.Op
	if json.Unmarshal(line, &op) != nil {
		return
	}
	if op.F == history.Lease && op.Type == history.Invoke {
		w.leasedAt[op.Process] = op.T
	}
	if op.Job == "" {
		return
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
