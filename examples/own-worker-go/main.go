// Command own-worker-go is a minimal job worker of a team's own, on Postgres
// (FOR UPDATE SKIP LOCKED, a lease column, a fencing token), speaking
// durachk's worker protocol (docs/worker-protocol.md) so that durachk can put
// it under its faults and its checker:
//
//	durachk run --target 'postgres://127.0.0.1:5432/test?worker.command=/path/to/own-worker-go'
//
// It imports nothing of durachk: the protocol is JSON lines on stdin and
// stdout. Knobs (worker.<name>): backoff (a duration, the first retry's
// delay, doubled per attempt; default 100ms), heartbeat (true|false, default
// true). Sabotages (worker.sabotage, negative controls): ack-before-effect,
// ignore-token.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type config struct {
	V         int               `json:"v"`
	Role      string            `json:"role"`
	Process   string            `json:"process"`
	Namespace string            `json:"namespace"`
	BrokerURL string            `json:"broker_url"`
	LeaseMS   int64             `json:"lease_ms"`
	PollMS    int64             `json:"poll_ms"`
	Knobs     map[string]string `json:"knobs"`
	Sabotage  string            `json:"sabotage"`
}

// msg is every line after the hello, both ways.
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

var sabotages = []string{"ack-before-effect", "ignore-token"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "own-worker-go:", err)
		os.Exit(1)
	}
}

// conn is the protocol over stdin and stdout.
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

// report sends a report and waits for durachk's answer: durachk records the
// step, and may stop or kill this process before it answers.
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
	w := &worker{cfg: cfg, c: c, backoff: 100 * time.Millisecond, heartbeat: true}
	if err := w.knobs(); err != nil {
		return c.send(map[string]any{"type": "hello", "v": 1, "error": err.Error()})
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.send(map[string]any{"type": "hello", "v": 1, "driver": "own-worker-go", "library": "own (Postgres SKIP LOCKED)", "version": "0.1.0",
		"capabilities": map[string]any{"lease": "native", "lease_extension": "native", "token": "native", "fenced_ack": true,
			"delivery_count": "native", "dead_letter": "native", "delayed_nack": "native", "cancel": "native", "fifo": false, "durable": true,
			"notes": []string{"a job's attempts are counted at every lease (a crash loop too); a job leased past its max_attempts goes to state discarded unrun"}},
		"sabotages": sabotages}); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.BrokerURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	w.db = pool
	requests := make(chan msg, 16)
	// Reading stdin: answers go to their reports; stdin's end is the end.
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
		return w.admin(ctx, requests)
	}
	return w.loop(ctx)
}

type worker struct {
	cfg       config
	c         *conn
	db        *pgxpool.Pool
	backoff   time.Duration
	heartbeat bool
	setup     sync.Once
	setupErr  error
}

func (w *worker) knobs() error {
	for k, v := range w.cfg.Knobs {
		switch k {
		case "backoff":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("backoff=%q: want a duration", v)
			}
			w.backoff = d
		case "heartbeat":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("heartbeat=%q: want true or false", v)
			}
			w.heartbeat = b
		default:
			return fmt.Errorf("unknown knob %q (known: backoff, heartbeat)", k)
		}
	}
	if s := w.cfg.Sabotage; s != "" && s != sabotages[0] && s != sabotages[1] {
		return fmt.Errorf("unknown sabotage %q", s)
	}
	return nil
}

func (w *worker) table() string { return pgx.Identifier{w.cfg.Namespace, "jobs"}.Sanitize() }

