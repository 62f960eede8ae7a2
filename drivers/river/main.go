// Command river is durachk's driver for River (github.com/riverqueue/river,
// Go, Postgres): River's own client runs the jobs — its fetch loop, its
// attempts and retry policy, its rescuer of stuck jobs, its completer — and
// the driver reports every step over the worker protocol
// (docs/worker-protocol.md; docs/river.md for the verdicts).
//
// Knobs (worker.<name>), named as River names them, each River's default when
// not given: RescueStuckJobsAfter, JobTimeout, FetchPollInterval,
// FetchCooldown (durations), MaxWorkers (of the default queue).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

const riverVersion = "v0.51.2"

type config struct {
	V         int               `json:"v"`
	Role      string            `json:"role"`
	Namespace string            `json:"namespace"`
	BrokerURL string            `json:"broker_url"`
	Knobs     map[string]string `json:"knobs"`
	Sabotage  string            `json:"sabotage"`
}

type msg struct {
	Type      string          `json:"type"`
	ID        int64           `json:"id,omitempty"`
	Re        int64           `json:"re,omitempty"`
	OK        bool            `json:"ok,omitempty"`
	Error     *protoErr       `json:"error,omitempty"`
	Job       json.RawMessage `json:"job,omitempty"`
	JobID     string          `json:"job_id,omitempty"`
	Token     int64           `json:"token,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	LeaseMS   int64           `json:"lease_ms,omitempty"`
	DelayMS   int64           `json:"delay_ms,omitempty"`
	Phase     string          `json:"phase,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Outcome   string          `json:"outcome,omitempty"`
	Inventory *inventory      `json:"inventory,omitempty"`
}

type protoErr struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

type inventory struct {
	Queued       []string          `json:"queued"`
	InFlight     []string          `json:"in_flight"`
	DeadLettered []string          `json:"dead_lettered"`
	Library      map[string]string `json:"library"`
}

// jobArgs is a durachk job as River's job arguments.
type jobArgs struct {
	ID  string          `json:"id"`
	Job json.RawMessage `json:"job"`
}

func (jobArgs) Kind() string { return "durachk" }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "river driver:", err)
		os.Exit(1)
	}
}

type conn struct {
	out    *bufio.Writer
	wmu    sync.Mutex
	mu     sync.Mutex
	nextID int64
	wait   map[int64]chan msg
}

func (c *conn) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.out.Write(append(b, '\n'))
	return c.out.Flush()
}

// report sends a report and waits for durachk's answer.
func (c *conn) report(ctx context.Context, m msg) (msg, error) {
	ch := make(chan msg, 1)
	c.mu.Lock()
	c.nextID++
	m.ID = c.nextID
	c.wait[m.ID] = ch
	c.mu.Unlock()
	if err := c.send(m); err != nil {
		return msg{}, err
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return msg{}, errors.New("durachk went away")
		}
		if a.Error != nil {
			return a, fmt.Errorf("%s: %s", a.Error.Code, a.Error.Message)
		}
		return a, nil
	case <-ctx.Done():
		return msg{}, ctx.Err()
	}
}

// settings are the River settings the knobs give.
type settings struct {
	cfg        river.Config
	maxWorkers int
}

func parseKnobs(knobs map[string]string) (settings, error) {
	s := settings{maxWorkers: 1}
	for k, v := range knobs {
		var err error
		switch k {
		case "RescueStuckJobsAfter":
			s.cfg.RescueStuckJobsAfter, err = time.ParseDuration(v)
		case "JobTimeout":
			s.cfg.JobTimeout, err = time.ParseDuration(v)
		case "FetchPollInterval":
			s.cfg.FetchPollInterval, err = time.ParseDuration(v)
		case "FetchCooldown":
			s.cfg.FetchCooldown, err = time.ParseDuration(v)
		case "MaxWorkers":
			s.maxWorkers, err = strconv.Atoi(v)
		default:
			return s, fmt.Errorf("unknown knob %q (known: RescueStuckJobsAfter, JobTimeout, FetchPollInterval, FetchCooldown, MaxWorkers)", k)
		}
		if err != nil {
			return s, fmt.Errorf("%s=%q: %v", k, v, err)
		}
	}
	return s, nil
}

