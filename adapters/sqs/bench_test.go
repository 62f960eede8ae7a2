package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// roundTrip is one send → receive → delete, through the adapter or with the
// SDK directly (the same calls the adapter makes, nothing else).
type roundTrip func(ctx context.Context) error

func adapterRoundTrip(q *Queue) roundTrip {
	j := job("bench")
	return func(ctx context.Context) error {
		if err := q.Enqueue(ctx, j); err != nil {
			return err
		}
		d, err := q.Lease(ctx, time.Second)
		if err != nil {
			return err
		}
		return q.Ack(ctx, d)
	}
}

func rawRoundTrip(q *Queue) roundTrip {
	body, _ := json.Marshal(message{job("bench")})
	url := aws.String(q.url)
	return func(ctx context.Context) error {
		if _, err := q.client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(string(body))}); err != nil {
			return err
		}
		out, err := q.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: 1, VisibilityTimeout: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil {
			return err
		}
		if len(out.Messages) == 0 {
			return errNoMessage
		}
		_, err = q.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: out.Messages[0].ReceiptHandle})
		return err
	}
}

var errNoMessage = errors.New("benchmark: no message received")

// BenchmarkRoundTrip: go test -run '^$' -bench RoundTrip ./adapters/sqs/
func BenchmarkRoundTrip(b *testing.B) {
	q := newQueue(b, nil)
	for _, bc := range []struct {
		name string
		rt   roundTrip
	}{{"adapter", adapterRoundTrip(q)}, {"raw-sdk", rawRoundTrip(q)}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				if err := bc.rt(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoopRatio alternates the two loops on one queue, so that the
// emulator's warm-up and load fall on both alike, and reports ns/op of each
// and their ratio (raw ÷ adapter: 1 means no overhead; the aim is ≥ 0.8). A
// measurement, not a test: go test -run '^$' -bench LoopRatio ./adapters/sqs/
func BenchmarkLoopRatio(b *testing.B) {
	q := newQueue(b, nil)
	ctx := context.Background()
	adapter, raw := adapterRoundTrip(q), rawRoundTrip(q)
	var ta, tr time.Duration
	n := 0
	for b.Loop() {
		for _, x := range []struct {
			rt  roundTrip
			acc *time.Duration
		}{{adapter, &ta}, {raw, &tr}} {
			start := time.Now()
			if err := x.rt(ctx); err != nil {
				b.Fatal(err)
			}
			*x.acc += time.Since(start)
		}
		n++
	}
	b.ReportMetric(float64(ta.Nanoseconds())/float64(n), "adapter-ns/loop")
	b.ReportMetric(float64(tr.Nanoseconds())/float64(n), "raw-ns/loop")
	b.ReportMetric(float64(tr)/float64(ta), "ratio")
}
