package nats

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durachk/durachk/adapters/queuetest"
)

// BenchmarkAdapterLoop is enqueue → lease → ack through the adapter: a
// publish awaiting its PubAck, a pull request for one message (with a reply
// subscription of its own) and AckSync: three round trips per job.
//
// BenchmarkRawLoop is what a hand-written nats.go consumer sends for the same
// job on the same stream and consumer, with the jetstream package: Publish
// (PubAck), Consumer.Fetch(1) and Msg.DoubleAck — three round trips, no JSON
// decoding of the job, no receipts.
//
// The ratio raw ns/op ÷ adapter ns/op is the adapter's throughput relative to
// raw nats.go. On a shared machine two separate benchmarks drift apart with
// the load; BenchmarkLoopRatio runs both loops in alternating batches in one
// process and reports the ratio itself. Re-measure with
//
//	DURACHK_NATS_URL=nats://127.0.0.1:4222 go test -run '^$' -bench 'Loop' -benchtime 3s ./adapters/nats/
func BenchmarkAdapterLoop(b *testing.B) {
	once := adapterLoop(b, newQueue(b, Options{}))
	for b.Loop() {
		once()
	}
}

func BenchmarkRawLoop(b *testing.B) {
	once := rawLoop(b, newQueue(b, Options{})) // provisions (and drops) the streams and the consumer
	for b.Loop() {
		once()
	}
}

// BenchmarkLoopRatio alternates the two loops on one stream and consumer and
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
	j := queuetest.Job("bench")
	i := 0
	return func() {
		i++
		j.ID = "bench-a" + itoa(i) // distinct ids: the broker deduplicates by job id
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
	nc, err := connect(testURL(b), "raw bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	cons, err := js.Consumer(ctx, q.stream, ConsumerName)
	if err != nil {
		b.Fatal(err)
	}
	j := queuetest.Job("bench")
	payload, err := json.Marshal(j)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	return func() {
		i++
		if _, err := js.Publish(ctx, q.subj, payload, jetstream.WithMsgID("bench-r"+itoa(i))); err != nil {
			b.Fatal(err)
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				b.Fatal(err)
			}
			got++
		}
		if got != 1 || batch.Error() != nil {
			b.Fatal(got, batch.Error())
		}
	}
}

func itoa(i int) string {
	b := make([]byte, 0, 12)
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}
