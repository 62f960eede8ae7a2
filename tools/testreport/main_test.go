package main

import (
	"strings"
	"testing"
)

// Lines of `go test -json` as the go command writes them.
const (
	start   = `{"Action":"start","Package":"p"}`
	skipped = `{"Action":"output","Package":"p","Test":"TestBroker","Output":"    b_test.go:9: DURACHK_PG_URL is not set: no store\n"}
{"Action":"skip","Package":"p","Test":"TestBroker","Elapsed":0}`
	skippedOther = `{"Action":"output","Package":"p","Test":"TestRoot","Output":"    r_test.go:3: nft needs root\n"}
{"Action":"skip","Package":"p","Test":"TestRoot","Elapsed":0}`
	skippedNode = `{"Action":"output","Package":"p","Test":"TestBullMQ","Output":"    b_test.go:9: needs Node.js: node is not on PATH (drivers/bullmq runs on it)\n"}
{"Action":"skip","Package":"p","Test":"TestBullMQ","Elapsed":0}`
	failed = `{"Action":"output","Package":"p","Test":"TestBad","Output":"    x_test.go:5: want 1, got 2\n"}
{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestBad","Elapsed":0}`
	passed  = `{"Action":"pass","Package":"p","Elapsed":1.5}`
	pkgFail = `{"Action":"fail","Package":"p","Elapsed":1.5}`
)

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		require bool
		wantErr string // "" : nil
		want    []string
	}{
		{"a pass", []string{start, passed}, false, "", []string{"ok  \tp\t1.500s", "skipped: none"}},
		{"skips counted by reason", []string{start, skipped, skippedOther, passed}, false, "",
			[]string{"skipped: 2 test(s), 1 of them for a missing service", "1 × DURACHK_PG_URL is not set: no store (p TestBroker)", "1 × nft needs root (p TestRoot)"}},
		{"a skip for an unset URL fails when services are required", []string{start, skipped, passed}, true, "1 test(s) skipped for a missing service", nil},
		{"a skip for a missing Node.js fails when services are required", []string{start, skippedNode, passed}, true, "1 test(s) skipped for a missing service", nil},
		{"another skip does not", []string{start, skippedOther, passed}, true, "", []string{"1 × nft needs root"}},
		{"a failed test's output and the package's failure", []string{start, failed, pkgFail}, false, "1 package(s) failed: p",
			[]string{"x_test.go:5: want 1, got 2", "--- FAIL: TestBad", "FAIL\tp\t1.500s"}},
		{"a package without a result", []string{start}, false, "no result from p", nil},
		{"the go command's own words pass through", []string{"go: downloading x v1", start, passed}, false, "", []string{"go: downloading x v1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			err := run(strings.NewReader(strings.Join(tt.in, "\n")+"\n"), &out, tt.require)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("run = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("run = %v, want %q", err, tt.wantErr)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
