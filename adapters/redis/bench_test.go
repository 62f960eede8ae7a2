package redis

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// BenchmarkAdapterLoop is enqueue → lease → ack through the adapter: XADD, the
// lease script (delayed set, XAUTOCLAIM, XREADGROUP, XPENDING) and the fenced
// ack script (XPENDING check, XACK, XDEL): three round trips per job.
//
// BenchmarkRawLoop is what a hand-written go-redis consumer sends for the same
// job, on a client of the same pool size: XADD, XREADGROUP COUNT 1, and XACK +
// XDEL in one pipeline: three round trips, no lease recovery, no fencing.
//
// The ratio raw ns/op ÷ adapter ns/op is the adapter's throughput relative to
// raw go-redis. On a shared machine the two separate benchmarks drift apart
// with the load; BenchmarkLoopRatio runs both loops in alternating batches in
// one process and reports the ratio itself. Re-measure with
//
//	DURACHK_REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench 'Loop' -benchtime 3s ./adapters/redis/
func BenchmarkAdapterLoop(b *testing.B) {
	q := newQueue(b, Options{})
	once := adapterLoop(b, q)
	for b.Loop() {
		once()
	}
}

func BenchmarkRawLoop(b *testing.B) {
	q := newQueue(b, Options{}) // provisions (and drops) the stream and group
	once := rawLoop(b, q)
	for b.Loop() {
		once()
	}
}

// BenchmarkLoopRatio alternates batches of the two loops on one queue and
// reports ns/op of each and their ratio (raw ÷ adapter: 1 means no overhead).
func BenchmarkLoopRatio(b *testing.B) {
	q := newQueue(b, Options{})
	adapter, raw := adapterLoop(b, q), rawLoop(b, q)
	var ta, tr time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		adapter()
		ta += time.Since(start)
		start = time.Now()
		raw()
		tr += time.Since(start)
		n++
	}
	b.ReportMetric(float64(ta.Nanoseconds())/float64(n), "adapter-ns/loop")
	b.ReportMetric(float64(tr.Nanoseconds())/float64(n), "raw-ns/loop")
	b.ReportMetric(float64(tr)/float64(ta), "ratio")
}

func adapterLoop(b *testing.B, q *Queue) func() {
	ctx := context.Background()
	j := job("bench")
	return func() {
		if err := q.Enqueue(ctx, j); err != nil {
			b.Fatal(err)
		}
		d, err := q.Lease(ctx, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Ack(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}

func rawLoop(b *testing.B, q *Queue) func() {
	ctx := context.Background()
	o, err := goredis.ParseURL(testURL(b))
	if err != nil {
		b.Fatal(err)
	}
	o.PoolSize = 2
	rdb := goredis.NewClient(o)
	b.Cleanup(func() { rdb.Close() })
	j := job("bench")
	payload, err := json.Marshal(j)
	if err != nil {
		b.Fatal(err)
	}
	return func() {
		if err := rdb.XAdd(ctx, &goredis.XAddArgs{Stream: q.stream, ID: "*", Values: []any{"id", j.ID, "base", "0", "job", payload}}).Err(); err != nil {
			b.Fatal(err)
		}
		res, err := rdb.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: Group, Consumer: "raw", Streams: []string{q.stream, ">"}, Count: 1, Block: -1}).Result()
		if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
			b.Fatal(err, res)
		}
		var got struct{ ID string }
		if err := json.Unmarshal([]byte(res[0].Messages[0].Values["job"].(string)), &got); err != nil {
			b.Fatal(err)
		}
		id := res[0].Messages[0].ID
		cmds, err := rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.XAck(ctx, q.stream, Group, id)
			p.XDel(ctx, q.stream, id)
			return nil
		})
		if err != nil || cmds[0].(*goredis.IntCmd).Val() != 1 {
			b.Fatal(err)
		}
	}
}
