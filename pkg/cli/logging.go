package cli

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the zap logger of a command. JSON uses zap's production keys (level, ts,
// msg) so log pipelines read it as they read any Go service; console is for people.
// logFile "" means stderr; "/proc/1/fd/1" sends a preStop hook's logs to the container's
// main stdout, where `kubectl logs` shows them (a hook's own output is discarded).
func newLogger(format, logFile string, stderr io.Writer, level zapcore.Level) (*zap.Logger, func(), error) {
	var encoder zapcore.Encoder
	switch format {
	case "json":
		encoder = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	case "console":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		encoder = zapcore.NewConsoleEncoder(cfg)
	default:
		return nil, nil, usageError("--log-format %q: want json or console", format)
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
