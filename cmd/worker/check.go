package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"go.uber.org/zap"
)

// checkServe is -check: what a start of cfg would refuse, judged without serving. The flags
// and environment were parsed and checked by parseServe as for a start (so every setting is
// judged by the code that reads it, not by a copy in the supervisor); what a start refuses
// later is judged here without opening or binding anything: the database must be a file
// (opening it is the start's), and the JWT secret must be allowed on the address the worker
// would bind (HOST and PORT; an inherited socket's address is the supervisor's to say, so
// `supervisor run -check` passes its listen address as HOST and PORT). ok on stdout, exit 0;
// the first refusal, naming its variable, otherwise.
func checkServe(cfg serveConfig, log *zap.Logger, stdout io.Writer) error {
	if fi, err := os.Stat(cfg.db); err != nil || !fi.Mode().IsRegular() {
		why := "not a regular file"
		if u := errors.Unwrap(err); u != nil {
			why = u.Error() // "no such file or directory", without the path again
		}
		return fmt.Errorf("SQLITE_PATH %s: %s: point it (or -db) at a copy of the seed database; `worker seed -db PATH` writes one", cfg.db, why)
	}
	if !cfg.inherited {
		addr, err := net.ResolveTCPAddr("tcp", cfg.addr)
		if err != nil {
			return fmt.Errorf("HOST (-host) %s: %w: want an address of this host, such as 127.0.0.1", cfg.addr, err)
		}
		if err := checkSecret(cfg.secret, cfg.challengeSecret, addr, log); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(stdout, "ok")
	return err
}
