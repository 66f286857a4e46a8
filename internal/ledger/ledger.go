// Package ledger owns the ledger: the ring of segments that capture appends
// changed keys to, the snapshot cuts that split the committed ledger into
// pages, the pages drain workers claim, the reclaim of drained segments,
// and the watermarks and convergence waits read from cuts and pages.
package ledger

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-pg/trellis/internal/catalog"
)

// Buckets is the number of key buckets: the ledger's rows are split into
// pages by bucket, and recomputes serialise on (transform, bucket) locks.
const Buckets = 64

// PageTarget is about how many ledger rows a page holds: a cut larger than
// this is split into several pages that workers take in parallel, each the
// rows of a range of transactions, or of one transaction of more rows
// (cut into parts if it has more than PageMax, decision 0042). An UPDATE
// appends two rows (decision 0023), so a page of a backlog of updates holds
// about 5,000 keys: a page's fixed cost and its recompute's per-key cost
// both shrink with its size (decision 0031).
const PageTarget = 10_000

// PageMax bounds the ledger rows of any page this release cuts: a range of
// transactions of at most PageTarget rows each ends once its rows reach a
// multiple of PageTarget (less than 2 × PageTarget), a transaction of more
// is a page of its own, and one of more than PageMax is cut into parts of
// at most PageMax. A drain worker holds one page's changes in memory at a
// time.
const PageMax = 2 * PageTarget

// MinCutInterval is the least time between two cuts made by idle workers:
// under a steady write load it gathers changes into pages worth a
// transaction, instead of one page per commit. A busy ledger is cut less
// often (pace.go).
const MinCutInterval = 5 * time.Millisecond

// Ledger is the ledger of one instance, read and written through Pool.
// The workers of a client share one: it paces their cuts.
type Ledger struct {
	Pool *pgxpool.Pool
	Cat  *catalog.Catalog

	pace pacer
}