func run() error {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	c := &conn{out: bufio.NewWriter(os.Stdout), wait: map[int64]chan msg{}}
	if !in.Scan() {
		return errors.New("no configuration on stdin")
	}
	var cfg config
	if err := json.Unmarshal(in.Bytes(), &cfg); err != nil {
		return err
	}
	st, err := parseKnobs(cfg.Knobs)
	if err == nil && cfg.Sabotage != "" {
		err = fmt.Errorf("no sabotage %q", cfg.Sabotage)
	}
	if err != nil {
		return c.send(map[string]any{"type": "hello", "v": 1, "error": err.Error()})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.send(map[string]any{"type": "hello", "v": 1, "driver": "durachk-river", "library": "river", "version": riverVersion,
		// From River's documentation: a job whose worker died is worked again
		// once the rescuer finds it running past RescueStuckJobsAfter; nothing
		// renews that; every fetch increments the job's attempt (a fencing
		// number), which River's completer does not compare: it completes a
		// running job by id. Exhausted jobs are discarded, JobCancel cancels.
		"capabilities": map[string]any{"lease": "native", "lease_extension": "none", "token": "native", "fenced_ack": false,
			"delivery_count": "native", "dead_letter": "native", "delayed_nack": "native", "cancel": "native", "fifo": false, "durable": true,
			"notes": []string{"lease: River's rescuer (RescueStuckJobsAfter, default 1h); token: the job's attempt, incremented at every fetch; exhausted jobs: state discarded; a permanent error: JobCancel (state cancelled)"}},
	}); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.BrokerURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	d := &driver{cfg: cfg, c: c, pool: pool, st: st, pending: map[string]string{}}
	requests := make(chan msg, 16)
	go func() {
		defer cancel()
		for in.Scan() {
			var m msg
			if json.Unmarshal(in.Bytes(), &m) != nil {
				continue
			}
			if m.Type == "answer" {
				c.mu.Lock()
				ch := c.wait[m.Re]
				delete(c.wait, m.Re)
				c.mu.Unlock()
				if ch != nil {
					ch <- m
				}
				continue
			}
			requests <- m
		}
	}()
	if cfg.Role == "admin" {
		return d.admin(ctx, requests)
	}
	return d.work(ctx)
}

type driver struct {
	cfg     config
	c       *conn
	pool    *pgxpool.Pool
	st      settings
	migrate sync.Mutex
	ready   bool
	mu      sync.Mutex
	pending map[string]string // job id/attempt → the report whose outcome River's event gives
}

// ensure migrates River's tables into the run's schema once (under an
// advisory lock: several processes start at once).
func (d *driver) ensure(ctx context.Context) error {
	d.migrate.Lock()
	defer d.migrate.Unlock()
	if d.ready {
		return nil
	}
	cn, err := d.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer cn.Release()
	if _, err := cn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('durachk-river:' || $1))`, d.cfg.Namespace); err != nil {
		return err
	}
	defer cn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('durachk-river:' || $1))`, d.cfg.Namespace)
	if _, err := cn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{d.cfg.Namespace}.Sanitize()); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(d.pool), &rivermigrate.Config{Schema: d.cfg.Namespace, Logger: logger()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	d.ready = true
	return nil
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func (d *driver) answer(m msg, a msg, err error) {
	a.Type, a.Re = "answer", m.ID
	if err != nil {
		code := "unavailable"
		if errors.Is(err, context.DeadlineExceeded) {
			code = "ambiguous"
		}
		a.Error = &protoErr{Code: code, Message: err.Error()}
	} else {
		a.OK = true
	}
	_ = d.c.send(a)
}

func (d *driver) admin(ctx context.Context, requests <-chan msg) error {
	var client *river.Client[pgx.Tx]
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-requests:
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			switch m.Type {
			case "enqueue":
				err := d.ensure(qctx)
				if err == nil && client == nil {
					// Insert-only: no queues, no workers.
					client, err = river.NewClient(riverpgxv5.New(d.pool), &river.Config{Schema: d.cfg.Namespace, Logger: logger()})
				}
				if err == nil {
					var j struct {
						ID          string `json:"id"`
						MaxAttempts int    `json:"max_attempts"`
					}
					_ = json.Unmarshal(m.Job, &j)
					_, err = client.Insert(qctx, jobArgs{ID: j.ID, Job: m.Job}, &river.InsertOpts{MaxAttempts: max(j.MaxAttempts, 1)})
				}
				d.answer(m, msg{}, err)
			case "inspect":
				inv, err := d.inspect(qctx)
				d.answer(m, msg{Inventory: inv}, err)
			case "drop":
				_, err := d.pool.Exec(qctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{d.cfg.Namespace}.Sanitize()+` CASCADE`)
				d.answer(m, msg{}, err)
			default:
				_ = d.c.send(msg{Type: "answer", Re: m.ID, Error: &protoErr{Code: "unsupported", Message: m.Type}})
			}
			cancel()
		}
	}
}

