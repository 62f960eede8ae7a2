package targets

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/durachk/durachk/adapters"
	"github.com/durachk/durachk/adapters/sqs"
)

// SQS, on AWS or on an emulator. The URL names the endpoint:
//
//	sqs://127.0.0.1:4566?region=us-east-1            an emulator at http://127.0.0.1:4566
//	sqs://KEY:SECRET@host:port?region=...&tls=true   static credentials, https
//	sqs://aws?region=eu-west-1                       AWS itself, default credential chain
//
// Emulators get static test credentials (test/test) unless the URL has its own.
// Knobs (query parameters; nested YAML keys become dotted names):
//
//	region=us-east-1 (required for aws; default us-east-1 elsewhere)
//	endpoint-kind=fauxqs|localstack|elasticmq|aws|unknown (default: detected)
//	fifo=true                      FIFO queues (names end in .fifo)
//	content-based-dedup=true       ContentBasedDeduplication (FIFO only)
//	redrive.maxReceiveCount=N      a RedrivePolicy to the run's DLQ
//	attributes.<Name>=V            any queue attribute CreateQueue takes
//	                               (attributes.RedrivePolicy={"maxReceiveCount":N}: the
//	                               run's DLQ is filled in; FifoQueue and
//	                               ContentBasedDeduplication are the same as the knobs)
//	lease.wait-time-seconds=0..20  long polling of a lease (default 0; 1 on aws)
//	inspect.settle=DURATION        gap of the two zero reads that call a queue empty
//	profile=NAME                   shared-config profile (aws)
//	tls=true                       https to the endpoint
//	name=NAME                      the target's name in reports
var sqsKnobs = map[string]bool{"region": true, "endpoint-kind": true, "fifo": true, "content-based-dedup": true,
	"redrive.maxReceiveCount": true, "lease.wait-time-seconds": true, "inspect.settle": true, "profile": true,
	"tls": true, "name": true}

func init() {
	Register(&Kind{Name: "sqs", Schemes: []string{"sqs"}, Parse: parseSQS,
		OpenQueue: func(ctx context.Context, s Spec) (adapters.Queue, error) {
			o, err := SQSOptions(s)
			if err != nil {
				return nil, err
			}
			return sqs.Open(ctx, s.RunID, o)
		},
		Version: func(ctx context.Context, s Spec) (string, error) {
			o, err := SQSOptions(s)
			if err != nil {
				return "", err
			}
			_, v := sqs.Identify(ctx, o)
			return v, nil
		},
		Cleanup: cleanupSQS,
	})
}

func parseSQS(raw string, u *url.URL) (Spec, error) {
	q := u.Query()
	var unknown []string
	for k := range q {
		if sqsKnobs[k] {
			continue
		}
		if a, ok := strings.CutPrefix(k, "attributes."); ok && slices.Contains(sqs.SettableAttributes, a) {
			continue
		}
		unknown = append(unknown, k)
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return Spec{}, fmt.Errorf("%w: %s: unknown setting %q (SQS knobs: %s, attributes.<%s>)", ErrBadTarget, Redact(u.Redacted()), unknown[0],
			strings.Join(sortedKeys(sqsKnobs), ", "), strings.Join(sqs.SettableAttributes, "|"))
	}
	bad := func(k, want string) error {
		return fmt.Errorf("%w: %s=%q: want %s", ErrBadTarget, k, q.Get(k), want)
	}
	opts := map[string]string{}
	for k := range q {
		opts[k] = q.Get(k)
	}
	for _, k := range []string{"fifo", "content-based-dedup", "tls"} {
		if v := opts[k]; v != "" && v != "true" && v != "false" {
			return Spec{}, bad(k, "true or false")
		}
	}
	if v := opts["endpoint-kind"]; v != "" && !slices.Contains(sqs.EndpointKinds, sqs.EndpointKind(v)) {
		return Spec{}, bad("endpoint-kind", "fauxqs, localstack, elasticmq, aws or unknown")
	}
	if v := opts["redrive.maxReceiveCount"]; v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
			return Spec{}, bad("redrive.maxReceiveCount", "a number from 1 to 1000")
		}
	}
	if v := opts["lease.wait-time-seconds"]; v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 20 {
			return Spec{}, bad("lease.wait-time-seconds", "0 to 20")
		}
	}
	if v := opts["inspect.settle"]; v != "" {
		if d, err := time.ParseDuration(v); err != nil || d < 0 {
			return Spec{}, bad("inspect.settle", "a duration such as 200ms")
		}
	}
	if v := opts["attributes.RedrivePolicy"]; v != "" {
		n, err := redriveCount(v)
		if err != nil {
			return Spec{}, fmt.Errorf("%w: attributes.RedrivePolicy: %v", ErrBadTarget, err)
		}
		if m := opts["redrive.maxReceiveCount"]; m != "" && m != strconv.Itoa(n) {
			return Spec{}, fmt.Errorf("%w: attributes.RedrivePolicy and redrive.maxReceiveCount disagree", ErrBadTarget)
		}
		opts["redrive.maxReceiveCount"] = strconv.Itoa(n)
		delete(opts, "attributes.RedrivePolicy")
	}
	for attr, knob := range map[string]string{"attributes.FifoQueue": "fifo", "attributes.ContentBasedDeduplication": "content-based-dedup"} {
		if v, ok := opts[attr]; ok {
			if v != "true" && v != "false" {
				return Spec{}, bad(attr, "true or false")
			}
			if k, ok := opts[knob]; ok && k != v {
				return Spec{}, fmt.Errorf("%w: %s and %s disagree", ErrBadTarget, attr, knob)
			}
			opts[knob] = v
			delete(opts, attr)
		}
	}
	if opts["content-based-dedup"] == "true" && opts["fifo"] != "true" {
		return Spec{}, fmt.Errorf("%w: content-based-dedup needs fifo=true (SQS has it on FIFO queues only)", ErrBadTarget)
	}
	if u.Hostname() == "aws" {
		if opts["region"] == "" {
			return Spec{}, fmt.Errorf("%w: %s: sqs://aws needs region=", ErrBadTarget, Redact(u.Redacted()))
		}
		if k := opts["endpoint-kind"]; k != "" && k != "aws" {
			return Spec{}, fmt.Errorf("%w: sqs://aws with endpoint-kind=%s", ErrBadTarget, k)
		}
	} else if u.Host == "" {
		return Spec{}, fmt.Errorf("%w: %s: want sqs://host:port (an emulator) or sqs://aws", ErrBadTarget, Redact(u.Redacted()))
	}
	name := opts["name"]
	if name == "" {
		name = "sqs"
	}
	delete(opts, "name")
	if _, err := SQSOptions(Spec{URL: raw, Options: opts}); err != nil {
		return Spec{}, err
	}
	return Spec{Name: name, URL: raw, Options: opts}, nil
}

