//go:build linux

// Package image tests how the meshdrain image is built: the Dockerfiles name base images that
// podman can resolve and cross-compile from the builder's platform, and `make image` builds a
// FROM scratch image per platform, offline, whose binary installs itself as the non-root user
// the image declares. The build itself needs podman; without it only the Dockerfiles are read.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nonrootUID is the uid (and gid) the image runs as: distroless's "nonroot", which an emptyDir
// lets write and Pod Security "restricted" accepts.
const nonrootUID = 65532

// binaryPath is where the image carries meshdrain: outside /meshdrain, where the emptyDir is
// mounted.
const binaryPath = "usr/local/bin/meshdrain"

// imagePlatforms are the platforms `make image` builds; arm64 nodes are common.
var imagePlatforms = []string{"linux/amd64", "linux/arm64"}

// elfMachines maps a GOARCH to the ELF machine its binaries declare.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "Makefile", "Dockerfile"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatalf("%s is not the repository root: %v", root, err)
		}
	}
	return root
}

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	line int    // where it starts, for messages
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// stage is a FROM and the instructions after it.
type stage struct {
	from  instruction
	flags map[string]string // --platform=...
	image string            // as written, before ARG expansion
	name  string            // AS name, or ""
	body  []instruction
}

// dockerfile is a parsed Dockerfile: the ARGs before the first FROM (they may be used in FROM)
// and the stages.
type dockerfile struct {
	path       string
	globalArgs map[string]string
	stages     []stage
}

