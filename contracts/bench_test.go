package contracts

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/history"
	"github.com/durachk/durachk/internal/sim"
	"github.com/durachk/durachk/pipeline"
)

// opsPerJob is what benchHistory records for every job: invoke and ok of
// enqueue, lease, fence, extract, commit and ack.
const opsPerJob = 12

type benchData struct {
	ops   []history.Op
	final Final
	jobs  int
}

var (
	benchMu    sync.Mutex
	benchCache = map[int]*benchData{}
)

// benchHistory generates, once per size, a clean history of jobs jobs processed
// by 8 workers whose steps interleave, with the final state that goes with it.
func benchHistory(jobs int) *benchData {
	benchMu.Lock()
	defer benchMu.Unlock()
	if d, ok := benchCache[jobs]; ok {
		return d
	}
	const workers = 8
	d := &benchData{jobs: jobs, ops: make([]history.Op, 0, jobs*opsPerJob)}
	d.final = Final{Drained: true, Store: pipeline.State{
		Results: make([]pipeline.Result, 0, jobs), Events: make([]pipeline.Event, 0, jobs), Applied: map[string]int{}}}
	now := sim.Epoch.UnixNano()
	seq := map[string]int64{}
	rec := func(op history.Op) {
		now += int64(137 * time.Microsecond)
		seq[op.Process]++
		op.T, op.Seq = now, seq[op.Process]
		d.ops = append(d.ops, op)
	}
	procs := make([]string, workers)
	for w := range procs {
		procs[w] = fmt.Sprintf("w%d", w+1)
	}
	type slot struct {
		job  adapters.Job
		key  string
		proc string
	}
	batch := make([]slot, 0, workers)
	tenants := []string{"acme", "globex", "initech", "umbrella"}
	flush := func() {
		for _, s := range batch {
			rec(history.Op{Process: s.proc, Type: history.Invoke, F: history.Lease})
		}
		for _, s := range batch {
			rec(history.Op{Process: s.proc, Type: history.OK, F: history.Lease, Job: s.job.ID, Key: s.key, Token: 1, Attempt: 1, Value: "10000"})
		}
		for _, f := range []history.F{history.Fence, history.Extract, history.Commit, history.Ack} {
			for _, s := range batch {
				rec(history.Op{Process: s.proc, Type: history.Invoke, F: f, Job: s.job.ID, Key: s.key, Token: 1, Attempt: 1})
			}
			for _, s := range batch {
				op := history.Op{Process: s.proc, Type: history.OK, F: f, Job: s.job.ID, Key: s.key, Token: 1, Attempt: 1}
				switch f {
				case history.Extract:
					op.Value = "digest:" + s.job.DocumentID
				case history.Commit:
					op.Value = "new"
				}
				rec(op)
			}
		}
		batch = batch[:0]
	}
	for i := range jobs {
		p := pipeline.Payload{Doc: fmt.Sprintf("doc-%07d", i), Text: fmt.Sprintf("invoice %d", i*7919%100000)}
		job := adapters.Job{ID: fmt.Sprintf("job-%07d", i), Tenant: tenants[i%len(tenants)], DocumentID: p.Doc, Version: 1,
			Payload: p.Encode(), MaxAttempts: 3, CreatedAt: time.Unix(0, now)}
		key, err := pipeline.BuildKey(job.Tenant, job.DocumentID, job.Version)
		if err != nil {
			panic(err)
		}
		meta, _ := json.Marshal(pipeline.MetaOf(job))
		rec(history.Op{Process: "producer", Type: history.Invoke, F: history.Enqueue, Job: job.ID, Key: key, Value: string(meta)})
		rec(history.Op{Process: "producer", Type: history.OK, F: history.Enqueue, Job: job.ID, Key: key})
		batch = append(batch, slot{job: job, key: key, proc: procs[i%workers]})
		d.final.Store.Results = append(d.final.Store.Results, pipeline.Result{Key: key, JobID: job.ID, Tenant: job.Tenant,
			Hash: pipeline.Hash(job.Payload), Token: 1, EventID: "ev:" + key})
		d.final.Store.Events = append(d.final.Store.Events, pipeline.Event{ID: "ev:" + key, Key: key, JobID: job.ID, Published: true})
		if len(batch) == workers {
			flush()
		}
	}
	flush()
	benchCache[jobs] = d
	return d
}

func benchCheck(b *testing.B, jobs int) {
	d := benchHistory(jobs)
	if len(d.ops) != jobs*opsPerJob {
		b.Fatalf("%d ops for %d jobs", len(d.ops), jobs)
	}
	opts := CheckOptions{FencedAck: true}
	// The history is clean: a checker that finds something in it is wrong, and
	// one that accepts fewer jobs than were sent did not read it.
	vs, st, unknown := Check(d.ops, d.final, opts)
	if len(vs) > 0 || len(unknown) > 0 || st.Accepted != jobs || st.Committed != jobs || st.Executions != jobs {
		b.Fatalf("generated history: %d violations (%v), unknown %v, stats %+v", len(vs), properties(vs), unknown, st)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		Check(d.ops, d.final, opts)
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	total := float64(len(d.ops)) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "ops/s")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/total, "B/histop")
}

// BenchmarkCheck: about 1,000,000 operations (83,334 jobs × 12).
func BenchmarkCheck(b *testing.B) { benchCheck(b, 1_000_000/opsPerJob+1) }

// BenchmarkCheck10xJobs: ten times the jobs, the same operations per job, so
// that B/histop shows whether the checker's memory grows per job or per op.
func BenchmarkCheck10xJobs(b *testing.B) { benchCheck(b, 10*(1_000_000/opsPerJob+1)) }

// The benchmark's generator must produce what the pipeline produces: keep it
// honest with a small run through the checker in the normal test suite.
func TestBenchHistoryIsClean(t *testing.T) {
	d := benchHistory(100)
	vs, st, unknown := Check(d.ops, d.final, CheckOptions{FencedAck: true})
	if len(vs) > 0 || len(unknown) > 0 || st.Accepted != 100 || st.Committed != 100 {
		t.Fatalf("violations %v, unknown %v, stats %+v", properties(vs), unknown, st)
	}
}
