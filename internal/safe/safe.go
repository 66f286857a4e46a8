// Package safe keeps a panic in a background part of Trellis from reaching
// the host process: it is recovered, reported, and the part goes on.
package safe

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/trellis-pg/trellis/internal/backoff"
)

// PanicError is a recovered panic.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Do runs fn and returns its error, or a *PanicError if it panicked.
func Do(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return fn()
}

// RestartPause is how long Run waits before running a part that panicked again.
const RestartPause = time.Second

// Run runs fn until it returns or ctx ends. A panic in fn is recovered and
// handed to report; fn runs again after RestartPause.
func Run(ctx context.Context, report func(*PanicError), fn func(context.Context)) {
	for {
		err := Do(func() error { fn(ctx); return nil })
		pe, ok := err.(*PanicError)
		if !ok {
			return
		}
		if report != nil {
			report(pe)
		}
		if !backoff.Sleep(ctx, RestartPause) {
			return
		}
	}
}
