// Package sqs is the Amazon SQS adapter (aws-sdk-go-v2): one queue and one
// dead-letter queue per run, named durachk-<runid> and durachk-<runid>-dlq
// (with the suffix .fifo on the FIFO profile), against AWS or any endpoint that
// speaks the SQS JSON protocol (fauxqs, LocalStack, ElasticMQ).
//
// The mapping onto the port, and what AWS documents for each piece:
//
//   - Lease = ReceiveMessage with VisibilityTimeout. SQS takes whole seconds: the
//     lease is rounded up, minimum 1 s (a 300 ms lease is a 1 s lease).
//   - Extend = ChangeMessageVisibility on the delivery's receipt handle;
//     MessageNotInflight (the lease ran out) is adapters.ErrLeaseLost.
//   - Token and Delivery.Attempt = the message's ApproximateReceiveCount. AWS
//     calls it approximate, so Capabilities.Token and DeliveryCount say
//     Approximate: fencing lives in the effect store, which only needs a number
//     that grows with every delivery.
//   - Ack = DeleteMessage. AWS: deleting with a receipt handle of an earlier
//     delivery "will still succeed, but the message might not be deleted", so
//     Capabilities.FencedAck is false and no contract asserts a stale ack fails.
//   - Nack(delay) = ChangeMessageVisibility(delay), rounded up to whole seconds.
//   - Dead letters: with a RedrivePolicy (Options.MaxReceiveCount) SQS itself moves
//     a message received more than maxReceiveCount times to the run's DLQ — that is
//     the native part. DeadLetter (the pipeline's decision) is the adapter's own:
//     SendMessage to the same DLQ, then DeleteMessage on the main queue.
//   - FIFO profile: MessageGroupId = Job.Group (a job without a group is unordered
//     by the port's definition and gets a group of its own, its id), and
//     MessageDeduplicationId = a hash of the body unless the queue has
//     ContentBasedDeduplication, which hashes the body itself.
//   - Inspect reads ApproximateNumberOfMessages, ...NotVisible and ...Delayed.
//     They are approximate: an empty answer is believed only when two reads a
//     settle interval apart both say zero. SQS cannot list the ids of what is in
//     a queue without receiving it, so the count goes into Inventory.Unnamed
//     (the checker then calls an unfinished job unknown, never lost). Dead
//     letters are read by receiving from
//     the run's DLQ (nobody else consumes it) and making them visible again.
//
// Docs: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/
// (ReceiveMessage, ChangeMessageVisibility, DeleteMessage, GetQueueAttributes) and
// the developer guide's "Amazon SQS visibility timeout", "dead-letter queues",
// "FIFO queues" and "basic architecture" (redundant storage across servers).
package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/durachk/durachk/adapters"
)

// Broker is the Capabilities.Broker name and the OpError target of this adapter.
const Broker = "sqs"

// Prefix starts the name of every queue durachk creates.
const Prefix = "durachk-"

// EndpointKind names what answers at the endpoint.
type EndpointKind string

const (
	Fauxqs     EndpointKind = "fauxqs"
	LocalStack EndpointKind = "localstack"
	ElasticMQ  EndpointKind = "elasticmq"
	AWS        EndpointKind = "aws"
	// Unknown is an SQS-compatible endpoint that durachk could not identify.
	Unknown EndpointKind = "unknown"
)

// EndpointKinds are the kinds Options.Kind may name.
var EndpointKinds = []EndpointKind{Fauxqs, LocalStack, ElasticMQ, AWS, Unknown}

// SettableAttributes are the queue attributes CreateQueue accepts (AWS API
// reference, CreateQueue "Attributes").
var SettableAttributes = []string{
	"DelaySeconds", "MaximumMessageSize", "MessageRetentionPeriod", "Policy",
	"ReceiveMessageWaitTimeSeconds", "VisibilityTimeout", "RedrivePolicy", "RedriveAllowPolicy",
	"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled",
	"FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit",
}

