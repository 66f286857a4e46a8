package ledger

import (
	"encoding/binary"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// A page's rows are decoded here from the wire, not by Rows.Scan: pgx
// scans a text[] into a []*string by reflection, an allocation per
// element, and on a backlog that was most of a drain worker's own CPU
// (decision 0052). Rows in a form this does not read (text format, an
// array of more than one dimension) are scanned as before.

// errRowShape says a row is not in the binary form pageRow reads.
var errRowShape = errors.New("not a binary page row")

// pageRow decodes one row of sqlPageKeys or sqlPartKeys (src int4, key
// text[], vals text[], bucket int4, mislabeled bool) into c and key, or
// scans it when its form is another.
func pageRow(rows pgx.Rows, c *Change, key *[]*string) error {
	if err := decodePageRow(rows, c, key); err == nil {
		return nil
	}
	return rows.Scan(&c.Src, key, &c.Vals, &c.Bucket, &c.Mislabeled)
}

func decodePageRow(rows pgx.Rows, c *Change, key *[]*string) error {
	fds := rows.FieldDescriptions()
	raw := rows.RawValues()
	if len(fds) != 5 || len(raw) != 5 {
		return errRowShape
	}
	want := [5]uint32{pgtype.Int4OID, pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.Int4OID, pgtype.BoolOID}
	for i, fd := range fds {
		if fd.Format != pgtype.BinaryFormatCode || fd.DataTypeOID != want[i] {
			return errRowShape
		}
	}
	if raw[0] == nil || raw[3] == nil || raw[4] == nil || len(raw[0]) != 4 || len(raw[3]) != 4 || len(raw[4]) != 1 {
		return errRowShape
	}
	k, err := textArray(raw[1])
	if err != nil {
		return err
	}
	v, err := textArray(raw[2])
	if err != nil {
		return err
	}
	c.Src = int(int32(binary.BigEndian.Uint32(raw[0])))
	c.Bucket = int(int32(binary.BigEndian.Uint32(raw[3])))
	c.Mislabeled = raw[4][0] != 0
	*key, c.Vals = k, v
	return nil
}

// textArray decodes a text[] of one dimension (or none) in PostgreSQL's
// binary array format: nil for NULL, an empty slice for an empty array,
// a nil element for a NULL one. The elements' strings share one copy of
// b, and their pointers one backing array.
func textArray(b []byte) ([]*string, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) < 12 {
		return nil, errRowShape
	}
	ndim := int32(binary.BigEndian.Uint32(b))
	switch ndim {
	case 0:
		return []*string{}, nil
	case 1:
	default:
		return nil, errRowShape
	}
	if len(b) < 20 {
		return nil, errRowShape
	}
	n := int(int32(binary.BigEndian.Uint32(b[12:])))
	if n < 0 || n > (len(b)-20)/4 {
		return nil, errRowShape
	}
	all := string(b[20:])
	vals := make([]string, n)
	out := make([]*string, n)
	at := 0
	for i := 0; i < n; i++ {
		if len(all)-at < 4 {
			return nil, errRowShape
		}
		l := int(int32(binary.BigEndian.Uint32(b[20+at:])))
		at += 4
		if l < 0 {
			continue // NULL
		}
		if len(all)-at < l {
			return nil, errRowShape
		}
		vals[i] = all[at : at+l]
		out[i] = &vals[i]
		at += l
	}
	if at != len(all) {
		return nil, errRowShape
	}
	return out, nil
}
