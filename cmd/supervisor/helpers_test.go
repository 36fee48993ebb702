package main

import (
	"context"
	"net/url"

	"github.com/onehost/onehost/internal/control"
	"github.com/onehost/onehost/internal/monit"
)

// everyOnline says whether every worker of st is online.
func everyOnline(st control.Status) bool { return monit.EveryOnline(st) }

// controlCall sends one request to the supervisor at socket and returns the body of its
// answer, or its error.
func controlCall(ctx context.Context, socket, method, path string, q url.Values) ([]byte, error) {
	return control.NewClient(socket).Call(ctx, method, path, q)
}
