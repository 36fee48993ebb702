package ipc

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogEncoder is the encoder of the supervisor's log in format (LogConsole, else JSON):
// ISO 8601 times with milliseconds everywhere, and in console form the levels in capitals
// and two spaces between the fields. The supervisor logs with it, and a worker told
// EnvLogFormat does too, so that a worker's event reads as one of the supervisor's own
// after the `ID|APP |` prefix.
func NewLogEncoder(format string) zapcore.Encoder {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	if format != LogConsole {
		return zapcore.NewJSONEncoder(enc)
	}
	enc.EncodeLevel = zapcore.CapitalLevelEncoder
	enc.ConsoleSeparator = "  "
	return zapcore.NewConsoleEncoder(enc)
}