// Options configure the queue. They are read once, by Open.
type Options struct {
	// Endpoint is the base URL of an emulator (http://127.0.0.1:4566); empty for
	// AWS itself (the SDK's endpoint resolution).
	Endpoint string
	// Region, e.g. us-east-1. Required.
	Region string
	// AccessKey and SecretKey are static credentials (emulators take any). Empty:
	// the SDK's default credential chain (environment, shared config, IMDS, ...).
	AccessKey, SecretKey string
	// Profile is a shared-config profile for the default chain.
	Profile string
	// Kind is what answers at Endpoint; empty: detected (GET /health for fauxqs,
	// GET /_localstack/health for LocalStack; AWS when Endpoint is empty).
	Kind EndpointKind
	// Attributes are passed to CreateQueue on the main queue as they are
	// (RedrivePolicy and FifoQueue come from the fields below).
	Attributes map[string]string
	// MaxReceiveCount > 0 gives the main queue a RedrivePolicy to the run's DLQ.
	MaxReceiveCount int
	// FIFO makes both queues FIFO queues.
	FIFO bool
	// ContentBasedDedup sets ContentBasedDeduplication on the FIFO queues.
	ContentBasedDedup bool
	// WaitTimeSeconds is the long-polling wait of Lease (0 or 1 keeps workers
	// responsive; at most 20).
	WaitTimeSeconds int32
	// Settle is the gap between the two reads of Inspect that must both be zero;
	// 0: by kind (50 ms on fauxqs, 200 ms on other emulators, 2 s on AWS).
	Settle time.Duration
	// BreakOrder is a deliberately broken FIFO that still claims FIFO: every job
	// is sent in a message group of its own, so SQS keeps no order among the jobs
	// of one Job.Group. The negative control of order.fifo; never set it otherwise.
	BreakOrder bool
	// HTTPClient replaces the SDK's HTTP client (tests).
	HTTPClient *http.Client
}

var runIDRE = regexp.MustCompile(`^[a-z0-9]{1,40}$`)

// QueueName is the main queue of runID.
func QueueName(runID string, fifo bool) string { return name(Prefix+runID, fifo) }

// DLQName is the dead-letter queue of runID.
func DLQName(runID string, fifo bool) string { return name(Prefix+runID+"-dlq", fifo) }

func name(base string, fifo bool) string {
	if fifo {
		return base + ".fifo"
	}
	return base
}

// Queue is an SQS-backed adapters.Queue with Extender, DeadLetterer and
// Inspector. It is safe for concurrent use by the goroutines of one process; any
// number of processes may open the same run's queues (CreateQueue with the same
// attributes is idempotent). Inspect calls of one Queue are serialised.
type Queue struct {
	client   *awssqs.Client
	opts     Options
	kind     EndpointKind
	version  string
	runID    string
	url      string // main queue URL
	dlqURL   string
	dlqArn   string
	caps     adapters.Capabilities
	closed   atomic.Bool
	inspect  sync.Mutex
	settle   time.Duration
	dedupBy  string // "content" or "hash"
	attrList []types.MessageSystemAttributeName
	// dlqCount is the ApproximateReceiveCount of each DLQ message (by message
	// id) when this Queue first received it, under inspect: later receives of
	// Inspect raise it.
	dlqCount map[string]int
	// leases holds, per receipt handle this Queue received, the earliest
	// moment its visibility timeout can have run out (the receive's or the
	// last extension's start plus its timeout): a delete answered after it
	// may have deleted nothing (see settled).
	leases sync.Map // string → time.Time
}

var (
	_ adapters.Queue        = (*Queue)(nil)
	_ adapters.Extender     = (*Queue)(nil)
	_ adapters.DeadLetterer = (*Queue)(nil)
	_ adapters.Inspector    = (*Queue)(nil)
)

// NewClient builds the SDK client of opts: static credentials when given, else
// the default chain; the base endpoint when given.
func NewClient(ctx context.Context, opts Options) (*awssqs.Client, error) {
	if opts.Region == "" {
		return nil, errors.New("sqs: no region")
	}
	loads := []func(*config.LoadOptions) error{config.WithRegion(opts.Region),
		// No SDK retries: a retried SendMessage whose first reply was lost makes a
		// second copy that the history would not explain. Every failure reaches
		// the pipeline, which records it and retries at its own level.
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} })}
	if opts.AccessKey != "" {
		loads = append(loads, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(opts.AccessKey, opts.SecretKey, "")))
	}
	if opts.Profile != "" {
		loads = append(loads, config.WithSharedConfigProfile(opts.Profile))
	}
	if opts.HTTPClient != nil {
		loads = append(loads, config.WithHTTPClient(opts.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("sqs: load AWS config: %w", err)
	}
	return awssqs.NewFromConfig(cfg, func(o *awssqs.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
	}), nil
}

// Open connects, identifies the endpoint, and creates the run's DLQ and main
// queue if they do not exist yet (idempotent: the controller and every child
// process call it, several at once). runID must match ^[a-z0-9]{1,40}$. An
// unreachable endpoint is an error wrapping adapters.ErrUnavailable.
func Open(ctx context.Context, runID string, opts Options) (*Queue, error) {
	if !runIDRE.MatchString(runID) {
		return nil, fmt.Errorf("sqs: run id %q must match %s", runID, runIDRE)
	}
	if opts.MaxReceiveCount < 0 || opts.MaxReceiveCount > 1000 {
		return nil, fmt.Errorf("sqs: maxReceiveCount %d: want 1..1000", opts.MaxReceiveCount)
	}
	if opts.ContentBasedDedup && !opts.FIFO {
		return nil, errors.New("sqs: content-based deduplication needs a FIFO queue")
	}
	if opts.WaitTimeSeconds < 0 || opts.WaitTimeSeconds > 20 {
		return nil, fmt.Errorf("sqs: wait time %d s: want 0..20", opts.WaitTimeSeconds)
	}
	client, err := NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	q := &Queue{client: client, opts: opts, runID: runID, dedupBy: "hash", dlqCount: map[string]int{},
		attrList: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}}
	if opts.ContentBasedDedup || strings.EqualFold(opts.Attributes["ContentBasedDeduplication"], "true") {
		q.dedupBy = "content"
	}
	q.kind, q.version = Identify(ctx, opts)
	q.settle = opts.Settle
	if q.settle == 0 {
		switch q.kind {
		case Fauxqs:
			q.settle = 50 * time.Millisecond
		case AWS:
			q.settle = 2 * time.Second
		default:
			q.settle = 200 * time.Millisecond
		}
	}
	if err := q.provision(ctx); err != nil {
		return nil, err
	}
	q.caps = capabilities(opts, q.kind, q.version)
	return q, nil
}

