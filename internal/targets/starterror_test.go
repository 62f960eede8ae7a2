package targets

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStartErrorKeepsWhatTheServerSaid: a private process that exits while
// starting is a StartError holding the end of its output and of its log
// files, the secret scrubbed; the message quotes the last lines, the log
// file's first.
func TestStartErrorKeepsWhatTheServerSaid(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "server.log")
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := &PrivateProcess{Addr: "127.0.0.1:" + strconv.Itoa(port), Name: "fake", Secret: "s3cr3t",
		Logs: []string{filepath.Join(dir, "*.log")},
		Command: func() *exec.Cmd {
			return exec.Command("sh", "-c", `echo "console: starting with s3cr3t"; echo "boot failed: port in use" >>`+logFile+`; echo "console: bye" >&2; exit 1`)
		}}
	err = p.Start(context.Background())
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("Start: %v, want a StartError", err)
	}
	logs := map[string]string{}
	for _, l := range se.Logs {
		logs[l.Name] = string(l.Data)
	}
	if !strings.Contains(logs["output"], "console: starting with xxxxx") || !strings.Contains(logs["output"], "console: bye") || strings.Contains(logs["output"], "s3cr3t") {
		t.Errorf("output %q: want both lines, the secret scrubbed", logs["output"])
	}
	if logs["server.log"] != "boot failed: port in use\n" {
		t.Errorf("server.log %q", logs["server.log"])
	}
	if msg := err.Error(); !strings.Contains(msg, "exited while starting") || !strings.HasSuffix(msg, "its last log lines: boot failed: port in use") {
		t.Errorf("message %q: want the exit and the log file's last line", msg)
	}
	// Without log files, the output is quoted.
	if tail := (&StartError{Logs: se.Logs[:1]}).Tail(1); se.Logs[0].Name == "output" && tail != "console: bye" {
		t.Errorf("tail of the output %q, want its last line", tail)
	}
}

// TestStartErrorKeepsTheEnd: a long log keeps its end, logKeep bytes.
func TestStartErrorKeepsTheEnd(t *testing.T) {
	var b ringBuffer
	line := strings.Repeat("x", 99) + "\n"
	for range 2 * logKeep / len(line) {
		_, _ = b.Write([]byte(line))
	}
	_, _ = b.Write([]byte("the last line\n"))
	got := b.Bytes()
	if len(got) != logKeep || !strings.HasSuffix(string(got), "the last line\n") {
		t.Errorf("kept %d bytes ending %q, want %d ending with the last line", len(got), got[len(got)-20:], logKeep)
	}
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte("098716789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := string(readTail(f, 4)); got != "6789" {
		t.Errorf("readTail = %q, want 6789", got)
	}
}
