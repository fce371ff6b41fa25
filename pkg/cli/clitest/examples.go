// Package clitest runs the --help examples of a cobra command tree, for the tests of both
// binaries (meshdrain in pkg/cli, meshdrain-sim in pkg/sim/simcli). An example is what a
// reader copies: each one that can run on this machine runs as written and must exit 0, and
// each one that cannot (it needs a pod, a sidecar, a cluster, or serves until stopped) is
// named in the test with the reason, so that a new example is either run or explained. Only
// tests import it: no binary links it.
package clitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// Example is one command line of a command's Example text.
type Example struct {
	// Command is the path of the command whose help shows it ("meshdrain plan").
	Command string
	// Line is the example as written, continuation lines joined: what a test names it by.
	Line string
	// Program is the base name of the program the line runs: "meshdrain", "meshdrain-sim",
	// or another one ("kubectl").
	Program string
	// Args are the program's arguments, as the shell or the kubelet would pass them.
	Args []string
	// InPod is a line that runs the program in a pod (kubectl exec ... -- PROGRAM, or the
	// command of a pod spec's exec hook).
	InPod bool
}

// Examples reads the example command lines of every command of root's tree, in the order
// --help shows them.
func Examples(root *cobra.Command) ([]Example, error) {
	var out []Example
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		exs, err := parseExamples(c.CommandPath(), c.Example)
		if err != nil {
			return err
		}
		out = append(out, exs...)
		for _, sub := range c.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(root)
}

