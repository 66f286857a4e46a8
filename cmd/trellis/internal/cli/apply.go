package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/trellis-pg/trellis"
	"github.com/trellis-pg/trellis/internal/grammar"
)

func newApplyCmd(g *globals) *cobra.Command {
	var (
		file        string
		wait        bool
		waitTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "apply {STATEMENT | -f FILE}",
		Short: "Apply TRANSFORM, PAUSE, RESUME, DROP or ALTER statements",
		Long: `apply runs one statement given as an argument, or every statement of FILE
in order (-f -: standard input), and prints one line per statement saying
what it did.

In a file, statements are separated by a line holding only ';' or by one
or more blank lines; a ';' at the end of a statement's last line ends it
too. Lines that begin with "--" are comments. apply stops at the first
statement that fails; the statements before it stay applied.`,
		Example: `  trellis apply "TRANSFORM order_totals FROM orders SELECT price + tax AS total"
  trellis apply -f transforms.sql`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case file != "" && len(args) > 0:
				return usageErrorf("give either a STATEMENT or -f FILE, not both")
			case file == "" && len(args) != 1:
				return usageErrorf("expected one STATEMENT (quote it) or -f FILE, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			w := cmd.OutOrStdout()
			var stmts []grammar.FileStatement
			name := file
			if file == "" {
				stmts = []grammar.FileStatement{{Text: args[0], Line: 1}}
			} else {
				text, err := readStatements(file, g.env.Stdin)
				if err != nil {
					return err
				}
				if file == "-" {
					name = "standard input"
				}
				if stmts = grammar.Split(text); len(stmts) == 0 {
					return fmt.Errorf("%s holds no statements", name)
				}
			}
			c, err := g.connect(ctx, trellis.Options{})
			if err != nil {
				return err
			}
			defer c.Close()
			var targets []string
			for i, s := range stmts {
				res, err := c.Apply(ctx, s.Text)
				if err != nil {
					if file == "" {
						return err
					}
					return statementError(err, stmts, i, name)
				}
				fmt.Fprintln(w, describeApplied(res))
				switch r := res.(type) {
				case trellis.TransformDefined:
					targets = append(targets, r.Target)
				case trellis.Altered:
					targets = append(targets, r.Target)
				case trellis.Resumed:
					for _, a := range r.Addresses {
						targets = append(targets, strings.SplitN(a, ".", 2)[0])
					}
				}
			}
			if !wait {
				return nil
			}
			return waitLive(ctx, c, g, targets, waitTimeout, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the statements from `FILE` (- for standard input)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until every defined, altered or resumed target is live, showing progress on standard error")
	cmd.Flags().DurationVar(&waitTimeout, "wait-timeout", 30*time.Minute, "give up waiting after this long (with --wait)")
	return cmd
}

func readStatements(file string, stdin io.Reader) (string, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", fmt.Errorf("reading statements: %w", err)
	}
	return string(b), nil
}

// statementError says which statement of a file failed, and what is applied.
func statementError(err error, stmts []grammar.FileStatement, i int, name string) error {
	n := len(stmts)
	s := stmts[i]
	msg := fmt.Sprintf("statement %d of %d (line %d of %s: %q) failed: %s", i+1, n, s.Line, name, oneLine(s.FirstLine(), 60), message(err))
	if code := trellis.CodeOf(err); s.Line > 1 && (code == trellis.CodeParse || code == trellis.CodeValidation) {
		msg += " (lines counted from the statement's first line)"
	}
	switch i {
	case 0:
		msg += "; nothing was applied"
	case 1:
		msg += "; statement 1 before it stays applied"
	default:
		msg += fmt.Sprintf("; statements 1-%d before it stay applied", i)
	}
	switch rest := n - i - 1; {
	case rest == 1:
		msg += fmt.Sprintf(", statement %d was not run", n)
	case rest > 1:
		msg += fmt.Sprintf(", statements %d-%d were not run", i+2, n)
	}
	return &wrappedError{msg: msg, err: err}
}

// describeApplied is the line apply prints for what a statement did.
func describeApplied(a trellis.Applied) string {
	switch r := a.(type) {
	case trellis.TransformDefined:
		return "defined " + r.Target
	case trellis.Paused:
		return "paused " + strings.Join(r.Addresses, ", ")
	case trellis.Resumed:
		if len(r.Addresses) == 0 {
			return "resumed nothing (it was not paused)"
		}
		return "resumed " + strings.Join(r.Addresses, ", ")
	case trellis.Dropped:
		return "dropped " + r.Target
	case trellis.Altered:
		return "altered " + r.Target
	}
	return fmt.Sprintf("applied (%T)", a)
}