// inspect reads River's job table: every job's state in River's words.
func (d *driver) inspect(ctx context.Context) (*inventory, error) {
	inv := &inventory{Queued: []string{}, InFlight: []string{}, DeadLettered: []string{}, Library: map[string]string{}}
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	rows, err := d.pool.Query(ctx, `SELECT args->>'id', state::text FROM `+pgx.Identifier{d.cfg.Namespace, "river_job"}.Sanitize()+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return nil, err
		}
		inv.Library[id] = state
		switch rivertype.JobState(state) {
		case rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable, rivertype.JobStatePending:
			inv.Queued = append(inv.Queued, id)
		case rivertype.JobStateRunning:
			inv.InFlight = append(inv.InFlight, id)
		case rivertype.JobStateDiscarded:
			inv.DeadLettered = append(inv.DeadLettered, id)
		}
	}
	return inv, rows.Err()
}

// work runs River's client until ctx ends.
func (d *driver) work(ctx context.Context) error {
	for {
		err := d.ensure(ctx)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &handler{d: d})
	rc := d.st.cfg
	rc.Schema, rc.Logger, rc.Workers = d.cfg.Namespace, logger(), workers
	rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: d.st.maxWorkers}}
	client, err := river.NewClient(riverpgxv5.New(d.pool), &rc)
	if err != nil {
		return err
	}
	events, cancelEvents := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobCancelled, river.EventKindJobFailed)
	defer cancelEvents()
	go d.outcomes(ctx, events)
	// River's Start fails when its first connection does (a partition
	// the plan holds): a supervised worker tries again.
	for {
		err := client.Start(ctx)
		if err == nil {
			break
		}
		fmt.Fprintln(os.Stderr, "river driver: start:", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_ = client.Stop(sctx)
	return nil
}

func pendingKey(id string, attempt int) string { return id + "/" + strconv.Itoa(attempt) }

// outcomes reports the end of each report River's completer confirms.
func (d *driver) outcomes(ctx context.Context, events <-chan *river.Event) {
	for ev := range events {
		if ev.Job == nil {
			continue
		}
		var a jobArgs
		if json.Unmarshal(ev.Job.EncodedArgs, &a) != nil {
			continue
		}
		key := pendingKey(a.ID, ev.Job.Attempt)
		d.mu.Lock()
		kind := d.pending[key]
		delete(d.pending, key)
		d.mu.Unlock()
		if kind == "" {
			continue
		}
		_, _ = d.c.report(ctx, msg{Type: kind, JobID: a.ID, Token: int64(ev.Job.Attempt), Phase: "ok"})
	}
}

type handler struct {
	river.WorkerDefaults[jobArgs]
	d *driver
}

// Work is River's handler: received, the effect through durachk, then the
// outcome mapped onto River's (nil completes, an error retries or discards,
// JobCancel cancels).
func (h *handler) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	d := h.d
	id, token := job.Args.ID, int64(job.Attempt)
	lease := d.st.cfg.RescueStuckJobsAfter
	if lease == 0 {
		lease = time.Hour // River's default
	}
	if _, err := d.c.report(ctx, msg{Type: "received", Job: job.Args.Job, Token: token, Attempt: job.Attempt, LeaseMS: lease.Milliseconds()}); err != nil {
		return err
	}
	a, err := d.c.report(ctx, msg{Type: "effect", JobID: id, Token: token, Attempt: job.Attempt})
	if err != nil {
		return err
	}
	invoke := func(kind string, m msg) (msg, error) {
		d.mu.Lock()
		d.pending[pendingKey(id, job.Attempt)] = kind
		d.mu.Unlock()
		m.Type, m.JobID, m.Token, m.Phase = kind, id, token, "invoke"
		return d.c.report(ctx, m)
	}
	complete := func() error {
		_, err := invoke("ack", msg{})
		return err
	}
	switch a.Outcome {
	case "applied", "deduped", "terminal", "stale":
		// stale too: River completes a running job by its id, whatever its
		// attempt; there is no way to give the job up to its newer holder.
		return complete()
	case "cancelled":
		if _, err := invoke("ack", msg{}); err != nil {
			return err
		}
		return river.JobCancel(errors.New("deadline passed"))
	case "permanent":
		r, err := invoke("dead_letter", msg{Reason: a.Reason})
		if err != nil {
			return err
		}
		if r.Outcome == "terminal" {
			return complete()
		}
		return river.JobCancel(errors.New(a.Reason))
	case "transient", "unavailable":
		if job.Attempt >= job.MaxAttempts {
			r, err := invoke("dead_letter", msg{Reason: "max_attempts_exceeded"})
			if err != nil {
				return err
			}
			if r.Outcome == "terminal" {
				return complete()
			}
			return errors.New(a.Outcome)
		}
		next := (&river.DefaultClientRetryPolicy{}).NextRetry(job.JobRow)
		m := msg{DelayMS: time.Until(next).Milliseconds()}
		if a.Outcome == "unavailable" {
			m.Reason = "released"
		}
		if _, err := invoke("nack", m); err != nil {
			return err
		}
		return errors.New(a.Outcome)
	}
	return fmt.Errorf("unknown outcome %q", a.Outcome)
}