// Identify says what answers at opts.Endpoint and names it for reports: the
// configured kind if set, else a probe of the emulators' health endpoints.
func Identify(ctx context.Context, opts Options) (EndpointKind, string) {
	if opts.Endpoint == "" {
		return AWS, "AWS SQS " + opts.Region
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) (*http.Response, []byte) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(opts.Endpoint, "/")+path, nil)
		if err != nil {
			return nil, nil
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, nil
		}
		defer resp.Body.Close()
		var b [4096]byte
		n, _ := readAll(resp, b[:])
		return resp, b[:n]
	}
	kind := opts.Kind
	fauxqsVersion := func() string {
		if resp, _ := get("/health"); resp != nil {
			if v, ok := strings.CutPrefix(resp.Header.Get("Server"), "fauxqs/"); ok {
				return "fauxqs " + v + " (emulator)"
			}
		}
		return "fauxqs (emulator)"
	}
	localstackVersion := func() (string, bool) {
		resp, body := get("/_localstack/health")
		if resp == nil || resp.StatusCode != http.StatusOK {
			return "LocalStack (emulator)", false
		}
		var h struct {
			Version string `json:"version"`
		}
		_ = json.Unmarshal(body, &h)
		if h.Version == "" {
			return "LocalStack (emulator)", true
		}
		return "LocalStack " + h.Version + " (emulator)", true
	}
	switch kind {
	case Fauxqs:
		return kind, fauxqsVersion()
	case LocalStack:
		v, _ := localstackVersion()
		return kind, v
	case ElasticMQ:
		return kind, "ElasticMQ (emulator) at " + hostOf(opts.Endpoint)
	case AWS:
		return kind, "AWS SQS " + opts.Region + " at " + hostOf(opts.Endpoint)
	}
	if resp, body := get("/health"); resp != nil && resp.StatusCode == http.StatusOK {
		if strings.HasPrefix(resp.Header.Get("Server"), "fauxqs/") || strings.Contains(string(body), `"status":"ok"`) {
			return Fauxqs, fauxqsVersion()
		}
	}
	if v, ok := localstackVersion(); ok {
		return LocalStack, v
	}
	return Unknown, "SQS-compatible endpoint at " + hostOf(opts.Endpoint)
}

func readAll(resp *http.Response, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := resp.Body.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func hostOf(endpoint string) string {
	_, rest, ok := strings.Cut(endpoint, "://")
	if !ok {
		return endpoint
	}
	h, _, _ := strings.Cut(rest, "/")
	return h
}

func (q *Queue) provision(ctx context.Context) error {
	dlqAttrs := map[string]string{}
	if q.opts.FIFO {
		dlqAttrs["FifoQueue"] = "true"
		if q.dedupBy == "content" {
			dlqAttrs["ContentBasedDeduplication"] = "true"
		}
	}
	var err error
	if q.dlqURL, err = q.ensure(ctx, DLQName(q.runID, q.opts.FIFO), dlqAttrs); err != nil {
		return err
	}
	a, err := q.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(q.dlqURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return opErr("create queue", adapters.Delivery{}, mapErr(err))
	}
	q.dlqArn = a.Attributes[string(types.QueueAttributeNameQueueArn)]
	attrs := map[string]string{}
	for k, v := range q.opts.Attributes {
		attrs[k] = v
	}
	if q.opts.FIFO {
		attrs["FifoQueue"] = "true"
		if q.opts.ContentBasedDedup {
			attrs["ContentBasedDeduplication"] = "true"
		}
	}
	if q.opts.MaxReceiveCount > 0 {
		// Both keys as strings: that is how AWS returns the policy, so a second
		// CreateQueue with the same attributes is idempotent everywhere.
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, q.dlqArn, q.opts.MaxReceiveCount)
	}
	q.url, err = q.ensure(ctx, QueueName(q.runID, q.opts.FIFO), attrs)
	return err
}

