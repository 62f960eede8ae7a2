package targets

import (
	"slices"
	"strings"
	"testing"
)

// TestPrivatePostgresSettings: the knobs that change what a power loss takes
// reach the private server's command line; bad values are configuration errors.
func TestPrivatePostgresSettings(t *testing.T) {
	tests := []struct {
		name, url string
		wantErr   string
		want      []string // settings on the private server's command line
		not       []string
	}{
		{name: "defaults", url: "postgres://postgres@127.0.0.1:5432/test",
			want: []string{"fsync=on", "synchronous_commit=on", "wal_sync_method=fdatasync", "full_page_writes=on"}, not: []string{"synchronous_commit=off"}},
		{name: "fsync off", url: "postgres://postgres@127.0.0.1:5432/test?private-instance.fsync=off", want: []string{"fsync=off"}},
		{name: "asynchronous commit", url: "postgres://postgres@127.0.0.1:5432/test?synchronous_commit=off", want: []string{"fsync=on", "synchronous_commit=off"}, not: []string{"synchronous_commit=on"}},
		{name: "torn pages unrepaired", url: "postgres://postgres@127.0.0.1:5432/test?private-instance.full_page_writes=off&private-instance.wal_sync_method=open_datasync",
			want: []string{"full_page_writes=off", "wal_sync_method=open_datasync"}},
		{name: "bad fsync", url: "postgres://postgres@127.0.0.1:5432/test?private-instance.fsync=maybe", wantErr: "private-instance.fsync"},
		{name: "a sync method not on Linux", url: "postgres://postgres@127.0.0.1:5432/test?private-instance.wal_sync_method=fsync_writethrough", wantErr: "private-instance.wal_sync_method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.url)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse: %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			args := privatePostgresArgs(s, "/data", 5555)
			for _, w := range tt.want {
				if !slices.Contains(args, w) {
					t.Errorf("%v lacks %s", args, w)
				}
			}
			for _, w := range tt.not {
				if slices.Contains(args, w) {
					t.Errorf("%v has %s", args, w)
				}
			}
		})
	}
}

// TestPowerLossMetadataKnob: every kind with a private instance takes the lazy
// file system's model; a kind without one rejects it as unknown.
func TestPowerLossMetadataKnob(t *testing.T) {
	tests := []struct {
		url, want, wantErr string
	}{
		{url: "redis://127.0.0.1:6379/0?power-loss.metadata=journal", want: "journal"},
		{url: "postgres://postgres@127.0.0.1:5432/test?power-loss.metadata=posix&synchronous_commit=off", want: "posix"},
		{url: "amqp://guest:guest@127.0.0.1:5672/?power-loss.metadata=journal", want: "journal"},
		{url: "redis://127.0.0.1:6379/0", want: ""},
		{url: "redis://127.0.0.1:6379/0?power-loss.metadata=ext4", wantErr: "power-loss.metadata"},
		{url: "sqs://127.0.0.1:9324?region=us-east-1&power-loss.metadata=journal", wantErr: "power-loss.metadata"},
	}
	for _, tt := range tests {
		s, err := Parse(tt.url)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: %v, want an error naming %s", tt.url, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.url, err)
			continue
		}
		if got := s.Options[PowerLossMetadata]; got != tt.want {
			t.Errorf("%s: %s=%q, want %q", tt.url, PowerLossMetadata, got, tt.want)
		}
		if strings.Contains(s.URL, "power-loss") {
			t.Errorf("%s: the knob reached the broker URL %s", tt.url, s.URL)
		}
	}
}