// parseDockerfile reads the instructions of a Dockerfile: comments and blank lines dropped,
// lines ending in a backslash joined. Enough for the files of this repository, which use no
// heredocs and no escape directive.
func parseDockerfile(t *testing.T, file string) dockerfile {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var insts []instruction
	var cur *instruction
	for i, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if cur == nil {
			cmd, args, _ := strings.Cut(trimmed, " ")
			insts = append(insts, instruction{line: i + 1, cmd: strings.ToUpper(cmd)})
			cur = &insts[len(insts)-1]
			trimmed = args
		}
		continued := strings.HasSuffix(trimmed, `\`)
		cur.args = strings.TrimSpace(cur.args + " " + strings.TrimSuffix(trimmed, `\`))
		if !continued {
			cur = nil
		}
	}
	df := dockerfile{path: file, globalArgs: map[string]string{}}
	for _, in := range insts {
		if in.cmd == "FROM" {
			df.stages = append(df.stages, parseFrom(t, in))
			continue
		}
		if len(df.stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("%s:%d: %s before the first FROM", file, in.line, in.cmd)
			}
			name, value, _ := strings.Cut(in.args, "=")
			df.globalArgs[name] = value
			continue
		}
		last := &df.stages[len(df.stages)-1]
		last.body = append(last.body, in)
	}
	if len(df.stages) == 0 {
		t.Fatalf("%s: no FROM", file)
	}
	return df
}

func parseFrom(t *testing.T, in instruction) stage {
	t.Helper()
	s := stage{from: in, flags: map[string]string{}}
	fields := strings.Fields(in.args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		name, value, _ := strings.Cut(strings.TrimPrefix(fields[0], "--"), "=")
		s.flags[name] = value
		fields = fields[1:]
	}
	switch {
	case len(fields) == 1:
		s.image = fields[0]
	case len(fields) == 3 && strings.EqualFold(fields[1], "AS"):
		s.image, s.name = fields[0], fields[2]
	default:
		t.Fatalf("line %d: cannot read FROM %s", in.line, in.args)
	}
	return s
}

// declares reports whether the stage declares ARG name before its instruction at index before.
func (s stage) declares(name string, before int) bool {
	for _, in := range s.body[:before] {
		if in.cmd == "ARG" && slices.ContainsFunc(strings.Fields(in.args), func(a string) bool {
			return a == name || strings.HasPrefix(a, name+"=")
		}) {
			return true
		}
	}
	return false
}

// fullyQualified reports whether ref names its registry, as containers/image decides it: the
// part before the first slash is a domain (has a dot or a port) or localhost. A short name such
// as golang:1.26 goes through registries.conf's aliases and unqualified-search-registries, and
// podman refuses it when they do not give one answer ("short-name did not resolve").
func fullyQualified(ref string) bool {
	domain, rest, ok := strings.Cut(ref, "/")
	return ok && rest != "" && (strings.ContainsAny(domain, ".:") || domain == "localhost")
}

// tagged reports whether ref pins a tag or a digest, rather than whatever latest is.
func tagged(ref string) bool {
	return strings.Contains(ref, "@") || strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":")
}

func dockerfiles(t *testing.T) []dockerfile {
	root := repoRoot(t)
	return []dockerfile{
		parseDockerfile(t, filepath.Join(root, "Dockerfile")),
		parseDockerfile(t, filepath.Join(root, "scripts", "image", "Dockerfile.release")),
	}
}

func TestBaseImagesAreFullyQualified(t *testing.T) {
	for _, df := range dockerfiles(t) {
		var stageNames []string
		for _, s := range df.stages {
			ref := os.Expand(s.image, func(name string) string { return df.globalArgs[name] })
			switch {
			case ref == "scratch" || slices.Contains(stageNames, ref):
			case !fullyQualified(ref):
				t.Errorf("%s:%d: FROM %s (%s) is a short name, which podman refuses unless an alias "+
					"or a single search registry resolves it; name the registry (docker.io/library/...)",
					df.path, s.from.line, s.image, ref)
			case !tagged(ref):
				t.Errorf("%s:%d: FROM %s names no tag or digest", df.path, s.from.line, ref)
			}
			if s.name != "" {
				stageNames = append(stageNames, s.name)
			}
		}
	}
}

// The source build compiles on the builder's platform and cross-compiles for the target's:
// without --platform=$BUILDPLATFORM a multi-platform build runs the Go toolchain under QEMU,
// and without GOOS/GOARCH from the target it puts the builder's binary into every image.
func TestDockerfileCrossCompilesFromTheBuildPlatform(t *testing.T) {
	root := repoRoot(t)
	df := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	found := false
	for _, s := range df.stages {
		for i, in := range s.body {
			if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
				continue
			}
			found = true
			if p := s.flags["platform"]; p != "$BUILDPLATFORM" && p != "${BUILDPLATFORM}" {
				t.Errorf("%s:%d: the go build stage runs on --platform=%q, want $BUILDPLATFORM", df.path, s.from.line, p)
			}
			for _, env := range []struct{ goVar, arg string }{{"GOOS", "TARGETOS"}, {"GOARCH", "TARGETARCH"}} {
				if !s.declares(env.arg, i) {
					t.Errorf("%s:%d: ARG %s is not declared before go build", df.path, in.line, env.arg)
				}
				if !strings.Contains(in.args, env.goVar+"=${"+env.arg+"}") && !strings.Contains(in.args, env.goVar+"=$"+env.arg+" ") {
					t.Errorf("%s:%d: go build does not set %s=${%s}", df.path, in.line, env.goVar, env.arg)
				}
			}
			assertSameVersionFlag(t, root, in)
		}
	}
	if !found {
		t.Fatalf("%s: no RUN ... go build", df.path)
	}
}

// assertSameVersionFlag checks that the Dockerfile sets the version variable that the
// Makefile's LDFLAGS set, so that a package move cannot leave one of them stamping nothing.
func assertSameVersionFlag(t *testing.T, root string, goBuild instruction) {
	t.Helper()
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	versionVar := regexp.MustCompile(`-X ([^= ]+)=`)
	ldflags := regexp.MustCompile(`(?m)^LDFLAGS :?= (.*)$`).FindSubmatch(makefile)
	if ldflags == nil {
		t.Fatal("Makefile: no LDFLAGS")
	}
	want := versionVar.FindSubmatch(ldflags[1])
	got := versionVar.FindStringSubmatch(goBuild.args)
	switch {
	case want == nil:
		t.Errorf("Makefile: LDFLAGS set no -X variable: %s", ldflags[1])
	case got == nil:
		t.Errorf("Dockerfile:%d: go build sets no -X variable, the Makefile sets %s", goBuild.line, want[1])
	case got[1] != string(want[1]):
		t.Errorf("Dockerfile:%d stamps the version into %s, the Makefile into %s", goBuild.line, got[1], want[1])
	}
}

// The image `make image` builds offline and the Dockerfile's image from source are one image:
// the same labels, user, entrypoint and command, only the binary's origin differs.
func TestReleaseDockerfileIsTheDockerfilesLastStage(t *testing.T) {
	dfs := dockerfiles(t)
	var finals [][]string
	for _, df := range dfs {
		last := df.stages[len(df.stages)-1]
		if last.image != "scratch" {
			t.Errorf("%s:%d: the image is FROM %s, want scratch", df.path, last.from.line, last.image)
		}
		var kept []string
		copies := 0
		for _, in := range last.body {
			switch {
			case in.cmd == "COPY":
				copies++
				if !strings.HasSuffix(in.args, " /"+binaryPath) {
					t.Errorf("%s:%d: COPY %s, want only the binary into /%s", df.path, in.line, in.args, binaryPath)
				}
			case in.cmd == "ARG" && (in.args == "TARGETOS" || in.args == "TARGETARCH"):
			default:
				kept = append(kept, in.cmd+" "+in.args)
			}
		}
		if copies != 1 {
			t.Errorf("%s: the image stage has %d COPY, want 1 (the binary)", df.path, copies)
		}
		finals = append(finals, kept)
	}
	if !slices.Equal(finals[0], finals[1]) {
		t.Errorf("the last stage of %s and %s differ beyond the binary's COPY:\n%s\n---\n%s",
			dfs[0].path, dfs[1].path, strings.Join(finals[0], "\n"), strings.Join(finals[1], "\n"))
	}
}

// makeCommand runs make in the repository root. MAKEFLAGS from a calling make (make test) are
// dropped: they would carry its command-line variables into this one.
func makeCommand(ctx context.Context, t *testing.T, pathEnv string, args ...string) *exec.Cmd {
	t.Helper()
	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed: make image is not tested")
	}
	cmd := exec.CommandContext(ctx, makeBin, append([]string{"--no-print-directory", "-C", repoRoot(t)}, args...)...)
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEFILES":
		case "PATH":
			if pathEnv == "" {
				cmd.Env = append(cmd.Env, kv)
			}
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if pathEnv != "" {
		cmd.Env = append(cmd.Env, "PATH="+pathEnv)
	}
	return cmd
}

func TestMakeImageNamesTheMissingEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Neither engine on PATH: make's shell (SHELL is /bin/bash) still runs.
	releaseDir := t.TempDir()
	cmd := makeCommand(ctx, t, t.TempDir(), "image", "IMAGE=localhost/meshdrain-imagetest:none",
		"RELEASE_DIR="+releaseDir, "VERSION=v0.0.0-imagetest", "REVISION=none")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make image without podman or docker succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "make image needs podman or docker, and neither is installed") {
		t.Errorf("make image without podman or docker says:\n%s", out)
	}
	if entries, _ := os.ReadDir(releaseDir); len(entries) != 0 {
		t.Errorf("make image without an engine built %d binaries before failing", len(entries))
	}

	// A docker client whose daemon does not answer is no engine either: say which.
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Log("docker is not installed: the unreachable-daemon message is not tested")
		return
	}
	pathDir := t.TempDir()
	if err := os.Symlink(docker, filepath.Join(pathDir, "docker")); err != nil {
		t.Fatal(err)
	}
	cmd = makeCommand(ctx, t, pathDir, "image", "IMAGE=localhost/meshdrain-imagetest:none",
		"RELEASE_DIR="+releaseDir, "VERSION=v0.0.0-imagetest", "REVISION=none")
	cmd.Env = append(cmd.Env, "DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-daemon.sock"))
	out, err = cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make image with an unreachable docker daemon succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "docker's daemon does not answer") {
		t.Errorf("make image with an unreachable docker daemon says:\n%s", out)
	}
}

// TestMakeImage builds the release image with podman as a user would (make image-push, into
// an OCI archive instead of a registry), then reads the list it pushed and the image tagged for
// this machine, as archives: what a node pulls is the file it runs.
func TestMakeImage(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed (Debian: apt-get install podman): make image is not tested")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const version = "v0.0.0-imagetest"
	const revision = "0123456789abcdef0123456789abcdef01234567"
	image := fmt.Sprintf("localhost/meshdrain-imagetest:%d", os.Getpid())
	releaseDir, work := t.TempDir(), t.TempDir()
	vars := []string{"IMAGE=" + image, "RELEASE_DIR=" + releaseDir, "VERSION=" + version, "REVISION=" + revision}

	t.Cleanup(func() {
		tags := []string{image}
		for _, p := range imagePlatforms {
			tags = append(tags, image+"-"+path.Base(p))
		}
		if out, err := exec.Command("podman", append([]string{"rmi", "--force"}, tags...)...).CombinedOutput(); err != nil {
			t.Logf("podman rmi: %v\n%s", err, out)
		}
	})
	// image-push runs image first, as a release would.
	start := time.Now()
	listArchive := filepath.Join(work, "list.tar")
	out := runMake(ctx, t, append([]string{"image-push", "IMAGE_DEST=oci-archive:" + listArchive}, vars...)...)
	t.Logf("make image-push: %v", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(out, "podman build") {
		t.Errorf("make image did not build with podman:\n%s", out)
	}

	// IMAGE: the tag for this machine's platform.
	hostArchive := filepath.Join(work, "host.tar")
	if out, err := exec.CommandContext(ctx, "podman", "image", "save", "--format", "oci-archive", "-o", hostArchive, image).CombinedOutput(); err != nil {
		t.Fatalf("podman image save %s: %v\n%s", image, err, out)
	}
	host := readOCIArchive(t, hostArchive)
	if len(host) != 1 {
		t.Fatalf("%s holds %d images, want 1", image, len(host))
	}
	hostBuilt := func(platform string) []byte {
		b, err := os.ReadFile(filepath.Join(releaseDir, "meshdrain-"+strings.ReplaceAll(platform, "/", "-")))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hostPlatform := "linux/" + runtime.GOARCH
	if host[0].platform() != hostPlatform {
		t.Fatalf("%s is the %s image, want this machine's %s", image, host[0].platform(), hostPlatform)
	}
	checkImage(t, host[0], version, revision, hostBuilt(hostPlatform))

	// IMAGE_DEST: one list of every platform.
	list := readOCIArchive(t, listArchive)
	var platforms []string
	for _, img := range list {
		platforms = append(platforms, img.platform())
		checkImage(t, img, version, revision, hostBuilt(img.platform()))
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, imagePlatforms) {
		t.Errorf("the pushed list has platforms %v, want %v", platforms, imagePlatforms)
	}

	t.Run("install as uid 65532", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("switching to uid 65532 needs root")
		}
		checkInstallAsNonroot(ctx, t, host[0].binary, version)
	})
}

// TestDockerfileBuildsFromSource builds the Dockerfile (the source build) for every platform.
// Its base, docker.io/library/golang, cannot be pulled offline, so GO_IMAGE names a stand-in
// made of this machine's Go toolchain and /usr, bind-mounted, with GOPROXY=off; podman runs
// its RUN steps with chroot isolation, which needs no cgroups. What is tested is the
// Dockerfile's own steps: the cross-compile from the build platform, the size and static-link
// check, the smoke test where the binary can run, and the final stage.
func TestDockerfileBuildsFromSource(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed (Debian: apt-get install podman): the source build is not tested")
	}
	if target, err := os.Readlink("/bin"); err != nil || target != "usr/bin" {
		t.Skip("/bin is not a link to /usr/bin: the Go stand-in, which borrows /usr, would have no shell")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := repoRoot(t)
	goEnv := map[string]string{}
	for _, name := range []string{"GOROOT", "GOCACHE", "GOMODCACHE"} {
		out, err := exec.CommandContext(ctx, "go", "env", name).Output()
		if err != nil || strings.TrimSpace(string(out)) == "" {
			t.Fatalf("go env %s: %v", name, err)
		}
		goEnv[name] = strings.TrimSpace(string(out))
	}
	// The build's `go mod download` must find every module in the cache: no network here.
	download := exec.CommandContext(ctx, "go", "mod", "download")
	download.Dir, download.Env = root, append(os.Environ(), "GOPROXY=off")
	if out, err := download.CombinedOutput(); err != nil {
		t.Skipf("the module cache lacks some of go.mod's modules (run go mod download): %v\n%s", err, out)
	}

	id := os.Getpid()
	standIn := fmt.Sprintf("localhost/meshdrain-imagetest-go:%d", id)
	standInDir := t.TempDir()
	rootfs := filepath.Join(standInDir, "rootfs")
	for _, d := range []string{"tmp", "root", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := os.Symlink("usr/"+d, filepath.Join(rootfs, d)); err != nil {
			t.Fatal(err)
		}
	}
	containerfile := `FROM scratch
COPY rootfs/ /
ENV PATH=/goroot/bin:/usr/bin HOME=/root GOROOT=/goroot GOPATH=/go GOMODCACHE=/go/pkg/mod GOCACHE=/gocache GOPROXY=off GOTOOLCHAIN=local
`
	if err := os.WriteFile(filepath.Join(standInDir, "Containerfile"), []byte(containerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	podman := func(args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput(); err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	var images []string
	t.Cleanup(func() {
		if out, err := exec.Command("podman", append([]string{"rmi", "--force"}, images...)...).CombinedOutput(); err != nil {
			t.Logf("podman rmi: %v\n%s", err, out)
		}
	})
	images = append(images, standIn)
	podman("build", "--pull=never", "--layers=false", "-t", standIn, standInDir)

	const version = "v0.0.0-imagetest-src"
	const revision = "fedcba9876543210fedcba9876543210fedcba98"
	mounts := []string{"-v", "/usr:/usr:ro", "-v", goEnv["GOROOT"] + ":/goroot:ro",
		"-v", goEnv["GOMODCACHE"] + ":/go/pkg/mod", "-v", goEnv["GOCACHE"] + ":/gocache"}
	if _, err := os.Stat("/etc/alternatives"); err == nil { // awk is a Debian alternative
		mounts = append(mounts, "-v", "/etc/alternatives:/etc/alternatives:ro")
	}
	for _, p := range imagePlatforms {
		image := fmt.Sprintf("localhost/meshdrain-imagetest-src:%d-%s", id, path.Base(p))
		images = append(images, image)
		start := time.Now()
		// podman 4.3 (Debian 12) does not set BUILDPLATFORM; docker's BuildKit does.
		podman(append(append([]string{"build", "--pull=never", "--layers=false", "--isolation", "chroot",
			"--platform", p, "--build-arg", "BUILDPLATFORM=linux/" + runtime.GOARCH,
			"--build-arg", "GO_IMAGE=" + standIn, "--build-arg", "VERSION=" + version, "--build-arg", "REVISION=" + revision},
			mounts...), "-t", image, root)...)
		t.Logf("source build of %s: %v", p, time.Since(start).Round(time.Millisecond))

		archive := filepath.Join(t.TempDir(), "image.tar")
		podman("image", "save", "--format", "oci-archive", "-o", archive, image)
		saved := readOCIArchive(t, archive)
		if len(saved) != 1 || saved[0].platform() != p {
			t.Fatalf("%s holds %d images, want one %s image", image, len(saved), p)
		}
		checkImage(t, saved[0], version, revision, nil)
		if p == "linux/"+runtime.GOARCH {
			exe := filepath.Join(t.TempDir(), "meshdrain")
			if err := os.WriteFile(exe, saved[0].binary, 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := exec.CommandContext(ctx, exe, "version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), version) {
				t.Errorf("the source-built meshdrain version: %v, %q; want %s", err, out, version)
			}
		}
	}
}

func runMake(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := makeCommand(ctx, t, "", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ociImage is one platform's image read from an OCI archive.
type ociImage struct {
	config struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Config       struct {
			User       string
			Entrypoint []string
			Cmd        []string
			Labels     map[string]string
		} `json:"config"`
	}
	files  []*tar.Header // every entry of every layer
	binary []byte        // the content of binaryPath
}

func (img ociImage) platform() string { return img.config.OS + "/" + img.config.Architecture }

type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
}

// readOCIArchive reads the images of an oci-archive (an OCI image layout in a tar), following
// image indexes down to the image manifests, and checks every blob against its digest.
func readOCIArchive(t *testing.T, file string) []ociImage {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("%s: %s: %v", file, h.Name, err)
			}
			entries[path.Clean(h.Name)] = b
		}
	}
	blob := func(d ociDescriptor) []byte {
		alg, hexDigest, _ := strings.Cut(d.Digest, ":")
		b, ok := entries[path.Join("blobs", alg, hexDigest)]
		if !ok {
			t.Fatalf("%s: no blob %s", file, d.Digest)
		}
		if sum := sha256.Sum256(b); alg != "sha256" || hex.EncodeToString(sum[:]) != hexDigest {
			t.Fatalf("%s: blob %s does not match its digest", file, d.Digest)
		}
		return b
	}
	var images []ociImage
	var walk func(raw []byte)
	walk = func(raw []byte) {
		var doc struct {
			MediaType string          `json:"mediaType"`
			Manifests []ociDescriptor `json:"manifests"`
			Config    ociDescriptor   `json:"config"`
			Layers    []ociDescriptor `json:"layers"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc.Manifests != nil { // index.json, an image index or a docker manifest list
			for _, m := range doc.Manifests {
				walk(blob(m))
			}
			return
		}
		var img ociImage
		if err := json.Unmarshal(blob(doc.Config), &img.config); err != nil {
			t.Fatalf("%s: config: %v", file, err)
		}
		for _, l := range doc.Layers {
			readLayer(t, file, l, blob(l), &img)
		}
		images = append(images, img)
	}
	index, ok := entries["index.json"]
	if !ok {
		t.Fatalf("%s: no index.json: not an OCI archive", file)
	}
	walk(index)
	return images
}

