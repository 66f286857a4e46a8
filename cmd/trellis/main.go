// Command trellis is Trellis's command-line tool: migrate the catalog,
// apply statements, read statuses and definitions, run the background
// workers as a standalone process, and run a demo. See "trellis --help".
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/trellis-pg/trellis/cmd/trellis/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels the command's context, so it stops
	// cleanly (the worker closes its client, the demo cleans up); a second
	// one terminates the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cli.Run(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}
