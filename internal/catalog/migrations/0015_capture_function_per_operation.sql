-- A plain table's statement triggers each call a capture function of
-- their own operation (capture_<id>_ins, _upd, _del), which tests no
-- TG_OP (decision 0047): the staging worker reinstalls every installed
-- source once; until then the function an older release installed goes
-- on capturing, as it did.
UPDATE %[1]s.sources SET capture_state = 'pending' WHERE capture_state = 'installed' AND disrupted_at IS NULL;
