// Package capture installs and removes the statement-level triggers that
// append every committed change of a source table to the ledger. Installing
// takes a lock on the source table; it is taken with a short lock_timeout in
// a loop, so the table's writers never queue behind Trellis for long.
package capture

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/backoff"
	"github.com/trellis-pg/trellis/internal/catalog"
	"github.com/trellis-pg/trellis/internal/ident"
	"github.com/trellis-pg/trellis/internal/ledger"
	"github.com/trellis-pg/trellis/internal/locks"
	"github.com/trellis-pg/trellis/internal/pgerr"
)

// Names are the per-instance names of capture objects.
type Names struct {
	Catalog string // catalog schema
}

func (n Names) tag() string {
	return locks.InstanceTag(n.Catalog)
}

// StagingChannel is the NOTIFY channel that wakes the staging worker when
// the definitions change.
func (n Names) StagingChannel() string { return "trellis_" + n.tag() + "_staging" }

// Function is the unqualified name of a source's main capture function:
// its TRUNCATE trigger's and, for a partitioned table, its row trigger's.
func (n Names) Function(src int) string { return fmt.Sprintf("capture_%d", src) }

// OpFunction is the unqualified name of the capture function of one
// operation (ins, upd or del) of a plain table's statement triggers.
func (n Names) OpFunction(src int, op string) string { return fmt.Sprintf("capture_%d_%s", src, op) }

// StatementOps are the operations whose statement triggers of a plain
// table each call a function of their own (OpFunction): a function that
// serves one operation tests no TG_OP, which cost a writer's statement
// about 6,000 instructions (decision 0047).
var StatementOps = []string{"ins", "upd", "del"}

// Trigger is the name of a capture trigger for an operation (ins, upd, del, trunc).
func (n Names) Trigger(op string) string { return "trellis_" + n.tag() + "_" + op }

// Ops are the trigger operations capture installs.
var Ops = []string{"ins", "upd", "del", "row", "trunc"}

// settingFree are the built-in types (as format_type names them, without
// modifiers or array brackets) whose text form no session setting changes.
var settingFree = map[string]bool{
	"smallint": true, "integer": true, "bigint": true, "numeric": true, "boolean": true,
	"text": true, "character varying": true, "character": true, `"char"`: true, "name": true,
	"uuid": true, "oid": true, "json": true, "jsonb": true,
	"inet": true, "cidr": true, "macaddr": true, "macaddr8": true, "bit": true, "bit varying": true,
}

// settingsFor pins the settings a key's or captured value's text form
// depends on, so it renders the same from every session: only those the
// types need, since each costs the writer a little. A type it cannot tell
// by its name (a domain, an enum, a composite, a range) gets every pin: a
// domain over date renders by the writer's DateStyle as a date does, one
// over bytea by its bytea_output. bytea_output and lc_monetary are pinned
// to what Trellis's own sessions start with (ByteaOutput, Monetary), so
// the drain reads the text back as the writer rendered it.
func settingsFor(types []string) string {
	var dates, floats, bytea, money bool
	for _, t := range types {
		t = strings.ToLower(strings.TrimSuffix(t, unrecordedMark))
		base := strings.TrimRight(t, "[]")
		if i := strings.IndexByte(base, '('); i >= 0 && strings.HasSuffix(base, ")") {
			base = base[:i]
		}
		switch {
		case base == "bytea":
			bytea = true
		case base == "money":
			money = true
		case strings.Contains(t, "time"), strings.Contains(t, "date"), strings.Contains(t, "interval"):
			dates = true
		case strings.Contains(t, "double"), strings.Contains(t, "real"), strings.Contains(t, "float"):
			floats = true
		case !settingFree[base]:
			dates, floats, bytea, money = true, true, true, true
		}
	}
	var b strings.Builder
	if dates {
		b.WriteString("SET \"TimeZone\" = 'UTC'\nSET \"DateStyle\" = 'ISO, YMD'\nSET \"IntervalStyle\" = 'postgres'\n")
	}
	if floats {
		b.WriteString("SET extra_float_digits = 3\n")
	}
	if bytea {
		b.WriteString("SET bytea_output = '" + ByteaOutput + "'\n")
	}
	if money {
		b.WriteString("SET lc_monetary = '" + Monetary + "'\n")
	}
	return b.String()
}