// ensure returns the URL of the queue called name, creating it with attrs if it
// does not exist. Concurrent callers race safely: CreateQueue with the same
// attributes returns the existing queue, and a QueueNameExists (AWS compares the
// attributes as it stores them) falls back to GetQueueUrl.
func (q *Queue) ensure(ctx context.Context, name string, attrs map[string]string) (string, error) {
	get := func() (string, error) {
		out, err := q.client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.QueueUrl), nil
	}
	u, err := get()
	if err == nil {
		return u, nil
	}
	if !isNoQueue(err) {
		return "", opErr("create queue", adapters.Delivery{}, mapErr(err))
	}
	out, err := q.client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	var exists *types.QueueNameExists
	switch {
	case err == nil:
		return aws.ToString(out.QueueUrl), nil
	case errors.As(err, &exists):
		if u, err = get(); err == nil {
			return u, nil
		}
	}
	return "", opErr("create queue", adapters.Delivery{}, mapErr(err))
}

func isNoQueue(err error) bool {
	var gone *types.QueueDoesNotExist
	return errors.As(err, &gone) || apiCode(err) == "AWS.SimpleQueueService.NonExistentQueue" || apiCode(err) == "QueueDoesNotExist"
}

// capabilities are the documented semantics of SQS with opts, plus what the
// endpoint is known to do differently.
func capabilities(opts Options, kind EndpointKind, version string) adapters.Capabilities {
	dl := adapters.Emulated
	notes := []string{
		"measured on " + version,
		"lease = ReceiveMessage VisibilityTimeout in whole seconds: a lease is rounded up, minimum 1 s; Nack delays likewise",
		"fencing token and delivery count = ApproximateReceiveCount (approximate by AWS's word); fencing is done by the effect store",
		"Ack = DeleteMessage; AWS: with a stale receipt handle the request \"will still succeed, but the message might not be deleted\": no fenced ack",
		"Inspect counts are ApproximateNumberOfMessages(+NotVisible, +Delayed): a queue is called empty only after two zero reads; queued and in-flight job ids are not listable",
	}
	if opts.MaxReceiveCount > 0 {
		dl = adapters.Native
		notes = append(notes, fmt.Sprintf("RedrivePolicy maxReceiveCount=%d: SQS moves a message received more than %d times to the run's DLQ (native); the pipeline's own dead letters are SendMessage to that DLQ (with the message attribute durachk-reason) + DeleteMessage", opts.MaxReceiveCount, opts.MaxReceiveCount))
		notes = append(notes, "a DLQ message without durachk-reason was moved by SQS's redrive: reported as moved by the broker (reason maxReceiveCount, its ApproximateReceiveCount when Inspect first received it from the DLQ, minus that receive; SQS records no redrive time)")
	} else {
		notes = append(notes, "no RedrivePolicy: SQS redelivers a poison message forever; only the pipeline's own bound (ApproximateReceiveCount > maxAttempts) stops it; its dead letters are SendMessage to the run's DLQ + DeleteMessage (emulated)")
	}
	if v := opts.Attributes["MessageRetentionPeriod"]; v != "" {
		notes = append(notes, "MessageRetentionPeriod="+v+" s: SQS deletes a message older than that without a record (no DLQ, no count): such a job is gone without the broker's reason")
	}
	if opts.FIFO {
		notes = append(notes, "FIFO queue: MessageGroupId = Job.Group (a job without a group gets its own), deduplication by "+
			map[bool]string{true: "content (ContentBasedDeduplication)", false: "MessageDeduplicationId = SHA-256 of the body"}[opts.ContentBasedDedup])
	}
	if opts.BreakOrder {
		notes = append(notes, "deliberately broken FIFO (one message group per job): a negative control")
	}
	switch kind {
	case Fauxqs:
		notes = append(notes, "fauxqs differs from AWS: it accepts a garbage receipt handle silently, returns at most one message per FIFO group per receive, carries the receive count into the DLQ, and extends a lease whose visibility timeout already ran out (AWS: \"might result in an error\")")
	case LocalStack, ElasticMQ, Unknown:
		notes = append(notes, "an emulator: its verdicts are about the emulator, not about AWS SQS")
	}
	return adapters.Capabilities{
		Broker: Broker, Lease: adapters.Native, LeaseExtension: adapters.Native,
		Token: adapters.Approximate, FencedAck: false, DeliveryCount: adapters.Approximate,
		DeadLetter: dl, DelayedNack: adapters.Native, FIFO: opts.FIFO || opts.BreakOrder,
		// AWS: "Amazon SQS stores all message queues and messages within a single,
		// highly-available AWS region with multiple redundant Availability Zones".
		Durable: true, BrokerKill: false, Notes: notes,
	}
}

