package safe

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDoTurnsAPanicIntoAnError(t *testing.T) {
	err := Do(func() error {
		var s []int
		_ = s[3]
		return nil
	})
	var pe *PanicError
	if !errors.As(err, &pe) || pe.Stack == "" {
		t.Fatalf("want a PanicError with a stack, got %v", err)
	}
	want := errors.New("plain")
	if err := Do(func() error { return want }); err != want {
		t.Fatalf("want the function's error, got %v", err)
	}
}

func TestRunReportsAndRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, reports := 0, 0
	Run(ctx, func(*PanicError) { reports++ }, func(context.Context) {
		runs++
		if runs == 1 {
			panic("first run")
		}
	})
	if runs != 2 || reports != 1 {
		t.Fatalf("runs %d, reports %d; want 2 and 1", runs, reports)
	}
}
