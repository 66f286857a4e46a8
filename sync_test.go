package trellis_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trellis-pg/trellis"
)

// actions is a plan as "action target" lines, for comparisons.
func actions(p trellis.SyncPlan) []string {
	out := []string{}
	for _, c := range p.Changes {
		out = append(out, string(c.Action)+" "+c.Target)
	}
	return out
}

func syncSetup(t *testing.T) (*env, *trellis.Client) {
	t.Helper()
	e := setup(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY, price int, tax int, status text);
		INSERT INTO orders SELECT g, g, g % 3, CASE WHEN g % 4 = 0 THEN 'cancelled' ELSE 'open' END FROM generate_series(1, 40) g`)
	return e, e.engine()
}

const syncFile = `-- transforms of the shop
TRANSFORM order_totals FROM orders SELECT price + tax AS total, status AS status

TRANSFORM open_orders FROM orders SELECT price AS price WHERE status <> 'cancelled'
;
TRANSFORM total_by_status FROM order_totals SELECT status AS status, sum(total) AS sum GROUP BY status
`

func TestSyncCreatesThenNothing(t *testing.T) {
	t.Parallel()
	e, c := syncSetup(t)

	// A dry run lists the plan and changes nothing.
	p, err := c.Sync(e.ctx, syncFile, trellis.SyncOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []string{"create public.order_totals", "create public.open_orders", "create public.total_by_status"}, actions(p))
	require.Contains(t, p.Changes[0].Statement, "TRANSFORM order_totals FROM orders")
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Empty(t, defs)

	p, err = c.Sync(e.ctx, syncFile, trellis.SyncOptions{})
	require.NoError(t, err)
	require.Len(t, p.Changes, 3)
	for _, tg := range []string{"order_totals", "open_orders", "total_by_status"} {
		e.waitState(c, tg, trellis.StateLive)
	}
	e.converge(c)
	e.assertMatches("total_by_status", "SELECT status, sum(price + tax) FROM orders GROUP BY status")

	// The same file again, and the same up to formatting: nothing to do.
	p, err = c.Sync(e.ctx, syncFile, trellis.SyncOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Changes)
	reformatted := `transform public.order_totals from orders
    select status as status, (price+tax) as total;

TRANSFORM open_orders FROM public.orders AS orders
SELECT price AS "price"
WHERE (status != 'cancelled')

TRANSFORM total_by_status FROM order_totals SELECT status AS status, SUM(total) AS sum GROUP BY status`
	p, err = c.Sync(e.ctx, reformatted, trellis.SyncOptions{Prune: true})
	require.NoError(t, err)
	require.Empty(t, p.Changes, "%+v", p.Changes)

	// A reader of a GROUP BY target is checked (its key made NOT NULL in
	// the planning transaction only), then created. The target groups by a
	// NOT NULL column: total_by_status groups by a nullable one, which a
	// reader is refused.
	grouped := syncFile + "\nTRANSFORM counts_by_id FROM orders SELECT id AS id, count(*) AS n GROUP BY id\n"
	_, err = c.Sync(e.ctx, grouped, trellis.SyncOptions{})
	require.NoError(t, err)
	e.waitState(c, "counts_by_id", trellis.StateLive)
	p, err = c.Sync(e.ctx, grouped+"\nTRANSFORM id_counts FROM counts_by_id SELECT n AS n", trellis.SyncOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []string{"create public.id_counts"}, actions(p))
	p, err = c.Sync(e.ctx, grouped+"\nTRANSFORM id_counts FROM counts_by_id SELECT n AS n", trellis.SyncOptions{})
	require.NoError(t, err)
	require.Len(t, p.Changes, 1)
	e.waitState(c, "id_counts", trellis.StateLive)
	// A dry run checks a definition against the target it reads: status
	// is total_by_status's key, so no output may take its name.
	_, err = c.Sync(e.ctx, syncFile+"\nTRANSFORM status_sums FROM total_by_status SELECT sum AS status", trellis.SyncOptions{DryRun: true})
	require.Equal(t, trellis.CodeValidation, trellis.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), "column status is the target's key")
}

func TestSyncAltersRebuildsAndPrunes(t *testing.T) {
	t.Parallel()
	e, c := syncSetup(t)
	_, err := c.Sync(e.ctx, syncFile, trellis.SyncOptions{})
	require.NoError(t, err)
	e.waitState(c, "total_by_status", trellis.StateLive)

	// Only an added and a dropped column: altered, the rest kept.
	altered := `TRANSFORM order_totals FROM orders SELECT price + tax AS total, status AS status, price * 2 AS doubled

TRANSFORM open_orders FROM orders SELECT price AS price, tax AS tax WHERE status <> 'cancelled'

TRANSFORM total_by_status FROM order_totals SELECT status AS status, sum(total) AS sum GROUP BY status`
	p, err := c.Sync(e.ctx, altered, trellis.SyncOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []string{"alter public.order_totals", "alter public.open_orders"}, actions(p))
	require.Equal(t, []string{"doubled"}, p.Changes[0].AddColumns)
	p, err = c.Sync(e.ctx, altered, trellis.SyncOptions{})
	require.NoError(t, err)
	require.Len(t, p.Changes, 2)
	e.waitState(c, "order_totals", trellis.StateLive)
	e.waitState(c, "open_orders", trellis.StateLive)
	e.converge(c)
	e.assertMatches("(SELECT id, total, status, doubled FROM order_totals) x", "SELECT id, price + tax, status, price * 2 FROM orders")
	e.assertMatches("(SELECT id, price, tax FROM open_orders) x", "SELECT id, price, tax FROM orders WHERE status <> 'cancelled'")
	p, err = c.Sync(e.ctx, altered, trellis.SyncOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Changes, "after an alter, the same file is no change: %+v", p.Changes)

	// A dropped column alone.
	dropped := `TRANSFORM order_totals FROM orders SELECT price + tax AS total, status AS status

TRANSFORM open_orders FROM orders SELECT price AS price, tax AS tax WHERE status <> 'cancelled'

TRANSFORM total_by_status FROM order_totals SELECT status AS status, sum(total) AS sum GROUP BY status`
	p, err = c.Sync(e.ctx, dropped, trellis.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"alter public.order_totals"}, actions(p))
	require.Equal(t, []string{"doubled"}, p.Changes[0].DropColumns)
	var n int
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'order_totals' AND column_name = 'doubled'`).Scan(&n))
	require.Zero(t, n)

	// Another WHERE: rebuilt. Another expression for a column that a
	// reader reads: rebuilt, and its reader with it.
	rebuilt := `TRANSFORM order_totals FROM orders SELECT price + 2 * tax AS total, status AS status

TRANSFORM open_orders FROM orders SELECT price AS price, tax AS tax WHERE status = 'open'

TRANSFORM total_by_status FROM order_totals SELECT status AS status, sum(total) AS sum GROUP BY status`
	p, err = c.Sync(e.ctx, rebuilt, trellis.SyncOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"rebuild public.order_totals", "rebuild public.open_orders", "rebuild public.total_by_status"}, actions(p))
	require.Equal(t, "the expression of column total differs", p.Changes[0].Reason)
	require.Equal(t, "its WHERE differs", p.Changes[1].Reason)
	require.Equal(t, "it reads public.order_totals, which is rebuilt", p.Changes[2].Reason)
	for _, tg := range []string{"order_totals", "open_orders", "total_by_status"} {
		e.waitState(c, tg, trellis.StateLive)
	}
	e.converge(c)
	e.assertMatches("total_by_status", "SELECT status, sum(price + 2 * tax) FROM orders GROUP BY status")
	e.assertMatches("(SELECT id, price, tax FROM open_orders) x", "SELECT id, price, tax FROM orders WHERE status = 'open'")
	st, err := c.Status(e.ctx, "open_orders")
	require.NoError(t, err)
	require.Contains(t, st.Statement, "status = 'open'")

	// Without prune, what the file leaves out stays.
	onlyOpen := `TRANSFORM open_orders FROM orders SELECT price AS price, tax AS tax WHERE status = 'open'`
	p, err = c.Sync(e.ctx, onlyOpen, trellis.SyncOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Changes)

	// Pruning a transform another kept one reads is refused, and changes nothing.
	keepsReader := `TRANSFORM open_orders FROM orders SELECT price AS price, tax AS tax WHERE status = 'open'

TRANSFORM total_by_status FROM order_totals SELECT status AS status, sum(total) AS sum GROUP BY status`
	_, err = c.Sync(e.ctx, keepsReader, trellis.SyncOptions{Prune: true})
	require.Equal(t, trellis.CodeConflict, trellis.CodeOf(err), "error %v", err)
	require.Contains(t, err.Error(), "public.total_by_status reads public.order_totals, which the file does not define")
	defs, err := c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, defs, 3)

	// Pruning both: the reader is dropped first.
	p, err = c.Sync(e.ctx, onlyOpen, trellis.SyncOptions{Prune: true})
	require.NoError(t, err)
	require.Equal(t, []string{"drop public.total_by_status", "drop public.order_totals"}, actions(p))
	defs, err = c.Definitions(e.ctx)
	require.NoError(t, err)
	require.Len(t, defs, 1)
	require.Equal(t, "public.open_orders", defs[0].Target)
	var exists bool
	require.NoError(t, e.db.QueryRow(e.ctx, `SELECT to_regclass('public.order_totals') IS NOT NULL`).Scan(&exists))
	require.False(t, exists)
}

