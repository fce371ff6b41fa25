package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/meshdrain/meshdrain/pkg/hook/hold"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the zap logger of a command. JSON uses zap's production keys (level, ts,
// msg) so log pipelines read it as they read any Go service; console is for people.
// logFile "" means stderr; "/proc/1/fd/1" sends a preStop hook's logs to the container's
// main stdout, where `kubectl logs` shows them (a hook's own output is discarded).
// NewLogger is the logger of a command that is not a hook (emulate): to stderr or a file.
func NewLogger(format, logFile string, stderr io.Writer, level zapcore.Level) (*zap.Logger, func(), error) {
	encoder, err := encoderFor(format)
	if err != nil {
		return nil, nil, &ExitError{Code: ExitUsage, Err: err}
	}
	out := zapcore.AddSync(stderr)
	closeFn := func() {}
	if logFile != "" {
		file, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("open --log-file: %w", err)
		}
		out = zapcore.AddSync(file)
		closeFn = func() { _ = file.Close() }
	}
	logger := zap.New(zapcore.NewCore(encoder, out, level))
	return logger, func() { _ = logger.Sync(); closeFn() }, nil
}

// newPrestopLogger builds prestop's logger. Logging must never end a drain: a log file that
// cannot be opened leaves the logger on stderr and is returned as fileErr for the caller to
// report; a sink that fails later (a closed pipe, a full disk) is reported once on stderr and
// then ignored. With a log file, ERROR events and the final event are also written to stderr,
// which is what the kubelet puts in a FailedPreStopHook event.
func newPrestopLogger(format, logFile string, stderr io.Writer, level zapcore.Level) (logger *zap.Logger, closeFn func(), fileErr error) {
	encoder, err := encoderFor(format)
	if err != nil {
		// The bad --log-format is reported as a configuration error; log in JSON meanwhile.
		encoder, _ = encoderFor("json")
	}
	errOut := &failSoftWriter{w: stderr, name: "stderr"}
	stderrSink := zapcore.AddSync(errOut)
	if logFile == "" {
		logger = zap.New(zapcore.NewCore(encoder, stderrSink, level), zap.ErrorOutput(stderrSink))
		return logger, func() { _ = logger.Sync() }, nil
	}
	file, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		logger = zap.New(zapcore.NewCore(encoder, stderrSink, level), zap.ErrorOutput(stderrSink))
		return logger, func() { _ = logger.Sync() }, fmt.Errorf("open --log-file: %w", err)
	}
	fileSink := zapcore.AddSync(&failSoftWriter{w: file, name: logFile, report: errOut})
	core := zapcore.NewTee(
		zapcore.NewCore(encoder, fileSink, level),
		kubeletCore{zapcore.NewCore(encoder.Clone(), stderrSink, level)},
	)
	logger = zap.New(core, zap.ErrorOutput(stderrSink))
	return logger, func() { _ = logger.Sync(); _ = file.Close() }, nil
}

func encoderFor(format string) (zapcore.Encoder, error) {
	switch format {
	case "json":
		return zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), nil
	case "console":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		return zapcore.NewConsoleEncoder(cfg), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or console", format)
}

// finalMessage is the message of the one event every prestop run ends with.
const finalMessage = "drain finished"

// kubeletCore passes on only what the kubelet should show in a FailedPreStopHook event:
// errors and the final event (prestop's, or hold's).
type kubeletCore struct{ zapcore.Core }

func (k kubeletCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Level >= zapcore.ErrorLevel || e.Message == finalMessage || e.Message == hold.FinalMessage {
		return k.Core.Check(e, ce)
	}
	return ce
}

func (k kubeletCore) With(fields []zapcore.Field) zapcore.Core {
	return kubeletCore{k.Core.With(fields)}
}

// failSoftWriter never fails a log write: the first error is reported on report (if any) and
// the bytes are dropped, so that a closed pipe or a full disk cannot stop the drain.
type failSoftWriter struct {
	w      io.Writer
	name   string
	report io.Writer
	once   sync.Once
}

func (f *failSoftWriter) Write(p []byte) (int, error) {
	if _, err := f.w.Write(p); err != nil && f.report != nil {
		f.once.Do(func() {
			_, _ = fmt.Fprintf(f.report, "{\"level\":\"error\",\"msg\":\"writing logs failed; the drain goes on\",\"sink\":%q,\"error\":%q}\n", f.name, err.Error())
		})
	}
	return len(p), nil
}

func (f *failSoftWriter) Sync() error { return nil }

// checkLogFile tells whether prestop could append to path, without creating it.
func checkLogFile(path string) error {
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		return file.Close()
	}
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("%s does not exist and %s is not writable: %w", path, dir, err)
	}
	return nil
}
