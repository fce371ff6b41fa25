package install

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// failAfter returns an io.Reader that yields n bytes of r, then fails: a copy cut mid-way.
type failAfter struct {
	r    io.Reader
	left int
}

var errInjected = errors.New("injected read failure")

func (f *failAfter) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, errInjected
	}
	if len(p) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= n
	return n, err
}

func writeSource(t *testing.T, dir string, content []byte) string {
	t.Helper()
	src := filepath.Join(dir, "src-binary")
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return src
}

func sourceContent() []byte {
	// Larger than io.Copy's buffer so the injected failure lands after a first write.
	return bytes.Repeat([]byte("\x7fELF meshdrain test payload "), 10000)
}

// entries lists dir's names, to prove no temporary file is left behind.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func TestInstallRunningExecutableIsIdentical(t *testing.T) {
	// The real use: Source empty → the running executable (here the test binary).
	dir := t.TempDir()
	res, err := Install(Options{Dest: dir})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, DefaultName); res.Path != want {
		t.Fatalf("path = %s, want %s", res.Path, want)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("installed file differs from the running executable (%d vs %d bytes)", len(got), len(want))
	}
	sum := sha256.Sum256(want)
	if res.SHA256 != hex.EncodeToString(sum[:]) || res.Bytes != int64(len(want)) {
		t.Fatalf("result = %+v, want %d bytes sha256 %x", res, len(want), sum)
	}
	info, err := os.Stat(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o755 {
		t.Fatalf("mode = %v, want 0755", info.Mode().Perm())
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Fatalf("directory holds %v, want only %s", names, DefaultName)
	}
}

func TestInstallToFilePathReplacesExisting(t *testing.T) {
	dir := t.TempDir()
	content := sourceContent()
	src := writeSource(t, dir, content)
	dest := filepath.Join(dir, "bin", "md")
	if err := os.Mkdir(filepath.Dir(dest), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dest, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Install(Options{Source: src, Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dest)
	if res.Path != dest || !bytes.Equal(got, content) {
		t.Fatalf("dest not replaced: path %s, %d bytes", res.Path, len(got))
	}
	if info, _ := os.Stat(dest); info.Mode().Perm() != 0o755 {
		t.Fatalf("mode = %v, want 0755 (the old file's 0600 must not survive)", info.Mode().Perm())
	}
}

func TestInstallFailureMidCopyLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	src := writeSource(t, dir, sourceContent())
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Install(Options{Source: src, Dest: out, wrapSource: func(r io.Reader) io.Reader {
		return &failAfter{r: r, left: 40000}
	}})
	if !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the injected failure", err)
	}
	if names := entries(t, out); len(names) != 0 {
		t.Fatalf("failed install left %v behind", names)
	}
}

func TestInstallFailureMidCopyKeepsExistingDest(t *testing.T) {
	dir := t.TempDir()
	src := writeSource(t, dir, sourceContent())
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(out, DefaultName)
	previous := []byte("previous meshdrain")
	if err := os.WriteFile(dest, previous, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Install(Options{Source: src, Dest: out, wrapSource: func(r io.Reader) io.Reader {
		return &failAfter{r: r, left: 40000}
	}})
	if !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want the injected failure", err)
	}
	got, _ := os.ReadFile(dest)
	if !bytes.Equal(got, previous) {
		t.Fatalf("existing destination changed by a failed install")
	}
	if names := entries(t, out); len(names) != 1 || names[0] != DefaultName {
		t.Fatalf("directory holds %v, want only %s", names, DefaultName)
	}
}

func TestInstallShortSourceIsRejected(t *testing.T) {
	// A source that ends early without an error (changed while read) must not be installed.
	dir := t.TempDir()
	src := writeSource(t, dir, sourceContent())
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Install(Options{Source: src, Dest: out, wrapSource: func(r io.Reader) io.Reader {
		return io.LimitReader(r, 100)
	}})
	if err == nil || !strings.Contains(err.Error(), "changed during the copy") {
		t.Fatalf("err = %v, want a size mismatch", err)
	}
	if names := entries(t, out); len(names) != 0 {
		t.Fatalf("short copy left %v behind", names)
	}
}

func TestInstallDestinationErrors(t *testing.T) {
	dir := t.TempDir()
	src := writeSource(t, dir, []byte("x"))
	for _, tc := range []struct {
		name, dest, want string
	}{
		{"empty", "", "no destination"},
		{"missing directory with slash", filepath.Join(dir, "nope") + "/", "does not exist"},
		{"missing parent", filepath.Join(dir, "nope", "meshdrain"), "destination directory"},
		{"parent is a file", filepath.Join(src, "meshdrain"), "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Install(Options{Source: src, Dest: tc.dest})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if _, err := Install(Options{Source: dir, Dest: filepath.Join(dir, "x")}); err == nil {
		t.Fatal("a directory as source must be refused")
	}
}