// Capabilities are fixed at Open.
func (q *Queue) Capabilities() adapters.Capabilities { return q.caps }

// ServerVersion names what the queue runs on, e.g. "fauxqs 2.4.1 (emulator)" or
// "AWS SQS eu-west-1".
func (q *Queue) ServerVersion() string { return q.version }

// Kind is what answers at the endpoint.
func (q *Queue) Kind() EndpointKind { return q.kind }

// URL is the main queue's URL; DLQURL the dead-letter queue's.
func (q *Queue) URL() string    { return q.url }
func (q *Queue) DLQURL() string { return q.dlqURL }

// Client is the SDK client (for tests and benchmarks).
func (q *Queue) Client() *awssqs.Client { return q.client }

// Close makes later calls fail with adapters.ErrClosed. Idempotent.
func (q *Queue) Close() error {
	q.closed.Store(true)
	return nil
}

// Drop deletes the run's main queue and DLQ. A queue already gone is fine.
func (q *Queue) Drop(ctx context.Context) error {
	var errs []error
	for _, u := range []string{q.url, q.dlqURL} {
		if u == "" {
			continue
		}
		if err := DeleteQueue(ctx, q.client, u); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// message is the body of every message: the job as JSON.
type message struct {
	adapters.Job
}

// Enqueue sends job; nil means SQS acknowledged it. A lost reply is
// adapters.ErrAmbiguous: a retry may send a second copy (on a FIFO queue, one
// within SQS's 5-minute deduplication interval is dropped by SQS).
func (q *Queue) Enqueue(ctx context.Context, job adapters.Job) error {
	d := adapters.Delivery{Job: job}
	if q.closed.Load() {
		return opErr("enqueue", d, adapters.ErrClosed)
	}
	body, err := json.Marshal(message{job})
	if err != nil {
		return opErr("enqueue", d, err)
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(string(body))}
	q.fifoFields(in, job, body, "")
	_, err = q.client.SendMessage(ctx, in)
	return opErr("enqueue", d, mapErr(err))
}

func (q *Queue) fifoFields(in *awssqs.SendMessageInput, job adapters.Job, body []byte, salt string) {
	if !q.opts.FIFO {
		return
	}
	group := job.Group
	if group == "" || q.opts.BreakOrder {
		group = "job:" + job.ID
	}
	in.MessageGroupId = aws.String(truncate(group, 128))
	if q.dedupBy != "content" {
		h := sha256.Sum256(append(body, salt...))
		in.MessageDeduplicationId = aws.String(hex.EncodeToString(h[:]))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return s[:n-17] + "-" + hex.EncodeToString(h[:8])
}

// Seconds rounds d up to whole seconds, at least min.
func Seconds(d time.Duration, min int32) int32 {
	s := int32(math.Ceil(d.Seconds()))
	if s < min {
		return min
	}
	return s
}

// Lease receives one message with a visibility timeout of lease, rounded up to
// whole seconds (minimum 1), or returns adapters.ErrNoJob. Token and Attempt are
// the message's ApproximateReceiveCount.
func (q *Queue) Lease(ctx context.Context, lease time.Duration) (adapters.Delivery, error) {
	var none adapters.Delivery
	if q.closed.Load() {
		return none, opErr("lease", none, adapters.ErrClosed)
	}
	start, vis := time.Now(), min(Seconds(lease, 1), 43200)
	out, err := q.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(q.url),
		MaxNumberOfMessages: 1, VisibilityTimeout: vis, WaitTimeSeconds: q.opts.WaitTimeSeconds,
		MessageSystemAttributeNames: q.attrList})
	if err != nil {
		return none, opErr("lease", none, mapErr(err))
	}
	if len(out.Messages) == 0 {
		return none, adapters.ErrNoJob
	}
	d, err := q.delivery(out.Messages[0])
	if err == nil {
		// With a long poll the visibility starts at the message's receipt,
		// later than start: the bound stays on the safe side.
		q.leases.Store(d.Receipt, start.Add(time.Duration(vis)*time.Second))
	}
	return d, err
}

// settled maps the answer to a delete with d's receipt handle. SQS answers a
// delete with the handle of a delivery whose visibility timeout ran out
// without error, deleting the message or not (the emulator here did not: a
// dead-lettered job came back 0.7 s later, beside two busy loops); answered
// after the earliest moment the timeout can have run out, the delete's
// outcome is unknown.
func (q *Queue) settled(d adapters.Delivery, err error) error {
	v, ok := q.leases.LoadAndDelete(d.Receipt)
	if err != nil || !ok {
		return err
	}
	if until := v.(time.Time); !time.Now().Before(until) {
		return fmt.Errorf("%w: the lease had run out when SQS answered the delete (%s past it): the message may not have been deleted",
			adapters.ErrAmbiguous, time.Since(until).Round(time.Millisecond))
	}
	return nil
}

func (q *Queue) delivery(m types.Message) (adapters.Delivery, error) {
	var msg message
	if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &msg); err != nil {
		return adapters.Delivery{}, opErr("lease", adapters.Delivery{}, fmt.Errorf("sqs: message %s: body is not a durachk job: %w", aws.ToString(m.MessageId), err))
	}
	n, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	return adapters.Delivery{Job: msg.Job, Token: uint64(max(n, 0)), Attempt: n, Receipt: aws.ToString(m.ReceiptHandle)}, nil
}

