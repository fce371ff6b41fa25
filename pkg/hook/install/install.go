// Package install copies the meshdrain executable into a directory shared with the app
// container. It exists because the image meshdrain ships in is `scratch`: it has no `cp`, so
// the init container that puts meshdrain into the pod's shared emptyDir must be meshdrain
// itself. The copy is atomic (temporary file in the destination directory, then rename),
// because a half-written binary that the preStop hook later execs would fail at the worst
// moment: while the pod is being stopped.
package install

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultName is the file name used when the destination is a directory, so the preStop
// hook's path is always <mount>/meshdrain.
const DefaultName = "meshdrain"

// DefaultMode is the installed file's mode: executable by the app container's user, whatever
// uid it runs as (the emptyDir is shared between containers that may run as different users).
const DefaultMode fs.FileMode = 0o755

// Options says what to copy where.
type Options struct {
	// Source is the file to copy. Empty means the running executable (os.Executable), which
	// is the point of the command: the image's own binary.
	Source string
	// Dest is a file path, or an existing directory (then the file is Dest/meshdrain). A
	// path that ends in a separator must be an existing directory.
	Dest string
	// Mode of the installed file; zero means DefaultMode.
	Mode fs.FileMode

	// wrapSource lets tests inject a failure in the middle of the copy.
	wrapSource func(io.Reader) io.Reader
}

// Result describes what was installed, so the init container's log shows which binary the
// pod will run.
type Result struct {
	Source string
	Path   string
	Bytes  int64
	SHA256 string
}

// Install copies opts.Source to opts.Dest atomically: either Dest is the complete new file
// with the requested mode, or it is left as it was and no temporary file remains.
func Install(opts Options) (Result, error) {
	src := opts.Source
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			return Result{}, fmt.Errorf("find the running executable: %w", err)
		}
		src = exe
	}
	if opts.Dest == "" {
		return Result{}, errors.New("no destination given")
	}
	mode := opts.Mode
	if mode == 0 {
		mode = DefaultMode
	}
	dest, err := resolveDest(opts.Dest)
	if err != nil {
		return Result{}, err
	}

	in, err := os.Open(src)
	if err != nil {
		return Result{}, fmt.Errorf("open source: %w", err)
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return Result{}, fmt.Errorf("stat source: %w", err)
	}
	if !info.Mode().IsRegular() {
		return Result{}, fmt.Errorf("source %s is not a regular file", src)
	}

	var reader io.Reader = in
	if opts.wrapSource != nil {
		reader = opts.wrapSource(reader)
	}
	n, sum, err := writeAtomically(dest, reader, mode, info.Size())
	if err != nil {
		return Result{}, err
	}
	return Result{Source: src, Path: dest, Bytes: n, SHA256: sum}, nil
}

// resolveDest turns a directory destination into the file path inside it.
func resolveDest(dest string) (string, error) {
	info, err := os.Stat(dest)
	switch {
	case err == nil && info.IsDir():
		return filepath.Join(dest, DefaultName), nil
	case err == nil && !info.Mode().IsRegular():
		return "", fmt.Errorf("destination %s exists and is not a regular file or a directory", dest)
	case err == nil:
		return dest, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("destination: %w", err)
	}
	if strings.HasSuffix(dest, "/") || strings.HasSuffix(dest, string(filepath.Separator)) {
		return "", fmt.Errorf("destination directory %s does not exist (is the emptyDir mounted there?)", dest)
	}
	parent := filepath.Dir(dest)
	if pinfo, err := os.Stat(parent); err != nil {
		return "", fmt.Errorf("destination directory: %w", err)
	} else if !pinfo.IsDir() {
		return "", fmt.Errorf("destination directory %s is not a directory", parent)
	}
	return dest, nil
}

// writeAtomically writes r to a temporary file next to dest (same file system, so the rename
// is atomic), checks that it got wantSize bytes, syncs it, sets its mode and renames it over
// dest. On any error the temporary file is removed and dest is untouched.
func writeAtomically(dest string, r io.Reader, mode fs.FileMode, wantSize int64) (n int64, sum string, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-*")
	if err != nil {
		return 0, "", fmt.Errorf("create temporary file: %w", err)
	}
	tmpName := tmp.Name()
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()

	hash := sha256.New()
	n, err = io.Copy(io.MultiWriter(tmp, hash), r)
	if err != nil {
		return 0, "", fmt.Errorf("copy to %s: %w", tmpName, err)
	}
	if n != wantSize {
		// A short read without an error means the source changed (or was truncated) while it
		// was read: installing it would give the pod a binary nobody built.
		err = fmt.Errorf("copied %d bytes but the source has %d: it changed during the copy", n, wantSize)
		return 0, "", err
	}
	// Chmod explicitly: CreateTemp makes the file 0600 and the umask must not decide
	// whether the app container's user can exec it.
	if err = tmp.Chmod(mode); err != nil {
		return 0, "", fmt.Errorf("chmod %s: %w", tmpName, err)
	}
	if err = tmp.Sync(); err != nil {
		return 0, "", fmt.Errorf("sync %s: %w", tmpName, err)
	}
	if err = tmp.Close(); err != nil {
		return 0, "", fmt.Errorf("close %s: %w", tmpName, err)
	}
	if err = os.Rename(tmpName, dest); err != nil {
		return 0, "", fmt.Errorf("rename %s to %s: %w", tmpName, dest, err)
	}
	return n, hex.EncodeToString(hash.Sum(nil)), nil
}