// ByteaOutput and Monetary are the bytea_output and lc_monetary every
// Trellis session and every capture function rendering such a value run
// with: a bytea or money key's text (its bucket, the key lock recomputes
// take) is then the same whatever the writer's session sets.
const (
	ByteaOutput = "hex"
	Monetary    = "C"
)

// AsText renders expr, a value of type typ (as format_type names it under
// the pinned search_path, so qualified unless it is pg_catalog's), as its
// text form without running a cast a user created: a type outside
// pg_catalog is rendered by its output function (format's %s calls it, as
// the I/O cast to text would; array_out, record_out and range_out call
// their elements' output functions in turn), since its owner may create a
// cast to text at any time, which would run as the capture function's
// owner. A pg_catalog type keeps the cheaper cast: only its owner, the
// bootstrap superuser, could create one. An unknown type (typ "") is
// rendered as one outside pg_catalog.
func AsText(expr, typ string) string {
	if typ != "" && !strings.Contains(strings.TrimSuffix(typ, unrecordedMark), ".") {
		return expr + "::pg_catalog.text"
	}
	// format renders NULL as ''; the null test is on the value itself
	// (IS DISTINCT FROM NULL is a plain null test, even for a composite
	// whose fields are all NULL, which renders as "(,)").
	return "CASE WHEN " + expr + " IS NOT DISTINCT FROM NULL THEN NULL ELSE pg_catalog.format('%s', " + expr + ") END"
}

// typeAt is the type types records for column i, or "" (unknown, which
// AsText renders as a type outside pg_catalog) when it records none.
func typeAt(types []string, i int) string {
	if i < len(types) {
		return types[i]
	}
	return ""
}