func readLayer(t *testing.T, file string, l ociDescriptor, b []byte, img *ociImage) {
	t.Helper()
	var r io.Reader = bytes.NewReader(b)
	switch {
	case strings.HasSuffix(l.MediaType, "+gzip") || strings.HasSuffix(l.MediaType, ".gzip"):
		gz, err := gzip.NewReader(r)
		if err != nil {
			t.Fatalf("%s: layer %s: %v", file, l.Digest, err)
		}
		r = gz
	case strings.HasSuffix(l.MediaType, ".tar"):
	default:
		t.Fatalf("%s: layer %s is %s, which this test does not read", file, l.Digest, l.MediaType)
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: layer %s: %v", file, l.Digest, err)
		}
		h.Name = strings.TrimPrefix(path.Clean(h.Name), "./")
		img.files = append(img.files, h)
		if h.Name == binaryPath {
			if img.binary, err = io.ReadAll(tr); err != nil {
				t.Fatalf("%s: %s: %v", file, binaryPath, err)
			}
		}
	}
}

// checkImage checks one platform's image: its configuration, that it holds the binary built
// for its platform (hostBuilt, when not nil) and nothing else, and that the binary is a static
// executable for it.
func checkImage(t *testing.T, img ociImage, version, revision string, hostBuilt []byte) {
	t.Helper()
	p := img.platform()
	c := img.config.Config
	if want := fmt.Sprintf("%d:%d", nonrootUID, nonrootUID); c.User != want {
		t.Errorf("%s: User %q, want %q", p, c.User, want)
	}
	if want := []string{"/" + binaryPath}; !slices.Equal(c.Entrypoint, want) {
		t.Errorf("%s: Entrypoint %q, want %q", p, c.Entrypoint, want)
	}
	if want := []string{"install", "/meshdrain"}; !slices.Equal(c.Cmd, want) {
		t.Errorf("%s: Cmd %q, want %q", p, c.Cmd, want)
	}
	for label, want := range map[string]string{
		"org.opencontainers.image.title":    "meshdrain",
		"org.opencontainers.image.source":   "https://github.com/meshdrain/meshdrain",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
	} {
		if got := c.Labels[label]; got != want {
			t.Errorf("%s: label %s = %q, want %q", p, label, got, want)
		}
	}
	if c.Labels["org.opencontainers.image.description"] == "" {
		t.Errorf("%s: no label org.opencontainers.image.description", p)
	}

	for _, h := range img.files {
		switch {
		case h.Typeflag == tar.TypeDir && strings.HasPrefix(binaryPath, h.Name+"/"):
		case h.Name == binaryPath && h.Typeflag == tar.TypeReg:
			// Owned by root and not writable by the user the image runs as.
			if h.Mode&0o777 != 0o755 || h.Uid != 0 {
				t.Errorf("%s: /%s has mode %o, uid %d; want 755, 0", p, binaryPath, h.Mode&0o777, h.Uid)
			}
		default:
			t.Errorf("%s: the image holds %s (type %c): want only /%s", p, h.Name, h.Typeflag, binaryPath)
		}
	}
	if img.binary == nil {
		t.Fatalf("%s: no /%s in the image", p, binaryPath)
	}
	if hostBuilt != nil && !bytes.Equal(img.binary, hostBuilt) {
		t.Errorf("%s: /%s is not the binary make binaries built", p, binaryPath)
	}
	exe, err := elf.NewFile(bytes.NewReader(img.binary))
	if err != nil {
		t.Fatalf("%s: /%s: %v", p, binaryPath, err)
	}
	arch := path.Base(p)
	if m, ok := elfMachines[arch]; !ok || exe.Machine != m {
		t.Errorf("%s: /%s is an ELF for %v, want %v", p, binaryPath, exe.Machine, elfMachines[arch])
	}
	for _, prog := range exe.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s: /%s names a dynamic loader: it would not run FROM scratch", p, binaryPath)
		}
	}
}

