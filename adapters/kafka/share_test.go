package kafka_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters"
	kq "github.com/durachk/durachk/adapters/kafka"
	"github.com/durachk/durachk/adapters/queuetest"
	"github.com/durachk/durachk/internal/targets"
)

// shareBroker is the private kfake of the share-group tests: its lock is
// short (a conformance script's lease unit) and its delivery limit Kafka's default, 5.
var shareBroker struct {
	once sync.Once
	inst targets.Instance
	dir  string
	url  string
	lock time.Duration
	err  error
}

const shareLimit = 5

func shareURL(t *testing.T) (string, time.Duration) {
	t.Helper()
	b := &shareBroker
	b.once.Do(func() {
		b.lock = time.Duration(float64(time.Second) * queuetest.LoadFactor()).Round(100 * time.Millisecond)
		spec, err := targets.Parse(fmt.Sprintf("kafka://127.0.0.1:9092?group.type=share&group.share.record.lock.duration.ms=%d&group.share.delivery.count.limit=%d",
			b.lock.Milliseconds(), shareLimit))
		if err != nil {
			b.err = err
			return
		}
		if b.dir, b.err = os.MkdirTemp("", "durachk-kafka-share-test-"); b.err != nil {
			return
		}
		spec.RunID = queuetest.RunID()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b.inst, spec, b.err = targets.StartPrivate(ctx, spec, b.dir)
		b.url = spec.URL
	})
	if b.err != nil {
		t.Fatalf("private kfake for share groups: %v", b.err)
	}
	return b.url, b.lock
}

func stopShareBroker() {
	if shareBroker.inst != nil {
		_ = shareBroker.inst.Stop()
	}
	if shareBroker.dir != "" {
		os.RemoveAll(shareBroker.dir)
	}
}

// openShare opens a share-group queue of a fresh run; its topics and group
// are dropped at the end of the test, and the test fails if any is left.
func openShare(t *testing.T) *kq.ShareQueue {
	t.Helper()
	u, _ := shareURL(t)
	id := queuetest.RunID()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := kq.OpenShare(ctx, u, id, kq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := q.Drop(ctx); err != nil {
			t.Errorf("drop: %v", err)
		}
		q.Close()
		if left, err := kq.Leftovers(ctx, u, "", id); err != nil || len(left) > 0 {
			t.Errorf("left on the broker after Drop: %v %v", left, err)
		}
	})
	return q
}

// TestShareConformance runs the port's conformance suite on a share group:
// the lease is the broker's lock (the scripts' lease unit), a stale
// delivery's ack is refused by the broker as a lost lease.
func TestShareConformance(t *testing.T) {
	_, lock := shareURL(t)
	queuetest.Run(t, func(t *testing.T, o queuetest.Options) adapters.Queue {
		return openShare(t)
	}, queuetest.Features{LeaseUnit: lock, StaleIsLost: true, ExpiryReleases: true})
}

// TestShareSettingsRead: the queue runs with the broker's lock and delivery
// limit, read from it, and says so.
func TestShareSettingsRead(t *testing.T) {
	_, lock := shareURL(t)
	q := openShare(t)
	if q.Lock() != lock {
		t.Errorf("lock %s, want the broker's %s", q.Lock(), lock)
	}
	want := "group.share.delivery.count.limit=" + strconv.Itoa(shareLimit)
	found := false
	for _, n := range q.Capabilities().Notes {
		if strings.Contains(n, want) {
			found = true
		}
	}
	if !found {
		t.Errorf("notes %v do not name %s", q.Capabilities().Notes, want)
	}
}

// TestShareArchival: a record released as often as the broker's delivery
// limit allows is archived by the broker, and Inspect reports it as the
// broker's own action; an accepted record beside it is not (the control).
func TestShareArchival(t *testing.T) {
	q := openShare(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, id := range []string{"poison", "fine"} {
		if err := q.Enqueue(ctx, queuetest.Job(id)); err != nil {
			t.Fatal(err)
		}
	}
	lease := func() adapters.Delivery {
		for deadline := time.Now().Add(20 * time.Second); ; {
			d, err := q.Lease(ctx, time.Second)
			if err == nil {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease: %v", err)
			}
		}
	}
	released, fine := 0, false
	for released < shareLimit || !fine {
		d := lease()
		if d.Job.ID == "fine" {
			if err := q.Ack(ctx, d); err != nil {
				t.Fatal(err)
			}
			fine = true
			continue
		}
		if d.Attempt != released+1 {
			t.Errorf("delivery %d of poison has attempt %d", released+1, d.Attempt)
		}
		if err := q.Nack(ctx, d, 0); err != nil {
			t.Fatal(err)
		}
		released++
	}
	var inv adapters.Inventory
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if inv, err = q.Inspect(ctx); err != nil {
			t.Fatal(err)
		}
		if len(inv.Moved) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(inv.Moved) != 1 || inv.Moved[0].Job != "poison" || inv.Moved[0].Action != adapters.ActionDeadLettered || !strings.Contains(inv.Moved[0].Reason, "group.share.delivery.count.limit") {
		t.Errorf("moved by the broker %+v, want poison archived at the delivery limit", inv.Moved)
	}
	if len(inv.Queued)+len(inv.InFlight)+len(inv.DeadLettered) > 0 {
		t.Errorf("inventory %+v, want nothing but the archived record", inv)
	}
}