// Ack deletes the delivered message. SQS does not fence it: with the receipt
// handle of an earlier delivery it may succeed without deleting anything.
func (q *Queue) Ack(ctx context.Context, d adapters.Delivery) error {
	if q.closed.Load() {
		return opErr("ack", d, adapters.ErrClosed)
	}
	_, err := q.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(d.Receipt)})
	return opErr("ack", d, q.settled(d, mapErr(err)))
}

// Nack makes the message visible again after delay (rounded up to whole seconds;
// 0 is at once). adapters.ErrLeaseLost once the message is no longer in flight.
func (q *Queue) Nack(ctx context.Context, d adapters.Delivery, delay time.Duration) error {
	return q.changeVisibility(ctx, "nack", d, Seconds(delay, 0))
}

// Extend sets the visibility of a live delivery to lease from now (whole seconds,
// minimum 1); adapters.ErrLeaseLost when SQS answers MessageNotInflight or
// ReceiptHandleIsInvalid. AWS says a change after the timeout ran out "might
// result in an error": not that it must, so an expired lease may be extended.
func (q *Queue) Extend(ctx context.Context, d adapters.Delivery, lease time.Duration) error {
	return q.changeVisibility(ctx, "extend", d, Seconds(lease, 1))
}

func (q *Queue) changeVisibility(ctx context.Context, op string, d adapters.Delivery, secs int32) error {
	if q.closed.Load() {
		return opErr(op, d, adapters.ErrClosed)
	}
	start := time.Now()
	_, err := q.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(q.url),
		ReceiptHandle: aws.String(d.Receipt), VisibilityTimeout: min(secs, 43200)})
	if err == nil {
		if op == "nack" {
			q.leases.Delete(d.Receipt)
		} else if _, ok := q.leases.Load(d.Receipt); ok {
			q.leases.Store(d.Receipt, start.Add(time.Duration(min(secs, 43200))*time.Second))
		}
	}
	return opErr(op, d, mapErr(err))
}

// DeadLetter is the pipeline's decision carried out by the adapter (not SQS's
// redrive): it sends the job to the run's DLQ with the reason as a message
// attribute, then deletes it from the main queue. A crash between the two leaves
// the job in both; it is then dead-lettered again on its next delivery.
func (q *Queue) DeadLetter(ctx context.Context, d adapters.Delivery, reason string) error {
	if q.closed.Load() {
		return opErr("dead letter", d, adapters.ErrClosed)
	}
	body, err := json.Marshal(message{d.Job})
	if err != nil {
		return opErr("dead letter", d, err)
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(q.dlqURL), MessageBody: aws.String(string(body)),
		MessageAttributes: map[string]types.MessageAttributeValue{
			ReasonAttribute:   {DataType: aws.String("String"), StringValue: aws.String(reason)},
			"durachk-attempt": {DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(d.Attempt))},
		}}
	q.fifoFields(in, d.Job, body, "dead")
	if _, err := q.client.SendMessage(ctx, in); err != nil {
		return opErr("dead letter", d, mapErr(err))
	}
	_, err = q.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(d.Receipt)})
	return opErr("dead letter", d, q.settled(d, mapErr(err)))
}

