package sqs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/durachk/durachk/internal/targets"
)

// The sqs:// knobs with which SQS moves or removes messages on its own: the
// redrive's maxReceiveCount (as a knob or as the RedrivePolicy attribute) and
// the retention period; a misspelt one is a configuration error.
func TestParseRedriveAndRetention(t *testing.T) {
	const base = "sqs://127.0.0.1:4566?region=us-east-1&"
	tests := []struct {
		name, query string
		wantMRC     int    // the adapter's MaxReceiveCount
		wantAttr    string // attributes passed to CreateQueue, as k=v
		wantErr     string
	}{
		{name: "redrive knob", query: "redrive.maxReceiveCount=3", wantMRC: 3},
		{name: "redrive policy attribute", query: `attributes.RedrivePolicy={"maxReceiveCount":"5"}`, wantMRC: 5},
		{name: "retention", query: "attributes.MessageRetentionPeriod=60", wantAttr: "MessageRetentionPeriod=60"},
		{name: "misspelt redrive", query: "redrive.maxReceiveCnt=3", wantErr: `unknown setting "redrive.maxReceiveCnt"`},
		{name: "redrive out of range", query: "redrive.maxReceiveCount=0", wantErr: "redrive.maxReceiveCount"},
		{name: "someone else's DLQ", query: `attributes.RedrivePolicy={"maxReceiveCount":3,"deadLetterTargetArn":"arn:x"}`, wantErr: "deadLetterTargetArn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := targets.Parse(base + tt.query)
			if tt.wantErr != "" {
				if !errors.Is(err, targets.ErrBadTarget) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrBadTarget naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			o, err := targets.SQSOptions(s)
			if err != nil {
				t.Fatal(err)
			}
			if o.MaxReceiveCount != tt.wantMRC {
				t.Errorf("MaxReceiveCount %d, want %d", o.MaxReceiveCount, tt.wantMRC)
			}
			if k, v, ok := strings.Cut(tt.wantAttr, "="); ok && o.Attributes[k] != v {
				t.Errorf("attributes %v, want %s", o.Attributes, tt.wantAttr)
			}
			if _, ok := o.Attributes["RedrivePolicy"]; ok {
				t.Errorf("RedrivePolicy passed through as an attribute: %v", o.Attributes)
			}
		})
	}
}
