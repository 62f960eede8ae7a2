package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/pipeline"
)

// opsPerJob is what the benchmark's generator records for every job. A plain
// job: one delivery that heartbeats 41 times, commits and acks; the relay's
// publish and mark; the consumer's apply. A heavy job: a first delivery that
// heartbeats 18 times and fails transiently, a second one that heartbeats 18
// times, loses its commit's reply, commits (deduped) and acks; publish, mark
// and apply.
const opsPerJob = 100

const benchWorkers = 8

// genHistory writes, as JSONL, the history of jobs jobs processed by eight
// workers whose steps interleave, a batch of eight jobs at a time. It writes
// through emit, one line at a time, so that a history of any size streams
// without being held in memory.
type genHistory struct {
	jobs  int
	heavy bool
	next  int // next job to start
	lines [][]byte
	buf   []byte
	now   int64
	seq   map[string]int64
}

func newGen(jobs int, heavy bool) *genHistory {
	return &genHistory{jobs: jobs, heavy: heavy, now: 1_767_225_600_000_000_000, seq: map[string]int64{}}
}

func benchKey(i int) string  { return fmt.Sprintf("t%d:doc-%07d:v1", i%4+10, i) }
func benchJob(i int) string  { return fmt.Sprintf("job-%07d", i) }
func benchProc(i int) string { return "w" + strconv.Itoa(i%benchWorkers+1) }