// Counts are a queue's approximate message counts (GetQueueAttributes).
type Counts struct{ Visible, NotVisible, Delayed int }

// Zero reports whether every count is zero.
func (c Counts) Zero() bool { return c.Visible == 0 && c.NotVisible == 0 && c.Delayed == 0 }

// Counts reads the main queue's approximate counts.
func (q *Queue) Counts(ctx context.Context) (Counts, error) {
	return q.counts(ctx, q.url)
}

func (q *Queue) counts(ctx context.Context, url string) (Counts, error) {
	out, err := q.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
	if err != nil {
		return Counts{}, mapErr(err)
	}
	n := func(a types.QueueAttributeName) int { v, _ := strconv.Atoi(out.Attributes[string(a)]); return v }
	return Counts{Visible: n(types.QueueAttributeNameApproximateNumberOfMessages),
		NotVisible: n(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:    n(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)}, nil
}

// Inspect reports what is left. Queued and InFlight are placeholders counted
// from the approximate counts (SQS cannot list message ids without receiving);
// the queue is reported empty only when two reads Settle apart both say zero.
// DeadLettered holds the job ids in the run's DLQ, read by receiving every
// message of it and making each visible again at once; Moved those of them
// that SQS's redrive moved there (no durachk-reason attribute: see
// brokerAction). Messages that expire after MessageRetentionPeriod leave no
// record.
func (q *Queue) Inspect(ctx context.Context) (adapters.Inventory, error) {
	var inv adapters.Inventory
	var none adapters.Delivery
	if q.closed.Load() {
		return inv, opErr("inspect", none, adapters.ErrClosed)
	}
	q.inspect.Lock()
	defer q.inspect.Unlock()
	c, err := q.counts(ctx, q.url)
	if err != nil {
		return inv, opErr("inspect", none, err)
	}
	if c.Zero() {
		select {
		case <-ctx.Done():
			return inv, opErr("inspect", none, ctx.Err())
		case <-time.After(q.settle):
		}
		if c, err = q.counts(ctx, q.url); err != nil {
			return inv, opErr("inspect", none, err)
		}
	}
	// SQS counts its messages (approximately) but cannot name them.
	inv.Unnamed = int(c.Visible + c.Delayed + c.NotVisible)
	if inv.DeadLettered, inv.Moved, err = q.deadLetteredAgain(ctx); err != nil {
		return adapters.Inventory{}, opErr("inspect", none, err)
	}
	return inv, nil
}

// ReasonAttribute is the message attribute that marks a DLQ message as the
// pipeline's own dead letter (DeadLetter sets it); SQS's redrive never adds one.
const ReasonAttribute = "durachk-reason"

// brokerAction says whether the DLQ message m (job id) was moved there by SQS
// on its own: it lacks ReasonAttribute. Deliveries is its receive count as
// this Queue first saw it in the DLQ, less that receive: SQS keeps a
// message's ApproximateReceiveCount when its redrive moves it (fauxqs counts
// the receive that triggered the move too); AWS calls the count approximate.
// Callers hold q.inspect.
func (q *Queue) brokerAction(id string, m types.Message) (adapters.BrokerAction, bool) {
	if _, ok := m.MessageAttributes[ReasonAttribute]; ok {
		return adapters.BrokerAction{}, false
	}
	a := adapters.BrokerAction{Job: id, Action: adapters.ActionDeadLettered}
	if q.opts.MaxReceiveCount > 0 {
		a.Reason = "maxReceiveCount " + strconv.Itoa(q.opts.MaxReceiveCount)
	}
	mid := aws.ToString(m.MessageId)
	n, seen := q.dlqCount[mid]
	if !seen {
		n, _ = strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		q.dlqCount[mid] = n
	}
	a.Deliveries = max(n-1, 0)
	return a, true
}

// inspectVisibility hides each DLQ message that deadLettered receives, so that
// the next receive returns the others.
const inspectVisibility = 5

// deadLetteredAgain reads the DLQ, and reads it again when a receive's answer
// was lost: the messages that receive hid are back only after
// inspectVisibility, and a read before that would miss them without a word.
func (q *Queue) deadLetteredAgain(ctx context.Context) (ids []string, moved []adapters.BrokerAction, err error) {
	for try := 0; ; try++ {
		ids, moved, err = q.deadLettered(ctx)
		if err == nil || try == 2 || !(errors.Is(err, adapters.ErrAmbiguous) || errors.Is(err, adapters.ErrUnavailable)) {
			return ids, moved, err
		}
		select {
		case <-ctx.Done():
			return ids, moved, err
		case <-time.After(inspectVisibility*time.Second + 500*time.Millisecond):
		}
	}
}

// deadLettered receives every message of the DLQ (hiding each for a few
// seconds so that the next receive returns the others), collects the job ids,
// then makes them visible again. Nobody else consumes the run's DLQ.
func (q *Queue) deadLettered(ctx context.Context) ([]string, []adapters.BrokerAction, error) {
	seen := map[string]bool{}
	var ids []string
	var moved []adapters.BrokerAction
	var handles []string
	defer func() {
		for len(handles) > 0 {
			n := min(len(handles), 10)
			var entries []types.ChangeMessageVisibilityBatchRequestEntry
			for i, h := range handles[:n] {
				entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: 0})
			}
			_, _ = q.client.ChangeMessageVisibilityBatch(context.WithoutCancel(ctx), &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.dlqURL), Entries: entries})
			handles = handles[n:]
		}
	}()
	for range 100 {
		out, err := q.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(q.dlqURL),
			MaxNumberOfMessages: 10, VisibilityTimeout: inspectVisibility, WaitTimeSeconds: 0,
			MessageSystemAttributeNames: q.attrList, MessageAttributeNames: []string{ReasonAttribute}})
		if err != nil {
			return nil, nil, mapErr(err)
		}
		if len(out.Messages) == 0 {
			break
		}
		for _, m := range out.Messages {
			handles = append(handles, aws.ToString(m.ReceiptHandle))
			var msg message
			if json.Unmarshal([]byte(aws.ToString(m.Body)), &msg) != nil {
				continue
			}
			if !seen[msg.ID] {
				seen[msg.ID] = true
				ids = append(ids, msg.ID)
			}
			if a, ok := q.brokerAction(msg.ID, m); ok {
				moved = append(moved, a)
			}
		}
	}
	sort.Strings(ids)
	sort.SliceStable(moved, func(i, j int) bool { return moved[i].Job < moved[j].Job })
	return ids, moved, nil
}

