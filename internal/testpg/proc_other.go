//go:build !linux

package testpg

import (
	"os"
	"syscall"
)

// setParentDeathSignal is a no-op where the kernel has no parent-death
// signal; Stop (or Main) must stop the server.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// baseDir returns the directory that holds the clusters' temporary
// directories.
func baseDir() string { return os.TempDir() }
