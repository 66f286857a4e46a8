package capture

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ident"
)

// FingerprintSQL is an SQL expression over a row s of the catalog's sources
// table: the state of its capture triggers (oid, row version, enabled) and
// functions (oid, row version). Disabling and re-enabling a trigger,
// replacing it or a function, or dropping any of them, changes it.
func (n Names) FingerprintSQL() string {
	tbl := "to_regclass(format('%I.%I', s.schema_name, s.table_name))"
	var fns []string
	for _, op := range StatementOps {
		fns = append(fns, fmt.Sprintf("'capture_' || s.id || %s", ident.Literal("_"+op)))
	}
	return fmt.Sprintf(`(coalesce((SELECT string_agg(t.tgname || ':' || t.oid::text || ':' || t.xmin::text || ':' || t.tgenabled::text, ',' ORDER BY t.tgname)
    FROM pg_trigger t WHERE t.tgrelid = %s AND t.tgname LIKE %s AND t.tgparentid = 0), '')
  || '|' || coalesce((SELECT string_agg(p.proname || ':' || p.oid::text || ':' || p.xmin::text, ',' ORDER BY p.proname) FROM pg_proc p
    WHERE p.pronamespace = (SELECT ns.oid FROM pg_namespace ns WHERE ns.nspname = %s) AND p.pronargs = 0
      AND p.proname IN ('capture_' || s.id, %s)), ''))`,
		tbl, ident.Literal("trellis_"+n.tag()+"_%"), ident.Literal(n.Catalog), strings.Join(fns, ", "))
}

// AnyDisrupted reports whether some installed source's capture no longer
// matches its fingerprint: the check Detect makes, read-only, so that the
// staging worker takes the instance's DDL lock only when there is
// something to record.
func (n Names) AnyDisrupted(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (bool, error) {
	var found bool
	err := q.QueryRow(ctx, n.sql(sqlAnyDisrupted)).Scan(&found)
	return found, err
}

// sql expands one of the package's statements (sql.go) for this instance.
func (n Names) sql(format string) string {
	return catalog.New(n.Catalog).SQL(format, n.FingerprintSQL())
}

// Disruption is a source whose capture was changed outside Trellis.
type Disruption struct {
	SourceID int
	Table    string
	Reason   string
}

// Detect finds the sources whose capture was changed outside Trellis (a
// trigger disabled, dropped or replaced, the function replaced, the table
// gone), marks them, and pauses every definition reading them (one already
// paused stays as it is; its RESUME reinstalls capture) with a capture
// failure of kind disruption: rows written meanwhile never reached
// a target, so nothing may read them as if they had. The caller's
// transaction should hold the instance's DDL lock. It returns the sources
// newly found disrupted.
func (n Names) Detect(ctx context.Context, tx pgx.Tx) ([]Disruption, error) {
	rows, err := tx.Query(ctx, n.sql(sqlDisrupted))
	if err != nil {
		return nil, fmt.Errorf("checking capture: %w", err)
	}
	var found []Disruption
	for rows.Next() {
		var d Disruption
		var exists bool
		var was, now string
		if err := rows.Scan(&d.SourceID, &d.Table, &exists, &was, &now); err != nil {
			rows.Close()
			return nil, err
		}
		d.Reason = describe(d.Table, exists, was, now)
		found = append(found, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, d := range found {
		if _, err := tx.Exec(ctx, n.sql(sqlMarkDisrupted), d.SourceID, d.Reason); err != nil {
			return nil, err
		}
		if err := n.PauseReaders(ctx, tx, d.SourceID, d.Table, d.Reason); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// PauseReaders pauses the readers of the source sourceID (the table named
// table) as disrupted, for reason; a reader already paused stays as it is.
func (n Names) PauseReaders(ctx context.Context, tx pgx.Tx, sourceID int, table, reason string) error {
	_, err := tx.Exec(ctx, n.sql(sqlPauseDisrupted), sourceID, table, reason)
	return err
}

func describe(table string, exists bool, was, now string) string {
	if !exists {
		return fmt.Sprintf("table %s was dropped or renamed: capture of it is gone", table)
	}
	wasTrig, wasFn, _ := strings.Cut(was, "|")
	nowTrig, nowFn, _ := strings.Cut(now, "|")
	switch {
	case nowTrig == "":
		return fmt.Sprintf("the capture triggers of %s were dropped: writes since then did not reach the targets", table)
	case strings.Contains(nowTrig, ":D"):
		return fmt.Sprintf("a capture trigger of %s is disabled: writes since then do not reach the targets", table)
	case wasTrig != nowTrig:
		return fmt.Sprintf("the capture triggers of %s were disabled, re-enabled or replaced outside Trellis: writes meanwhile may not have reached the targets", table)
	case nowFn == "":
		return fmt.Sprintf("the capture function of %s was dropped", table)
	case wasFn != nowFn:
		return fmt.Sprintf("the capture function of %s was replaced outside Trellis", table)
	}
	return fmt.Sprintf("capture of %s was changed outside Trellis", table)
}