// ListRunQueues lists the URLs of every queue whose name starts with prefix
// (e.g. Prefix+runID) — what a run must leave none of.
func ListRunQueues(ctx context.Context, client *awssqs.Client, prefix string) ([]string, error) {
	var urls []string
	var next *string
	for {
		out, err := client.ListQueues(ctx, &awssqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), NextToken: next, MaxResults: aws.Int32(1000)})
		if err != nil {
			return nil, mapErr(err)
		}
		urls = append(urls, out.QueueUrls...)
		if out.NextToken == nil || aws.ToString(out.NextToken) == "" {
			return urls, nil
		}
		next = out.NextToken
	}
}

// opErr wraps err of op on delivery d.
func opErr(op string, d adapters.Delivery, err error) error {
	if err == nil {
		return nil
	}
	return &adapters.OpError{Target: Broker, Op: op, JobID: d.Job.ID, Attempt: d.Attempt, Err: err}
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// mapErr wraps SDK errors with the port's sentinels: a receipt handle that no
// longer names an in-flight message is adapters.ErrLeaseLost; a connection that
// was never made is adapters.ErrUnavailable (definite); a timeout or a broken
// connection after the request went out is adapters.ErrAmbiguous.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	var notInflight *types.MessageNotInflight
	var badHandle *types.ReceiptHandleIsInvalid
	switch code := apiCode(err); {
	case errors.As(err, &notInflight), errors.As(err, &badHandle), code == "AWS.SimpleQueueService.MessageNotInflight",
		code == "ReceiptHandleIsInvalid", code == "MessageNotInflight":
		return fmt.Errorf("%w: %v", adapters.ErrLeaseLost, err)
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %v", adapters.ErrAmbiguous, err)
	case code != "":
		var re interface{ HTTPStatusCode() int }
		if errors.As(err, &re) && re.HTTPStatusCode() >= 500 {
			return fmt.Errorf("%w: %v", adapters.ErrAmbiguous, err)
		}
		return err // a definite refusal by the server: a bad request, a missing queue
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return fmt.Errorf("%w: %v", adapters.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %v", adapters.ErrAmbiguous, err)
}

// DeleteQueue deletes the queue at url; a queue already gone is fine.
func DeleteQueue(ctx context.Context, client *awssqs.Client, url string) error {
	_, err := client.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	if err != nil && !isNoQueue(err) {
		return fmt.Errorf("sqs: delete queue %s: %w", url, mapErr(err))
	}
	return nil
}
