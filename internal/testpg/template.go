package testpg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// initdb takes about a second, most of a cluster's start time. So the first
// Start on a machine runs initdb once into a template directory in the
// system temp dir, keyed by the initdb binary and the server user, and every
// Start copies that pristine data directory instead (tens of
// milliseconds). The template is published with an atomic rename, so
// concurrent test processes never see a partial one; it is never modified
// after that. The settings are appended to the copy's postgresql.conf.

// templatePrefix prefixes template directories (and their build dirs).
const templatePrefix = "trellis-pgtemplate-"

// templateFormat changes when the initdb arguments change.
const templateFormat = "1"

// dataTemplate returns the path of a pristine data directory made by initdb
// for bins running as as, creating it if needed. Errors of initdb itself
// wrap errInitdb.
func dataTemplate(ctx context.Context, bins binaries, as runAs, tried []string) (string, error) {
	key, err := templateKey(bins, as)
	if err != nil {
		return "", err
	}
	final := filepath.Join(baseDir(), templatePrefix+key)
	data := filepath.Join(final, "data")
	if templateUsable(final, as) {
		return data, nil
	}

	build, err := os.MkdirTemp(baseDir(), templatePrefix+"build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(build) // no-op once renamed
	if as.cred != nil {
		if err := os.Chown(build, as.uid, as.gid); err != nil {
			return "", err
		}
	}
	if err := runInitdb(ctx, bins, as, tried, build, filepath.Join(build, "data")); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(build, "complete"), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(build, final); err != nil {
		// Another process published one first (the target is a non-empty
		// directory); use it.
		if templateUsable(final, as) {
			return data, nil
		}
		return "", err
	}
	return data, nil
}

// templateUsable reports whether dir holds a complete template that belongs
// to the server user and is not accessible to anyone else.
func templateUsable(dir string, as runAs) bool {
	if _, err := os.Stat(filepath.Join(dir, "complete")); err != nil {
		return false
	}
	fi, err := os.Stat(filepath.Join(dir, "data"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return false
	}
	return ownedBy(fi, as.uid)
}

// templateKey identifies the initdb binary (path, size, modification time)
// and the server user.
func templateKey(bins binaries, as runAs) (string, error) {
	path, err := filepath.EvalSymlinks(bins.initdb)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%d", templateFormat, path, fi.Size(), fi.ModTime().UnixNano(), as.uid)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// copyTree copies the directory src to dst (which must not exist),
// preserving permissions, and when running as root gives the copies to the
// server user.
func copyTree(src, dst string, as runAs) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected file type %s: %s", d.Type(), path)
		}
		if as.cred != nil {
			return os.Lchown(target, as.uid, as.gid)
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// sweepStaleTemplateBuilds removes template build directories of processes
// that died while running initdb.
func sweepStaleTemplateBuilds() {
	matches, _ := filepath.Glob(filepath.Join(baseDir(), templatePrefix+"build-*"))
	for _, dir := range matches {
		if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) > 10*time.Minute {
			_ = os.RemoveAll(dir)
		}
	}
}