func TestSyncRefusesBadFilesAndChangesNothing(t *testing.T) {
	t.Parallel()
	e, c := syncSetup(t)
	_, err := c.Sync(e.ctx, syncFile, trellis.SyncOptions{})
	require.NoError(t, err)

	check := func(file string, code trellis.Code, contains string) *trellis.Error {
		t.Helper()
		_, err := c.Sync(e.ctx, file, trellis.SyncOptions{Prune: true})
		require.Equal(t, code, trellis.CodeOf(err), "error %v", err)
		require.Contains(t, err.Error(), contains)
		defs, derr := c.Definitions(e.ctx)
		require.NoError(t, derr)
		require.Len(t, defs, 3, "a refused sync changed the definitions")
		var te *trellis.Error
		require.ErrorAs(t, err, &te)
		return te
	}
	// A statement that does not parse: its position is the file's.
	te := check("TRANSFORM a FROM orders SELECT price AS p\n\nTRANSFORM b FROM orders\nSELECT price AS p WHERE WHERE", trellis.CodeParse, "statement 2 of 2 (line 3)")
	require.Equal(t, 4, te.Line)
	check("TRANSFORM a FROM orders SELECT price AS p\n\nPAUSE TRANSFORM order_totals", trellis.CodeValidation, "is not a TRANSFORM statement")
	check("TRANSFORM a FROM orders SELECT price AS p\n\nTRANSFORM public.a FROM orders SELECT tax AS t", trellis.CodeValidation, "public.a is defined twice (lines 1 and 3)")
	check("", trellis.CodeValidation, "no TRANSFORM statement")
	// Statements the engine refuses, found before anything is applied.
	check("TRANSFORM a FROM orders SELECT price AS p\n\nTRANSFORM b FROM no_such_table SELECT x AS x", trellis.CodeNotFound, "source table no_such_table does not exist")
	check("TRANSFORM a FROM orders SELECT random() AS p", trellis.CodeValidation, "volatile")
	e.exec(`CREATE TABLE taken (id int PRIMARY KEY)`)
	check("TRANSFORM taken FROM orders SELECT price AS p", trellis.CodeConflict, "table public.taken already exists")
	// A rebuild that would drop a reader the file leaves out.
	_, err = c.Sync(e.ctx, "TRANSFORM order_totals FROM orders SELECT price AS total, status AS status", trellis.SyncOptions{})
	require.Equal(t, trellis.CodeConflict, trellis.CodeOf(err), "error %v", err)
	require.Contains(t, err.Error(), "rebuilding public.order_totals drops public.total_by_status, which reads it")
	st, err := c.Status(e.ctx, "order_totals")
	require.NoError(t, err)
	require.Contains(t, st.Statement, "price + tax")
}

func TestSyncChainInOneFileAndConcurrentSyncs(t *testing.T) {
	t.Parallel()
	e, c := syncSetup(t)
	// The reader comes first in the file: it is created after what it reads.
	file := `TRANSFORM total_by_status FROM order_totals SELECT status AS status, sum(total) AS sum GROUP BY status

TRANSFORM order_totals FROM orders SELECT price + tax AS total, status AS status`
	var wg sync.WaitGroup
	plans := make([]trellis.SyncPlan, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { plans[i], errs[i] = c.Sync(context.Background(), file, trellis.SyncOptions{}) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	// One of them created both, the other found nothing to do.
	require.ElementsMatch(t, []int{0, 2}, []int{len(plans[0].Changes), len(plans[1].Changes)})
	for _, p := range plans {
		if len(p.Changes) == 2 {
			require.Equal(t, []string{"create public.order_totals", "create public.total_by_status"}, actions(p))
		}
	}
	e.waitState(c, "total_by_status", trellis.StateLive)
	e.converge(c)
	e.assertMatches("total_by_status", "SELECT status, sum(price + tax) FROM orders GROUP BY status")
}
