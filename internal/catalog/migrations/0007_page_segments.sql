-- The ring segments a page's rows are in, counted when its cut is taken.
-- A page reads only those segments, so it locks no other one, and a
-- drained segment can be truncated while pages are applied. NULL (a page
-- cut by an older release) reads every segment.
ALTER TABLE %[1]s.pages ADD COLUMN segs int[];
