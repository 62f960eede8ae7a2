// Package interrupt turns SIGINT and SIGTERM into the cancellation of a
// context, listening from as early in the process as Go allows.
//
// A process started with SIGINT ignored (a background job of a shell script:
// `durachk run & ...; kill -INT $!`) has the kernel discard every SIGINT
// until a handler is installed: one installed in main, after every package's
// init (15 ms idle, far more on a loaded machine), lost the signals of those
// first milliseconds, and the run went on to its end. This package has no
// dependency beyond the standard library's signal handling (not even fmt),
// so Go initializes it among the first, and it installs the handler in its
// init.
// A signal that comes before Context is called is kept and ends the context
// at once.
package interrupt

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
)

// signals receives SIGINT and SIGTERM from this package's init on; two
// places: the first ends the work, the second the process.
var signals = make(chan os.Signal, 2)

func init() {
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
}

// Context returns a context that the first SIGINT or SIGTERM of the process
// (also one received before the call) cancels, with "<signal> signal
// received" as its cause. A second signal ends the process at once with
// exit status 128 + the signal's number, as the signal's default action
// would (which a process started with the signal ignored does not have).
// stop releases the context; the signals stay handled. Call it once.
func Context() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		var first os.Signal
		select {
		case first = <-signals:
		case <-done:
			return
		}
		cancel(errors.New(first.String() + " signal received"))
		// The work in flight ends; a second signal ends durachk (what it
		// leaves, `durachk cleanup` removes).
		s := <-signals
		n := 0
		if ss, ok := s.(syscall.Signal); ok {
			n = int(ss)
		}
		os.Exit(128 + n)
	}()
	return ctx, func() {
		close(done)
		cancel(context.Canceled)
	}
}
