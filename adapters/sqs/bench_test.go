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

// TestAdapterThroughputRatio measures both loops in the same run, interleaved in
// rounds so that the emulator's warm-up and load fall on both alike, and
// reports adapter/raw throughput. The aim is ≥ 0.8; the test fails only below
// 0.5 (a shared machine is noisy). Re-measure with
// go test -run AdapterThroughputRatio -v ./adapters/sqs/
func TestAdapterThroughputRatio(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement")
	}
	q := newQueue(t, nil)
	ctx := context.Background()
	adapter, raw := adapterRoundTrip(q), rawRoundTrip(q)
	var ta, tr time.Duration
	const rounds, per = 10, 20
	for range rounds {
		for _, x := range []struct {
			rt  roundTrip
			acc *time.Duration
		}{{adapter, &ta}, {raw, &tr}} {
			start := time.Now()
			for range per {
				if err := x.rt(ctx); err != nil {
					t.Fatal(err)
				}
			}
			*x.acc += time.Since(start)
		}
	}
	n := float64(rounds * per)
	ratio := tr.Seconds() / ta.Seconds() // throughput ratio = inverse time ratio
	t.Logf("send→receive→delete: adapter %.0f/s, raw SDK %.0f/s, ratio %.2f (aim ≥ 0.8)", n/ta.Seconds(), n/tr.Seconds(), ratio)
	if ratio < 0.5 {
		t.Errorf("the adapter runs at %.2f of the raw SDK loop", ratio)
	}
}
