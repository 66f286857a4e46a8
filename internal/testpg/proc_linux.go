package testpg

import (
	"os"
	"syscall"
)

// setParentDeathSignal makes the kernel send SIGQUIT (PostgreSQL's immediate
// shutdown) to the postmaster if this process dies without stopping it.
func setParentDeathSignal(a *syscall.SysProcAttr) {
	a.Pdeathsig = syscall.SIGQUIT
}

// tmpfsMagic is TMPFS_MAGIC from linux/magic.h.
const tmpfsMagic = 0x01021994

// minShmFree is how much free space /dev/shm needs for baseDir to choose it.
const minShmFree = 2 << 30

// baseDir returns the directory that holds the clusters' temporary
// directories: $TMPDIR if set, else /dev/shm if it is a roomy tmpfs (a data
// directory is ~40 MB, and creating its ~1000 files there is many times
// faster than on a disk), else os.TempDir().
func baseDir() string {
	if os.Getenv("TMPDIR") != "" {
		return os.TempDir()
	}
	const shm = "/dev/shm"
	var st syscall.Statfs_t
	if err := syscall.Statfs(shm, &st); err != nil || st.Type != tmpfsMagic ||
		uint64(st.Bavail)*uint64(st.Bsize) < minShmFree || syscall.Access(shm, 2 /* W_OK */) != nil {
		return os.TempDir()
	}
	return shm
}
