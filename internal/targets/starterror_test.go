package targets

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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

// TestFreePortIsFreeEverywhere: a port held on another loopback address
// (where this machine's private clusters listen) is not free: RabbitMQ's
// distribution port check binds the wildcard address and would fail.
func TestFreePortIsFreeEverywhere(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	defer l.Close()
	held := l.Addr().(*net.TCPAddr).Port
	if freeEverywhere(held) {
		t.Errorf("port %d held on 127.0.0.2 is called free", held)
	}
	// The port is free on 127.0.0.1: what FreePort checked before.
	if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(held)); err != nil {
		t.Skipf("the port is taken on 127.0.0.1 too: %v", err)
	} else {
		l2.Close()
	}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if !freeEverywhere(port) || port == held {
			t.Fatalf("FreePort returned %d, not free on every address", port)
		}
	}
}

// A private broker's port comes from below the kernel's ephemeral range
// (which any outgoing connection may take before the broker binds it), is
// free on every address, and is never handed out twice in a row: a cluster
// draws every node's ports before any node binds one. FreePortOn gives the
// same, bindable on its address.
func TestFreePortsAreStableAndDistinct(t *testing.T) {
	lo, hi := stablePorts()
	if hi <= lo {
		t.Skipf("the ephemeral range starts at %d: no room below it", hi)
	}
	seen := map[int]bool{}
	for i := range 300 {
		get := FreePort
		if i%2 == 1 {
			get = func() (int, error) { return FreePortOn("127.0.0.1") }
		}
		port, err := get()
		if err != nil {
			t.Fatal(err)
		}
		if port < lo || port >= hi {
			t.Fatalf("port %d is outside %d–%d (the kernel's ephemeral range starts at %d)", port, lo, hi-1, hi)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	d := drawnPorts{at: map[int]reservation{}}
	if !d.take(9871) || d.take(9871) {
		t.Error("a port handed out is handed out again at once")
	}
	// Another process (as another process would: its own drawn) cannot take
	// it while this one holds it.
	other := drawnPorts{at: map[int]reservation{}}
	if other.take(9871) {
		t.Error("a port reserved by one drawnPorts is handed out by another")
	}
	r := d.at[9871]
	r.at = time.Now().Add(-11 * time.Minute)
	d.at[9871] = r
	if !d.take(9871) {
		t.Error("a port handed out eleven minutes ago is still held back")
	}
	d.at[9871].release()
	if !other.take(9871) {
		t.Error("a released port cannot be taken by another")
	}
	other.at[9871].release()
}