func benchMeta(i int, heavy bool) string {
	m := pipeline.JobMeta{Tenant: fmt.Sprintf("t%d", i%4+10), Doc: fmt.Sprintf("doc-%07d", i), Version: 1, MaxAttempts: 3,
		Hash: fmt.Sprintf("%064x", i*7919)}
	if heavy {
		m.FailTransient = 1
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// op appends one history line.
func (g *genHistory) op(proc string, typ history.Type, f history.F, job, key string, token uint64, value, errc string) {
	g.now += 100_000
	g.seq[proc]++
	b := g.buf[:0]
	b = append(b, `{"t":`...)
	b = strconv.AppendInt(b, g.now, 10)
	b = append(b, `,"process":"`...)
	b = append(b, proc...)
	b = append(b, `","seq":`...)
	b = strconv.AppendInt(b, g.seq[proc], 10)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	b = append(b, `","f":"`...)
	b = append(b, f...)
	b = append(b, '"')
	if job != "" {
		b = append(b, `,"job":"`...)
		b = append(b, job...)
		b = append(b, '"')
	}
	if key != "" {
		b = append(b, `,"key":"`...)
		b = append(b, key...)
		b = append(b, '"')
	}
	if token > 0 {
		b = append(b, `,"token":`...)
		b = strconv.AppendUint(b, token, 10)
		b = append(b, `,"attempt":`...)
		b = strconv.AppendUint(b, token, 10)
	}
	if value != "" {
		b = append(b, `,"value":`...)
		b = strconv.AppendQuote(b, value) // the values here need no other escapes than JSON's
	}
	if errc != "" {
		b = append(b, `,"err":"`...)
		b = append(b, errc...)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	g.buf = b
	g.lines = append(g.lines, append([]byte(nil), b...))
}

// batch generates the next batch of jobs into g.lines; false when done.
func (g *genHistory) batch() bool {
	if g.next >= g.jobs {
		return false
	}
	lo, hi := g.next, min(g.next+benchWorkers, g.jobs)
	g.next = hi
	pair := func(i int, f history.F, tok uint64, ok history.Type, value, errc string) {
		g.op(benchProc(i), history.Invoke, f, benchJob(i), benchKey(i), tok, "", "")
		g.op(benchProc(i), ok, f, benchJob(i), benchKey(i), tok, value, errc)
	}
	each := func(f func(i int)) {
		for i := lo; i < hi; i++ {
			f(i)
		}
	}
	each(func(i int) {
		g.op("producer", history.Invoke, history.Enqueue, benchJob(i), benchKey(i), 0, benchMeta(i, g.heavy), "")
		g.op("producer", history.OK, history.Enqueue, benchJob(i), benchKey(i), 0, "", "")
	})
	first, extends := uint64(1), 18
	if !g.heavy {
		first, extends = 2, 41
	}
	for tok := first; tok <= 2; tok++ {
		each(func(i int) {
			g.op(benchProc(i), history.Invoke, history.Lease, "", "", 0, "", "")
			g.op(benchProc(i), history.OK, history.Lease, benchJob(i), benchKey(i), tok, "10000", "")
			pair(i, history.Fence, tok, history.OK, "", "")
			g.op(benchProc(i), history.Invoke, history.Extract, benchJob(i), benchKey(i), tok, "", "")
		})
		for range extends {
			each(func(i int) { pair(i, history.Extend, tok, history.OK, "10000", "") })
		}
		if tok == 1 {
			each(func(i int) {
				g.op(benchProc(i), history.Fail, history.Extract, benchJob(i), benchKey(i), tok, "", "transient")
				pair(i, history.Nack, tok, history.OK, "500ms", "")
			})
			continue
		}
		each(func(i int) {
			g.op(benchProc(i), history.OK, history.Extract, benchJob(i), benchKey(i), tok, "digest:"+strconv.Itoa(i), "")
			if g.heavy {
				pair(i, history.Commit, tok, history.Info, "", "ambiguous")
				pair(i, history.Commit, tok, history.OK, "deduped", "")
			} else {
				pair(i, history.Commit, tok, history.OK, "new", "")
			}
			pair(i, history.Ack, tok, history.OK, "", "")
		})
	}
	each(func(i int) {
		ev := "ev:" + benchKey(i)
		g.op("relay", history.Invoke, history.Publish, benchJob(i), benchKey(i), 0, ev, "")
		g.op("relay", history.OK, history.Publish, benchJob(i), benchKey(i), 0, ev, "")
		g.op("relay", history.Invoke, history.Mark, benchJob(i), benchKey(i), 0, ev, "")
		g.op("relay", history.OK, history.Mark, benchJob(i), benchKey(i), 0, ev, "")
		g.op("consumer", history.Invoke, history.Apply, benchJob(i), benchKey(i), 0, ev, "")
		g.op("consumer", history.OK, history.Apply, benchJob(i), benchKey(i), 0, "applied", "")
	})
	return true
}

// Read streams the history.
func (g *genHistory) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(g.lines) == 0 {
			if !g.batch() {
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
		}
		c := copy(p[n:], g.lines[0])
		n += c
		if c < len(g.lines[0]) {
			g.lines[0] = g.lines[0][c:]
			return n, nil
		}
		g.lines = g.lines[1:]
	}
	return n, nil
}

// benchFinal is the final state of the generated history: every job committed
// (the reply of its first commit was lost, so its result is the first
// commit's), its event published and applied.
func benchFinal(jobs int) Final {
	f := Final{Drained: true, Store: pipeline.State{Results: make([]pipeline.Result, 0, jobs), Events: make([]pipeline.Event, 0, jobs)}}
	for i := range jobs {
		f.Store.Results = append(f.Store.Results, pipeline.Result{Key: benchKey(i), JobID: benchJob(i), Tenant: fmt.Sprintf("t%d", i%4+10),
			Token: 2, EventID: "ev:" + benchKey(i)})
		f.Store.Events = append(f.Store.Events, pipeline.Event{ID: "ev:" + benchKey(i), Key: benchKey(i), JobID: benchJob(i), Published: true})
	}
	return f
}

var benchOpts = Options{FencedAck: true, RelayRan: true}

// cpuTime is the CPU time this process used so far, user and system: on a
// machine shared with other work, operations per CPU second say what the
// checker costs, whatever the wall clock says.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, ops float64, start time.Duration) {
	if cpu := cpuTime() - start; cpu > 0 {
		b.ReportMetric(ops/cpu.Seconds(), "ops/cpu-s")
	}
}

// benchOps decodes a generated history of jobs jobs into memory.
func benchOps(tb testing.TB, jobs int, heavy bool) []history.Op {
	tb.Helper()
	ops := make([]history.Op, 0, jobs*opsPerJob)
	if _, err := ReadOps(newGen(jobs, heavy), func(op *history.Op) { ops = append(ops, *op) }); err != nil {
		tb.Fatal(err)
	}
	return ops
}

// The generator must produce what a clean pipeline produces: a checker that
// finds something in it, or accepts fewer jobs than were sent, is wrong.
func TestBenchHistoryIsClean(t *testing.T) {
	const jobs = 100
	for _, heavy := range []bool{false, true} {
		ops := benchOps(t, jobs, heavy)
		if len(ops) != jobs*opsPerJob {
			t.Fatalf("heavy %v: %d operations for %d jobs, want %d", heavy, len(ops), jobs, jobs*opsPerJob)
		}
		r := Check(ops, benchFinal(jobs), benchOpts)
		if len(r.Violations) > 0 || len(r.Undecided) > 0 || r.Valid != Valid {
			t.Fatalf("heavy %v: generated history: %v (valid %s, undecided %v)", heavy, properties(r.Violations), r.Valid, r.Undecided)
		}
		st := r.Stats
		n := 1 + boolInt(heavy)
		if st.Accepted != jobs || st.Committed != jobs || st.Executions != n*jobs || st.SpentAttempts != (n-1)*jobs || st.Applied != jobs || st.Deduped != (n-1)*jobs {
			t.Fatalf("heavy %v: stats %+v", heavy, st)
		}
	}
}

// BenchmarkCheck: the checker alone, on 1,000,000 operations held in memory
// (10,000 jobs × 100).
func BenchmarkCheck(b *testing.B) {
	const jobs = 10_000
	ops := benchOps(b, jobs, true)
	final := benchFinal(jobs)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		if r := Check(ops, final, benchOpts); r.Valid != Valid {
			b.Fatalf("valid %s: %v", r.Valid, properties(r.Violations))
		}
	}
	reportCPU(b, float64(len(ops))*float64(b.N), cpu)
	b.ReportMetric(float64(len(ops))*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkCheckStream: JSONL decoded and checked as it streams, 1,000,000
// operations (10,000 jobs × 100) from a buffer.
func BenchmarkCheckStream(b *testing.B) {
	const jobs = 10_000
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, newGen(jobs, true)); err != nil {
		b.Fatal(err)
	}
	final := benchFinal(jobs)
	b.SetBytes(int64(buf.Len()))
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		r, err := CheckReader(bytes.NewReader(buf.Bytes()), final, benchOpts)
		if err != nil || r.Valid != Valid || r.Ops != jobs*opsPerJob {
			b.Fatalf("err %v, valid %s, %d ops", err, r.Valid, r.Ops)
		}
	}
	reportCPU(b, float64(jobs*opsPerJob)*float64(b.N), cpu)
	b.ReportMetric(float64(jobs*opsPerJob)*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// BenchmarkCheckStream10M: a history of 10,000,000 operations of 100,000 plain
// jobs, generated as it streams (never held in memory), decoded and checked.
// It reports the checker's peak live heap while observing (sampled after a
// GC every million operations) as MB-heap, and the peak with the final state
// (100,000 results and events, the caller's) as MB-heap-with-final. Its time
// includes those forced collections: the throughput is BenchmarkCheckStream's.
func BenchmarkCheckStream10M(b *testing.B) { benchStream10M(b, false) }

// BenchmarkCheckStream10MHeavy: the same with heavy jobs (a failed first
// delivery, a lost commit reply): more operations kept per job.
func BenchmarkCheckStream10MHeavy(b *testing.B) { benchStream10M(b, true) }

func benchStream10M(b *testing.B, heavy bool) {
	const jobs = 100_000
	var peak, peakFinal uint64
	var ms runtime.MemStats
	sample := func(into *uint64) {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		*into = max(*into, ms.HeapAlloc)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	for b.Loop() {
		c := New(benchOpts)
		n := 0
		_, err := ReadOps(newGen(jobs, heavy), func(op *history.Op) {
			c.observe(op)
			n++
			if n%1_000_000 == 0 {
				sample(&peak)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		sample(&peak)
		final := benchFinal(jobs)
		r := c.Finish(final)
		sample(&peakFinal)
		runtime.KeepAlive(c)
		if r.Valid != Valid || r.Ops != jobs*opsPerJob || r.Stats.Accepted != jobs {
			b.Fatalf("valid %s, %d ops, %d accepted: %v", r.Valid, r.Ops, r.Stats.Accepted, properties(r.Violations))
		}
		runtime.KeepAlive(final)
	}
	b.ReportMetric(float64(peak-min(base, peak))/1e6, "MB-heap")
	b.ReportMetric(float64(peakFinal-min(base, peakFinal))/1e6, "MB-heap-with-final")
	b.ReportMetric(float64(peak-min(base, peak))/jobs, "B/job")
}
