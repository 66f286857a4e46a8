-- A transaction of more than a page's rows is cut into several pages
-- (decision 0042): each is a part of its rows in one segment, those whose
-- ctid is in [tlo, thi) (whole heap blocks), with xlo = xhi its xid. The
-- other pages have NULL there and hold whole transactions, as before.
ALTER TABLE %[1]s.pages ADD COLUMN IF NOT EXISTS seg int, ADD COLUMN IF NOT EXISTS tlo tid, ADD COLUMN IF NOT EXISTS thi tid;
