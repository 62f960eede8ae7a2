package interrupt

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// The child mode of this test binary (TestSecondSignalEndsTheProcess):
// Context, "ready", then "cancelled: <cause>" once the context ends, then it
// waits for ever.
func TestMain(m *testing.M) {
	if os.Getenv("INTERRUPT_TEST_CHILD") == "1" {
		ctx, stop := Context()
		defer stop()
		os.Stdout.WriteString("ready\n")
		<-ctx.Done()
		os.Stdout.WriteString("cancelled: " + context.Cause(ctx).Error() + "\n")
		select {}
	}
	os.Exit(m.Run())
}

// TestSignalBeforeContextIsKept: a SIGINT received before Context is called
// (while the other packages initialize) ends the context at once.
func TestSignalBeforeContextIsKept(t *testing.T) {
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); len(signals) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the signal did not arrive")
		}
	}
	ctx, stop := Context()
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the context did not end")
	}
	if c := context.Cause(ctx); c == nil || c.Error() != "interrupt signal received" {
		t.Errorf("cause %v, want the signal", c)
	}
	if errors.Is(context.Cause(ctx), context.Canceled) {
		t.Error("the cause is a plain cancellation, not the signal")
	}
}

// TestSecondSignalEndsTheProcess: the first SIGINT ends the context, the
// second the process, with exit status 130 — also in a process started with
// SIGINT ignored (a background job of a script), where the signal's default
// action, which a second signal used to fall back on, is to ignore it.
func TestSecondSignalEndsTheProcess(t *testing.T) {
	for _, ignored := range []bool{false, true} {
		name := map[bool]string{false: "default", true: "started ignoring SIGINT"}[ignored]
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "INTERRUPT_TEST_CHILD=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if ignored {
				signal.Ignore(syscall.SIGINT) // inherited across exec
			}
			err = cmd.Start()
			if ignored {
				signal.Reset(syscall.SIGINT)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			lines := bufio.NewScanner(out)
			next := func(want string) {
				t.Helper()
				got := make(chan string, 1)
				go func() {
					lines.Scan()
					got <- lines.Text()
				}()
				select {
				case l := <-got:
					if l != want {
						t.Fatalf("child said %q, want %q", l, want)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("child did not say %q", want)
				}
			}
			next("ready")
			cmd.Process.Signal(syscall.SIGINT)
			next("cancelled: interrupt signal received")
			sent := time.Now()
			cmd.Process.Signal(syscall.SIGINT)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 130 {
					t.Errorf("after the second SIGINT: %v, want exit status 130", err)
				}
				t.Logf("ended %s after the second SIGINT", time.Since(sent).Round(time.Millisecond))
			case <-time.After(10 * time.Second):
				t.Fatal("still running 10 s after the second SIGINT")
			}
		})
	}
}
