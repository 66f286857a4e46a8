package testpg

import (
	"io/fs"
	"syscall"
)

// ownedBy reports whether the file described by fi belongs to uid.
func ownedBy(fi fs.FileInfo, uid int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}