// checkInstallAsNonroot runs the image's binary the way its init container does: as uid 65532,
// `install /meshdrain` into an emptyDir (world-writable, owned by root), and compares the copy.
// Running the container itself needs cgroups that a CI sandbox may not have; the file is the
// same.
func checkInstallAsNonroot(ctx context.Context, t *testing.T, binary []byte, version string) {
	dir := t.TempDir()
	// t.TempDir is 0700 and its parent too: uid 65532 must reach the binary, as it would in /.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "meshdrain")
	if err := os.WriteFile(exe, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	emptyDir := filepath.Join(dir, "meshdrain-volume")
	if err := os.Mkdir(emptyDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(emptyDir, 0o777); err != nil { // past the umask, as the kubelet makes it
		t.Fatal(err)
	}
	asNonroot := func(args ...string) string {
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Dir = "/"
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nonrootUID, Gid: nonrootUID, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("meshdrain %s as uid %d: %v\n%s", strings.Join(args, " "), nonrootUID, err, out)
		}
		return string(out)
	}
	if out := asNonroot("version"); !strings.Contains(out, version) {
		t.Errorf("meshdrain version says %q, want %s", out, version)
	}
	out := asNonroot("install", emptyDir)
	installed := filepath.Join(emptyDir, "meshdrain")
	t.Logf("install as uid %d: %s", nonrootUID, strings.TrimSpace(out))
	got, err := os.ReadFile(installed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, binary) {
		t.Errorf("%s differs from the image's binary", installed)
	}
	fi, err := os.Stat(installed)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != nonrootUID || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s is owned by uid %d with mode %v, want uid %d, 0755", installed, st.Uid, fi.Mode().Perm(), nonrootUID)
	}
}