// redriveCount reads maxReceiveCount from a RedrivePolicy given as a knob; a
// deadLetterTargetArn is refused: every run has a DLQ of its own.
func redriveCount(policy string) (int, error) {
	var p map[string]any
	if err := json.Unmarshal([]byte(policy), &p); err != nil {
		return 0, fmt.Errorf("not JSON: %v", err)
	}
	if _, ok := p["deadLetterTargetArn"]; ok {
		return 0, fmt.Errorf("leave deadLetterTargetArn out: durachk points it at the run's own DLQ")
	}
	var n int
	switch v := p["maxReceiveCount"].(type) {
	case float64:
		n = int(v)
	case string:
		n, _ = strconv.Atoi(v)
	}
	if n < 1 || n > 1000 {
		return 0, fmt.Errorf("maxReceiveCount: want a number from 1 to 1000")
	}
	return n, nil
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// SQSOptions builds the adapter's options from a parsed spec.
func SQSOptions(s Spec) (sqs.Options, error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return sqs.Options{}, fmt.Errorf("%w: cannot parse %s", ErrBadTarget, Redact(s.URL))
	}
	o := s.Options
	opts := sqs.Options{Region: o["region"], Kind: sqs.EndpointKind(o["endpoint-kind"]), Profile: o["profile"],
		FIFO: o["fifo"] == "true", ContentBasedDedup: o["content-based-dedup"] == "true", BreakOrder: s.BreakOrder}
	opts.MaxReceiveCount, _ = strconv.Atoi(o["redrive.maxReceiveCount"])
	if v := o["inspect.settle"]; v != "" {
		opts.Settle, _ = time.ParseDuration(v)
	}
	for k, v := range o {
		if a, ok := strings.CutPrefix(k, "attributes."); ok {
			if opts.Attributes == nil {
				opts.Attributes = map[string]string{}
			}
			opts.Attributes[a] = v
		}
	}
	if u.User != nil {
		opts.AccessKey = u.User.Username()
		opts.SecretKey, _ = u.User.Password()
	}
	if u.Hostname() == "aws" {
		opts.Kind = sqs.AWS
		opts.WaitTimeSeconds = 1
	} else {
		scheme := "http"
		if o["tls"] == "true" {
			scheme = "https"
		}
		host := u.Host
		if u.Port() == "" {
			host = u.Hostname() + ":4566"
		}
		opts.Endpoint = scheme + "://" + host
		if opts.AccessKey == "" {
			opts.AccessKey, opts.SecretKey = "test", "test"
		}
		if opts.Region == "" {
			opts.Region = "us-east-1"
		}
	}
	if v := o["lease.wait-time-seconds"]; v != "" {
		n, _ := strconv.Atoi(v)
		opts.WaitTimeSeconds = int32(n)
	}
	return opts, nil
}