// ensure creates the namespace's schema and table once, under an advisory
// lock: several processes start at once.
func (w *worker) ensure(ctx context.Context) error {
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	ns := pgx.Identifier{w.cfg.Namespace}.Sanitize()
	for _, q := range []string{
		`SELECT pg_advisory_xact_lock(hashtext('own-worker-go:' || $1))`,
		`CREATE SCHEMA IF NOT EXISTS ` + ns,
		`CREATE TABLE IF NOT EXISTS ` + w.table() + ` (seq bigserial, id text PRIMARY KEY, job jsonb NOT NULL,
			state text NOT NULL DEFAULT 'queued', token bigint NOT NULL DEFAULT 0, attempt int NOT NULL DEFAULT 0,
			max_attempts int NOT NULL, run_at timestamptz NOT NULL DEFAULT now(), lease_until timestamptz)`,
	} {
		var args []any
		if q[0] == 'S' {
			args = []any{w.cfg.Namespace}
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// answer answers durachk's request m.
func (w *worker) answer(m msg, a msg, err error) {
	a.Type, a.Re = "answer", m.ID
	if err != nil {
		code := "unavailable"
		if errors.Is(err, context.DeadlineExceeded) {
			code = "ambiguous" // it may have been done
		}
		a.Error = &protoErr{Code: code, Message: err.Error()}
	} else {
		a.OK = true
	}
	_ = w.c.send(a)
}

func (w *worker) admin(ctx context.Context, requests <-chan msg) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-requests:
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			switch m.Type {
			case "enqueue":
				err := w.ensure(qctx)
				if err == nil {
					var j struct {
						ID          string `json:"id"`
						MaxAttempts int    `json:"max_attempts"`
					}
					_ = json.Unmarshal(m.Job, &j)
					_, err = w.db.Exec(qctx, `INSERT INTO `+w.table()+` (id, job, max_attempts) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
						j.ID, []byte(m.Job), max(j.MaxAttempts, 1))
				}
				w.answer(m, msg{}, err)
			case "inspect":
				inv, err := w.inspect(qctx)
				w.answer(m, msg{Inventory: inv}, err)
			case "drop":
				_, err := w.db.Exec(qctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{w.cfg.Namespace}.Sanitize()+` CASCADE`)
				w.answer(m, msg{}, err)
			default:
				_ = w.c.send(msg{Type: "answer", Re: m.ID, Error: &protoErr{Code: "unsupported", Message: m.Type}})
			}
			cancel()
		}
	}
}

func (w *worker) inspect(ctx context.Context) (*inventory, error) {
	inv := &inventory{Queued: []string{}, InFlight: []string{}, DeadLettered: []string{}, Library: map[string]string{}}
	if err := w.ensure(ctx); err != nil {
		return nil, err
	}
	rows, err := w.db.Query(ctx, `SELECT id, state FROM `+w.table()+` ORDER BY seq`)
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
		switch state {
		case "queued":
			inv.Queued = append(inv.Queued, id)
		case "active":
			inv.InFlight = append(inv.InFlight, id)
		case "discarded":
			inv.DeadLettered = append(inv.DeadLettered, id)
		}
	}
	return inv, rows.Err()
}

// loop leases and works one job at a time until ctx ends.
func (w *worker) loop(ctx context.Context) error {
	lease := time.Duration(w.cfg.LeaseMS) * time.Millisecond
	poll := max(time.Duration(w.cfg.PollMS)*time.Millisecond, 10*time.Millisecond)
	for ctx.Err() == nil {
		if err := w.ensure(ctx); err != nil {
			sleep(ctx, poll)
			continue
		}
		worked, err := w.step(ctx, lease)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "own-worker-go:", err)
		}
		if !worked {
			sleep(ctx, poll)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

type delivery struct {
	id          string
	job         json.RawMessage
	token       int64
	attempt     int
	maxAttempts int
}

func (w *worker) step(ctx context.Context, lease time.Duration) (bool, error) {
	var d delivery
	qctx, cancel := context.WithTimeout(ctx, 3*lease)
	err := w.db.QueryRow(qctx, `UPDATE `+w.table()+` SET state = 'active', token = token + 1, attempt = attempt + 1,
			lease_until = now() + $1::bigint * interval '1 millisecond'
		WHERE id = (SELECT id FROM `+w.table()+` WHERE (state = 'queued' AND run_at <= now()) OR (state = 'active' AND lease_until < now())
			ORDER BY seq FOR UPDATE SKIP LOCKED LIMIT 1)
		RETURNING id, job, token, attempt, max_attempts`, lease.Milliseconds()).Scan(&d.id, &d.job, &d.token, &d.attempt, &d.maxAttempts)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if _, err := w.c.report(ctx, msg{Type: "received", Job: d.job, Token: d.token, Attempt: d.attempt, LeaseMS: lease.Milliseconds()}); err != nil {
		return true, err
	}
	if d.attempt > d.maxAttempts {
		// Its attempts were spent by deliveries that never finished (a crash loop).
		return true, w.deadLetter(ctx, d, "max_attempts_exceeded", lease)
	}
	if w.cfg.Sabotage == "ack-before-effect" {
		if err := w.finish(ctx, d, "ack", "completed", lease); err != nil {
			return true, err
		}
	}
	hctx, stopHeartbeat := context.WithCancel(ctx)
	if w.heartbeat {
		go w.renew(hctx, d, lease)
	}
	a, err := w.c.report(ctx, msg{Type: "effect", JobID: d.id, Token: d.token, Attempt: d.attempt})
	stopHeartbeat()
	if err != nil || w.cfg.Sabotage == "ack-before-effect" {
		return true, err
	}
	switch a.Outcome {
	case "applied", "deduped", "terminal":
		return true, w.finish(ctx, d, "ack", "completed", lease)
	case "cancelled":
		return true, w.finish(ctx, d, "ack", "cancelled", lease)
	case "transient":
		if d.attempt >= d.maxAttempts {
			return true, w.deadLetter(ctx, d, "max_attempts_exceeded", lease)
		}
		return true, w.retry(ctx, d, w.backoff<<min(d.attempt-1, 10), false, lease)
	case "permanent":
		return true, w.deadLetter(ctx, d, a.Reason, lease)
	case "unavailable":
		return true, w.retry(ctx, d, w.backoff, true, lease)
	case "stale":
		if w.cfg.Sabotage == "ignore-token" {
			return true, w.finish(ctx, d, "ack", "completed", lease)
		}
		return true, nil // the job's current holder finishes it
	}
	return true, fmt.Errorf("effect of %s: unknown outcome %q", d.id, a.Outcome)
}

// renew extends the job's lease every third of it while its effect runs.
func (w *worker) renew(ctx context.Context, d delivery, lease time.Duration) {
	t := time.NewTicker(lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, lease)
		tag, err := w.db.Exec(qctx, `UPDATE `+w.table()+` SET lease_until = now() + $3::bigint * interval '1 millisecond'
			WHERE id = $1 AND token = $2 AND state = 'active'`, d.id, d.token, lease.Milliseconds())
		cancel()
		if ctx.Err() != nil {
			return
		}
		m := msg{Type: "extended", JobID: d.id, Token: d.token, LeaseMS: lease.Milliseconds()}
		switch {
		case err != nil:
			m.Error = &protoErr{Code: "unavailable", Message: err.Error()}
		case tag.RowsAffected() == 0:
			m.Error = &protoErr{Code: "lease_lost", Message: "the job is no longer ours"}
		}
		if _, rerr := w.c.report(ctx, m); rerr != nil || m.Error != nil && m.Error.Code == "lease_lost" {
			return
		}
	}
}

// fenced is the condition that the delivery is still the job's current one;
// the ignore-token sabotage drops it.
func (w *worker) fenced() string {
	if w.cfg.Sabotage == "ignore-token" {
		return `id = $1 AND ($2::bigint IS NOT NULL)`
	}
	return `id = $1 AND token = $2`
}

// move runs the library step (an UPDATE of the job's row) between the
// report's invoke and its outcome.
func (w *worker) move(ctx context.Context, kind string, d delivery, extra msg, lease time.Duration, set string, args ...any) error {
	inv := extra
	inv.Type, inv.JobID, inv.Token, inv.Phase = kind, d.id, d.token, "invoke"
	a, err := w.c.report(ctx, inv)
	if err != nil {
		return err
	}
	if a.Outcome == "terminal" { // dead-lettered or committed before: complete it
		return w.finish(ctx, d, "ack", "completed", lease)
	}
	qctx, cancel := context.WithTimeout(ctx, 3*lease)
	tag, err := w.db.Exec(qctx, `UPDATE `+w.table()+` SET `+set+` WHERE `+w.fenced(), append([]any{d.id, d.token}, args...)...)
	cancel()
	out := extra
	out.Type, out.JobID, out.Token, out.Phase = kind, d.id, d.token, "ok"
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		out.Phase, out.Error = "fail", &protoErr{Code: "ambiguous", Message: err.Error()}
	case err != nil:
		out.Phase, out.Error = "fail", &protoErr{Code: "unavailable", Message: err.Error()}
	case tag.RowsAffected() == 0:
		out.Phase, out.Error = "fail", &protoErr{Code: "stale_token", Message: "the job is no longer ours"}
	}
	_, rerr := w.c.report(ctx, out)
	return rerr
}

func (w *worker) finish(ctx context.Context, d delivery, kind, state string, lease time.Duration) error {
	return w.move(ctx, kind, d, msg{}, lease, `state = $3, lease_until = NULL`, state)
}

func (w *worker) retry(ctx context.Context, d delivery, delay time.Duration, unspent bool, lease time.Duration) error {
	set := `state = 'queued', lease_until = NULL, run_at = now() + $3::bigint * interval '1 millisecond'`
	if unspent {
		set += `, attempt = attempt - 1`
	}
	m := msg{DelayMS: delay.Milliseconds()}
	if unspent {
		m.Reason = "released" // the store failed, not the job: no attempt spent
	}
	return w.move(ctx, "nack", d, m, lease, set, delay.Milliseconds())
}

func (w *worker) deadLetter(ctx context.Context, d delivery, reason string, lease time.Duration) error {
	return w.move(ctx, "dead_letter", d, msg{Reason: reason}, lease, `state = 'discarded', lease_until = NULL`)
}