// yamlKey is a line of a pod spec snippet that only opens a mapping ("lifecycle:").
var yamlKey = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*:$`)

// parseExamples splits one Example text into its command lines. Comments and blank lines
// are the reader's; a pod spec's exec command (command: [...], over several lines) is one
// example, run as the kubelet would run it.
func parseExamples(command, text string) ([]Example, error) {
	var out []Example
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSpace(strings.TrimSuffix(line, `\`)) + " " + strings.TrimSpace(lines[i])
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#") || yamlKey.MatchString(line):
			continue
		case strings.HasPrefix(line, "command:"):
			for strings.Count(line, "[") > strings.Count(line, "]") && i+1 < len(lines) {
				i++
				line += " " + strings.TrimSpace(lines[i])
			}
			var argv []string
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(line, "command:"))), &argv); err != nil || len(argv) == 0 {
				return nil, fmt.Errorf("%s example %q: a pod spec's command must be a JSON list: %v", command, line, err)
			}
			out = append(out, Example{Command: command, Line: line, Program: path.Base(argv[0]), Args: argv[1:], InPod: true})
		default:
			ex, err := parseShellLine(line)
			if err != nil {
				return nil, fmt.Errorf("%s example %q: %w", command, line, err)
			}
			ex.Command = command
			out = append(out, ex)
		}
	}
	return out, nil
}

// parseShellLine reads a shell command line as far as an example needs: the first command
// of a pipeline or list, without its stdout redirection (the test keeps the output), the
// command inside `source <(...)`, and the command kubectl exec runs in the pod.
func parseShellLine(line string) (Example, error) {
	words, err := shellWords(line)
	if err != nil {
		return Example{}, err
	}
	if len(words) >= 2 && words[0] == "source" && words[1] == "<(" {
		words = words[2:]
	}
	var argv []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w == "|" || w == "&" || w == ";" || w == ")" || w == "&&" {
			break
		}
		if w == ">" {
			i++ // the file the shell would write
			continue
		}
		argv = append(argv, w)
	}
	if len(argv) == 0 {
		return Example{}, fmt.Errorf("no command")
	}
	ex := Example{Line: line, Program: path.Base(argv[0]), Args: argv[1:]}
	if ex.Program == "kubectl" && len(argv) > 1 && argv[1] == "exec" {
		for i, w := range argv {
			if w == "--" && i+1 < len(argv) {
				ex.Program, ex.Args, ex.InPod = path.Base(argv[i+1]), argv[i+2:], true
				break
			}
		}
	}
	return ex, nil
}

// shellWords splits a line into words and the operators an example uses (| > & ; <( and
// )), with single and double quotes as the shell reads them.
func shellWords(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\'' || ch == '"':
			end := strings.IndexByte(line[i+1:], ch)
			if end < 0 {
				return nil, fmt.Errorf("unterminated %c quote", ch)
			}
			word.WriteString(line[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case ch == ' ' || ch == '\t':
			flush()
		case ch == '<' && i+1 < len(line) && line[i+1] == '(':
			flush()
			words = append(words, "<(")
			i++
		case ch == '&' && i+1 < len(line) && line[i+1] == '&':
			flush()
			words = append(words, "&&")
			i++
		case strings.IndexByte("|>&;)", ch) >= 0:
			flush()
			words = append(words, string(ch))
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	flush()
	return words, nil
}

// Runner runs the examples of one binary in-process.
type Runner struct {
	// Program is the binary's name as the examples spell it ("meshdrain").
	Program string
	// NewRoot builds a fresh command tree, to read the examples from and to check flags on.
	NewRoot func() *cobra.Command
	// Main runs the binary with args and returns its exit code.
	Main func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
	// NotOffline names, by its Line, each example that cannot run here, with the reason.
	NotOffline map[string]string
	// Prepare, if set, readies an example's run in dir, its working directory (the files it
	// names), and returns the arguments to run it with: args, or args with flags that keep
	// it short. It may skip the example (t.Skip) with a reason.
	Prepare func(t *testing.T, ex Example, dir string, args []string) []string
	// Check, if set, judges an example's exit code and output in place of "exit 0".
	Check func(t *testing.T, ex Example, code int, stdout, stderr string)
	// Timeout bounds one example: one that outlives it serves until stopped (default 2m).
	Timeout time.Duration
}

// Run runs every example of the tree that is not in NotOffline and checks that the flags of
// every example of this binary parse, that each NotOffline entry still names an example and
// says why, and that every command's --help exits 0.
func (r Runner) Run(t *testing.T) {
	t.Helper()
	exs, err := Examples(r.NewRoot())
	if err != nil {
		t.Fatal(err)
	}
	if len(exs) == 0 {
		t.Fatal("no examples found")
	}
	shown := map[string]string{} // line: the command whose help shows it first
	for _, ex := range exs {
		if first, ok := shown[ex.Line]; ok {
			t.Logf("%q, in %s's help, is %s's too: run once", ex.Line, ex.Command, first)
			continue
		}
		shown[ex.Line] = ex.Command
		t.Run(ex.Line, func(t *testing.T) {
			reason, notOffline := r.NotOffline[ex.Line]
			if ex.Program == r.Program {
				r.checkFlags(t, ex)
			}
			switch {
			case notOffline && strings.TrimSpace(reason) == "":
				t.Errorf("%q is named as not runnable here without a reason", ex.Line)
			case notOffline:
				t.Logf("not run: %s", reason)
			case ex.Program != r.Program:
				t.Errorf("%q (in %s's help) runs %s, not %s: name it in NotOffline with the reason it cannot run here", ex.Line, ex.Command, ex.Program, r.Program)
			default:
				r.run(t, ex)
			}
		})
	}
	for line := range r.NotOffline {
		if _, ok := shown[line]; !ok {
			t.Errorf("NotOffline names %q, which no --help shows: remove it", line)
		}
	}
	var helps func(c *cobra.Command)
	helps = func(c *cobra.Command) {
		args := append(strings.Fields(c.CommandPath())[1:], "--help")
		var out, errOut bytes.Buffer
		if code := r.Main(args, strings.NewReader(""), &out, &errOut); code != 0 || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("%s --help: exit %d, no usage:\n%s%s", c.CommandPath(), code, out.String(), errOut.String())
		}
		for _, sub := range c.Commands() {
			helps(sub)
		}
	}
	helps(r.NewRoot())
}

// checkFlags parses an example's flags as its command would: a flag that does not exist
// or a value that does not parse fails, whether the example runs here or not.
func (r Runner) checkFlags(t *testing.T, ex Example) {
	t.Helper()
	cmd, rest, err := r.NewRoot().Find(ex.Args)
	if err != nil {
		t.Errorf("%q: %v", ex.Line, err)
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%q: %s: %v", ex.Line, cmd.CommandPath(), err)
	}
}

// run runs one example in a fresh working directory, with its absolute paths under it (the
// pod's /meshdrain, a --svg /tmp/rollout), and checks that it exits 0.
func (r Runner) run(t *testing.T, ex Example) {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	args := make([]string, len(ex.Args))
	for i, a := range ex.Args {
		args[i] = underDir(t, dir, a)
	}
	if r.Prepare != nil {
		args = r.Prepare(t, ex, dir, args)
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- r.Main(args, strings.NewReader(""), &out, &errOut) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case code := <-done:
		if r.Check != nil {
			r.Check(t, ex, code, out.String(), errOut.String())
		} else if code != 0 {
			t.Errorf("%s %s: exit %d, want 0 (if it cannot run here, name it in NotOffline with the reason)\nstdout:\n%s\nstderr:\n%s",
				r.Program, strings.Join(args, " "), code, out.String(), errOut.String())
		}
	case <-timer.C:
		t.Fatalf("%q still runs after %s: one that serves until stopped cannot run here; name it in NotOffline with the reason", ex.Line, timeout)
	}
}

// underDir moves an absolute path argument (or --flag=/path) under dir, so that an example
// writes into the test's directory and not into the machine's; the kernel's files (/proc,
// /dev, /sys) stay where they are. The path's parent directory is created.
func underDir(t *testing.T, dir, arg string) string {
	t.Helper()
	prefix, p := "", arg
	if strings.HasPrefix(arg, "-") {
		name, value, ok := strings.Cut(arg, "=")
		if !ok {
			return arg
		}
		prefix, p = name+"=", value
	}
	if !strings.HasPrefix(p, "/") {
		return arg
	}
	for _, kernel := range []string{"/proc/", "/dev/", "/sys/"} {
		if strings.HasPrefix(p, kernel) {
			return arg
		}
	}
	moved := filepath.Join(dir, p)
	if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
		t.Fatal(err)
	}
	return prefix + moved
}

// syncBuffer is an output buffer that the example writes while the test may read it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
