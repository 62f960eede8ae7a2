package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/durachk/durachk/adapters/queuetest"
	"github.com/durachk/durachk/internal/targets"
)

func TestDebugReconnect(t *testing.T) {
	ctx := context.Background()
	spec, _ := targets.Parse("nats://127.0.0.1:4222")
	spec.RunID = "tdebug" + queuetest.RunID()[1:7]
	inst, pspec, err := targets.StartPrivate(ctx, spec, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	q, err := targets.OpenQueue(ctx, pspec)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, id := range []string{"a", "b", "c"} {
		if err := q.Enqueue(ctx, queuetest.Job(id)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := q.Lease(ctx, time.Second)
	t.Log(d.Job.ID, err)
	go func() {
		time.Sleep(100 * time.Millisecond)
		inst.Kill()
		time.Sleep(330 * time.Millisecond)
		inst.Restart(ctx)
	}()
	for i := 0; i < 40; i++ {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		d, err := q.Lease(c, time.Second)
		cancel()
		t.Log(time.Now().Format("05.000"), d.Job.ID, d.Attempt, err)
		time.Sleep(20 * time.Millisecond)
	}
}
