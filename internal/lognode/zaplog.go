package lognode

import (
	"fmt"

	"go.uber.org/zap"
)

// zapLogger is nats-server's Logger over zap.
type zapLogger struct{ l *zap.Logger }

func (z zapLogger) Noticef(format string, v ...any) { z.l.Info(fmt.Sprintf(format, v...)) }
func (z zapLogger) Warnf(format string, v ...any)   { z.l.Warn(fmt.Sprintf(format, v...)) }
func (z zapLogger) Errorf(format string, v ...any)  { z.l.Error(fmt.Sprintf(format, v...)) }
func (z zapLogger) Debugf(format string, v ...any)  { z.l.Debug(fmt.Sprintf(format, v...)) }
func (z zapLogger) Tracef(format string, v ...any)  {}

// Fatalf is nats-server's "cannot go on": logged as an error; the server shuts itself down.
func (z zapLogger) Fatalf(format string, v ...any) { z.l.Error(fmt.Sprintf(format, v...)) }
