package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/seed"
)

// DefaultSecret is the challenge's JWT secret, published with it: used by `worker seed
// -tokens` when neither JWT_SECRET nor JWT_SECRET_FILE is set (the server itself refuses to
// start without a secret, and refuses this one off loopback: checkSecret).
const DefaultSecret = "twelve-dollar-challenge"

func runSeed(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker seed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", getenv("SQLITE_PATH"), "database file to create (env SQLITE_PATH); must not exist")
	tokens := fs.String("tokens", "", "also write the load test's token file (a JSON array) here")
	n := fs.Int("n", 20000, "number of users to sign tokens for (users 1..n)")
	check := fs.Bool("check", false, "verify the content hash of the written database (slower)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *db == "" {
		return errors.New("seed: -db is required (the database file to create)")
	}
	if *n < 1 || *n > 50000 {
		return fmt.Errorf("seed: -n must be between 1 and 50000 (the seed's users), got %d", *n)
	}
	log, err := newLogger(stderr, "info", ipc.LogJSON)
	if err != nil {
		return err
	}
	defer log.Sync()

	if _, err := os.Stat(*db); err == nil {
		log.Info("seed database exists, leaving it as it is", zap.String("db", *db))
	} else {
		st, err := seed.Generate(ctx, *db, seed.Options{Logger: log})
		if err != nil {
			return err
		}
		log.Info("seed database written", zap.String("db", *db), zap.Int("users", st.Users),
			zap.Int("posts", st.Posts), zap.Int("likes", st.Likes), zap.Int64("bytes", st.Bytes),
			zap.Duration("load", st.Load), zap.Duration("total", st.Total))
	}
	if *check {
		if err := seed.Check(ctx, *db); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "content hash ok:", seed.ExpectedHash)
	}
	if *tokens != "" {
		secret, err := readSecret(getenv)
		if err != nil {
			return err
		}
		if secret == "" {
			secret = DefaultSecret
		}
		if err := writeTokens(*tokens, []byte(secret), *n); err != nil {
			return err
		}
		log.Info("tokens written", zap.String("file", *tokens), zap.Int("users", *n))
	}
	return nil
}

func writeTokens(path string, secret []byte, n int) error {
	// 0600: every token in it posts and likes as its user.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("create token file: %w", err)
	}
	w := bufio.NewWriter(f)
	if err := seed.WriteTokens(w, secret, n, time.Now()); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	return nil
}