// FunctionSQL is the CREATE OR REPLACE FUNCTION of a source's capture
// function. It only appends to the ledger: no shared row is updated, so
// writers of the table never serialise on Trellis, and it sends no
// notification (PostgreSQL serialises the commits of notifying
// transactions; drain workers poll instead).
//
// It never raises into the writer's statement. It runs with its owner's
// rights (the catalog owner: writers need no right on the catalog) under a
// pinned search_path, every catalog name qualified. It appends to the
// segment its transaction's start time picks (ledger.SegmentAt), reading
// no table to find it. A read-only probe, in a block that catches every error, first
// plans the names capture reads (the table's columns as capture was
// installed for, the segment): a column renamed or dropped, in the
// writer's own transaction or not, or a damaged catalog, fails the probe,
// and then the statement records only that the table must be re-read (a
// row without a key, as a TRUNCATE does) and the staging worker fits
// capture to the table. The probe writes nothing, so its subtransaction
// takes no transaction id: a writer's long transaction never overflows
// PostgreSQL's subtransaction cache.
//
// It waits for the locks it takes whatever the writer's lock_timeout: a
// writer's transaction that began before its segment stopped being the
// current one appends to it still, and reclaim may hold its brief ACCESS
// EXCLUSIVE lock on it, on which a small lock_timeout of the writer's
// would then fail its statement.
//
// A plain table's statement triggers each call a function of one
// operation (OpFunction); its main function (Function) serves its
// TRUNCATE trigger, which records that the table must be re-read.
// FunctionsSQL returns the CREATE statements of all of them.
func (n Names) FunctionsSQL(s catalog.Source) []string {
	cat := ident.Quote(n.Catalog)
	// Captured columns that are no longer recorded (dropped from the
	// table) keep their place in the ledger's vals, as NULL.
	recorded := func(i int) bool { return i >= len(s.CapTypes) || !IsUnrecorded(s.CapTypes[i]) }
	render := func(alias string, cols []string, caps bool) string {
		if len(cols) == 0 {
			return "NULL::pg_catalog.text[]"
		}
		types := s.KeyTypes
		if caps {
			types = s.CapTypes
		}
		parts := make([]string, len(cols))
		for i, k := range cols {
			if caps && !recorded(i) {
				parts[i] = "NULL::pg_catalog.text"
				continue
			}
			parts[i] = AsText(alias+"."+ident.Quote(k), typeAt(types, i))
		}
		return "ARRAY[" + strings.Join(parts, ", ") + "]"
	}
	// named lists every column capture reads, for the probe.
	named := func(alias string, old bool) string {
		var parts []string
		for _, k := range s.KeyCols {
			parts = append(parts, alias+"."+ident.Quote(k))
		}
		if old {
			for i, k := range s.CapCols {
				if recorded(i) {
					parts = append(parts, alias+"."+ident.Quote(k))
				}
			}
		}
		return strings.Join(parts, ", ")
	}
	// s is the segment the writer's transaction appends to, picked by
	// its start time (ledger.SegmentAt): finding it reads no table, and
	// nothing in it can fail.
	seg := ledger.SegmentAt("pg_catalog.now()")
	head := func(name string) string {
		return fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s.%s() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
%s
%sAS $trellis$
DECLARE
  s pg_catalog.int8 := %s;
BEGIN
`, cat, ident.Quote(name), locks.FunctionNoTimeout, settingsFor(append(append([]string(nil), s.KeyTypes...), s.CapTypes...)), seg)
	}
	// reread records that the table must be re-read, when capture cannot
	// read this statement's rows (a row without a key, as a TRUNCATE
	// does), and returns. It goes through the partitioned ledger: a
	// catalog too damaged for that records nothing (the staging worker
	// repairs the ledger and re-reads every table).
	reread := func(indent string) string {
		return strings.ReplaceAll(fmt.Sprintf(`BEGIN
  INSERT INTO %[1]s.ledger (seg, src, bucket, key) VALUES (%[3]s, %[2]d, 0, NULL);
EXCEPTION WHEN OTHERS THEN
  NULL;
END;
RETURN NULL;`, cat, s.ID, seg), "\n", "\n"+indent) + "\n"
	}
	// guarded is an IF over the segment s, one branch per segment: a
	// read-only probe, in a block that catches every error, then the
	// append (body, formatted with the segment's number and quoted
	// name). The probe names the segment, so it locks it as appending to
	// it does (from then on until the writer's transaction ends, nobody
	// can drop or detach it), and plans without running them the reads
	// of the statement's rows (from; pre runs before it, in the same
	// block). The reads are planned with the segment, in one statement: a
	// plan is made again when a relation it reads changes, and the append
	// to the segment is then planned again too, so the probe fails
	// whenever the append would, and then the statement records only that
	// the table must be re-read. Its condition is false: the planner keeps
	// every relation it names (their locks, rights and plan dependencies)
	// but plans no scan, so starting it costs almost nothing (decision
	// 0023). One IF over the segment, not one for the probe and one for
	// the append: each test of s costs the writer about 2,000 instructions
	// (decision 0035).
	guarded := func(pre, from string, body func(i int, seg string) string) string {
		probe := "PERFORM FROM ONLY %[2]s l WHERE false;"
		if from != "" {
			probe = "PERFORM FROM ONLY %[2]s l, (" + strings.ReplaceAll(from, "%", "%%") + ") p WHERE false;"
		}
		branch := func(i int) string {
			name := cat + "." + ledger.Segment(i)
			return fmt.Sprintf("BEGIN\n%s  %s\nEXCEPTION WHEN OTHERS THEN\n  %sEND;\n%s\nRETURN NULL;",
				pre, fmt.Sprintf(probe, i, name), reread("  "), body(i, name))
		}
		// The branches are halved by each test, so that every segment
		// costs the same two tests (an ELSIF chain cost one to four).
		var split func(lo, hi int) string
		split = func(lo, hi int) string {
			if hi-lo == 1 {
				return branch(lo)
			}
			mid := (lo + hi) / 2
			in := func(x string) string { return "  " + strings.ReplaceAll(x, "\n", "\n  ") }
			return fmt.Sprintf("IF s < %d THEN\n%s\nELSE\n%s\nEND IF;", mid, in(split(lo, mid)), in(split(mid, hi)))
		}
		return "    " + strings.ReplaceAll(split(0, ledger.Segments), "\n", "\n    ") + "\n"
	}
	tail := "  " + reread("  ") + "END\n$trellis$"
	// insert appends the rows of a query (key, vals) to segment i (name),
	// addressed directly (routing through the partitioned ledger costs
	// every statement). It writes no bucket: the drain computes a row's
	// bucket from its key when it reads it (hashing the key's text was
	// 8,000 instructions a row; decision 0036).
	insert := func(rows string) func(i int, name string) string {
		return func(i int, name string) string {
			return fmt.Sprintf("INSERT INTO %s (seg, src, key, vals)\n  SELECT %d, %d, c.key, c.vals FROM (%s) AS c(key, vals);",
				name, i, s.ID, rows)
		}
	}
	if s.Partitioned {
		// A row-level trigger: its probe evaluates the record's fields. A
		// session's cached plan resolves a field only when it evaluates
		// it, so planning the fields under LIMIT 0 would check nothing
		// once cached (a column renamed or retyped since would then fail
		// the INSERT below, in the writer's statement).
		fields := func(list string) string { return "  PERFORM " + list + ";\n" }
		row := func(r, vals string) func(i int, name string) string {
			return insert("SELECT " + render(r, s.KeyCols, false) + ", " + vals)
		}
		same := make([]string, len(s.KeyCols))
		for i, k := range s.KeyCols {
			typ := typeAt(s.KeyTypes, i)
			same[i] = AsText("NEW."+ident.Quote(k), typ) + " IS NOT DISTINCT FROM " + AsText("OLD."+ident.Quote(k), typ)
		}
		updated := func(i int, name string) string {
			return row("OLD", render("OLD", s.CapCols, true))(i, name) + fmt.Sprintf("\nIF NOT (%s) THEN\n  %s\nEND IF;",
				strings.Join(same, " AND "), row("NEW", "NULL::pg_catalog.text[]")(i, name))
		}
		return []string{head(n.Function(s.ID)) + fmt.Sprintf(`  IF TG_OP = 'INSERT' THEN
%s  ELSIF TG_OP = 'UPDATE' THEN
%s  ELSIF TG_OP = 'DELETE' THEN
%s  END IF;
`, guarded(fields(named("NEW", false)), "", row("NEW", "NULL::pg_catalog.text[]")),
			guarded(fields(named("OLD", true)+", "+named("NEW", false)), "", updated),
			guarded(fields(named("OLD", true)), "", row("OLD", render("OLD", s.CapCols, true)))) + tail}
	}
	newRows := "SELECT " + render("nw", s.KeyCols, false) + ", NULL::pg_catalog.text[] FROM trellis_new nw"
	oldRows := "SELECT " + render("od", s.KeyCols, false) + ", " + render("od", s.CapCols, true) + " FROM trellis_old od"
	// An update records every old row (its key, and old values when a
	// reader needs them) and every new row's key: the drain reduces them
	// to the changed keys. Recording only the new keys that are not old
	// ones cost more than the rows it saves (decision 0023), and its
	// anti-join, planned once for the statement sizes a session meets
	// first, could go quadratic on a large update. Each branch returns
	// once it appended: a TRUNCATE (and only it) reaches the end, where
	// the table is recorded to be re-read (the main function, which only
	// its TRUNCATE trigger calls, does only that).
	bodies := map[string]string{
		"ins": guarded("", "SELECT "+named("nw", false)+" FROM trellis_new nw", insert(newRows)),
		"upd": guarded("", "SELECT "+named("od", true)+" FROM trellis_old od", insert(oldRows+" UNION ALL "+newRows)),
		"del": guarded("", "SELECT "+named("od", true)+" FROM trellis_old od", insert(oldRows)),
	}
	out := []string{head(n.Function(s.ID)) + tail}
	for _, op := range StatementOps {
		out = append(out, head(n.OpFunction(s.ID, op))+bodies[op]+tail)
	}
	return out
}

// TriggersSQL creates the capture triggers of a source: statement-level
// triggers with transition tables for a plain table; for a partitioned one,
// a row-level trigger PostgreSQL clones onto every partition, and TRUNCATE
// triggers on the parent and each leaf.
func (n Names) TriggersSQL(s catalog.Source) []string {
	tbl := ident.Qualified(s.Schema, s.Table)
	fn := ident.Quote(n.Catalog) + "." + ident.Quote(n.Function(s.ID))
	trunc := fmt.Sprintf("CREATE TRIGGER %s AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s()", ident.Quote(n.Trigger("trunc")), tbl, fn)
	if s.Partitioned {
		out := []string{
			fmt.Sprintf("CREATE TRIGGER %s AFTER INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION %s()", ident.Quote(n.Trigger("row")), tbl, fn),
			trunc,
		}
		for _, p := range s.Partitions {
			out = append(out, n.PartitionTruncateSQL(s, p)...)
		}
		return out
	}
	opFn := func(op string) string { return ident.Quote(n.Catalog) + "." + ident.Quote(n.OpFunction(s.ID, op)) }
	return []string{
		fmt.Sprintf("CREATE TRIGGER %s AFTER INSERT ON %s REFERENCING NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION %s()", ident.Quote(n.Trigger("ins")), tbl, opFn("ins")),
		fmt.Sprintf("CREATE TRIGGER %s AFTER UPDATE ON %s REFERENCING OLD TABLE AS trellis_old NEW TABLE AS trellis_new FOR EACH STATEMENT EXECUTE FUNCTION %s()", ident.Quote(n.Trigger("upd")), tbl, opFn("upd")),
		fmt.Sprintf("CREATE TRIGGER %s AFTER DELETE ON %s REFERENCING OLD TABLE AS trellis_old FOR EACH STATEMENT EXECUTE FUNCTION %s()", ident.Quote(n.Trigger("del")), tbl, opFn("del")),
		trunc,
	}
}

// PartitionTruncateSQL (re)creates the TRUNCATE trigger of one leaf
// partition (given as schema.table, quoted) of a partitioned source.
func (n Names) PartitionTruncateSQL(s catalog.Source, partition string) []string {
	fn := ident.Quote(n.Catalog) + "." + ident.Quote(n.Function(s.ID))
	return []string{
		fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", ident.Quote(n.Trigger("trunc")), partition),
		fmt.Sprintf("CREATE TRIGGER %s AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s()", ident.Quote(n.Trigger("trunc")), partition, fn),
	}
}

// DropSQL removes a source's capture triggers and function.
func (n Names) DropSQL(s catalog.Source) []string {
	tbl := ident.Qualified(s.Schema, s.Table)
	var out []string
	for _, op := range Ops {
		out = append(out, fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", ident.Quote(n.Trigger(op)), tbl))
	}
	// CASCADE takes the TRUNCATE triggers of partitions along.
	for _, fn := range n.functions(s.ID) {
		out = append(out, fmt.Sprintf("DROP FUNCTION IF EXISTS %s.%s() CASCADE", ident.Quote(n.Catalog), ident.Quote(fn)))
	}
	return out
}

// functions are the unqualified names of every capture function a source
// may have (the main one first), whatever kind of table it is.
func (n Names) functions(src int) []string {
	out := []string{n.Function(src)}
	for _, op := range StatementOps {
		out = append(out, n.OpFunction(src, op))
	}
	return out
}

// Waiting reports one failed attempt to take a source's lock: the caller
// may record it and decide whether to go on.
type Waiting func(attempt int, err error)

// LockTimeout is how long one attempt waits for a source table's lock.
const LockTimeout = 200 * time.Millisecond

// WithLock runs fn in a transaction whose lock_timeout is short, retrying
// with backoff while fn fails on a lock timeout, until ctx ends.
func WithLock(ctx context.Context, pool *pgxpool.Pool, waiting Waiting, fn func(tx pgx.Tx) error) error {
	retry := backoff.Exponential{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := locks.SetTimeout(ctx, tx, LockTimeout); err != nil {
				return err
			}
			return fn(tx)
		})
		if err == nil || !IsLockTimeout(err) {
			return err
		}
		if waiting != nil {
			waiting(attempt, err)
		}
		if !backoff.Sleep(ctx, retry.Next()) {
			return ctx.Err()
		}
	}
}

// LockMode is the lock installing, widening or removing capture takes on a
// source table (CREATE TRIGGER's).
const LockMode = "SHARE ROW EXCLUSIVE"

// Blockers describes, one line each, the other sessions that hold or wait
// for a lock on table (a quoted, qualified name).
func Blockers(ctx context.Context, pool *pgxpool.Pool, table string) ([]string, error) {
	rows, err := pool.Query(ctx, sqlBlockers, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// IsLockTimeout reports whether err is PostgreSQL's lock_not_available.
func IsLockTimeout(err error) bool {
	return pgerr.Is(err, pgerrcode.LockNotAvailable)
}

// Install creates (or re-creates) a source's capture functions and triggers
// in tx. The caller holds tx with a short lock_timeout.
func (n Names) Install(ctx context.Context, tx pgx.Tx, s catalog.Source) error {
	// The functions run with their owner's rights: nobody else may call
	// them (firing a trigger checks no right on its function). Those of the
	// other kind of table (a source partitioned since, or no longer) are
	// dropped once no trigger calls them.
	stmts := n.FunctionsSQL(s)
	made := map[string]bool{}
	for _, fn := range n.madeBy(s) {
		made[fn] = true
		stmts = append(stmts, fmt.Sprintf("REVOKE ALL ON FUNCTION %s.%s() FROM PUBLIC", ident.Quote(n.Catalog), ident.Quote(fn)))
	}
	stmts = append(stmts, n.DropSQL(s)[:len(Ops)]...)
	stmts = append(stmts, n.TriggersSQL(s)...)
	for _, fn := range n.functions(s.ID) {
		if !made[fn] {
			stmts = append(stmts, fmt.Sprintf("DROP FUNCTION IF EXISTS %s.%s()", ident.Quote(n.Catalog), ident.Quote(fn)))
		}
	}
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("installing capture on %s.%s: %w", s.Schema, s.Table, err)
		}
	}
	return nil
}

// madeBy are the unqualified names of the functions FunctionsSQL creates
// for s, in its order.
func (n Names) madeBy(s catalog.Source) []string {
	if s.Partitioned {
		return []string{n.Function(s.ID)}
	}
	return n.functions(s.ID)
}

// Uninstall drops a source's capture triggers and function in tx. A table
// that no longer exists is not an error.
func (n Names) Uninstall(ctx context.Context, tx pgx.Tx, s catalog.Source) error {
	var exists bool
	if err := tx.QueryRow(ctx, sqlTableExists, ident.Qualified(s.Schema, s.Table)).Scan(&exists); err != nil {
		return err
	}
	stmts := n.DropSQL(s)
	if !exists {
		stmts = stmts[len(Ops):]
	}
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("removing capture from %s.%s: %w", s.Schema, s.Table, err)
		}
	}
	return nil
}
