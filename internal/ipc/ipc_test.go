package ipc

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestServe(t *testing.T) {
	tests := []struct {
		name string
		// act drives the supervisor end after the worker loop started.
		act  func(t *testing.T, sup *Conn)
		want error
	}{
		{"drain", func(t *testing.T, sup *Conn) {
			if err := sup.Send(Msg{Type: TypeDrain}); err != nil {
				t.Fatal(err)
			}
		}, ErrDrain},
		{"supervisor dies", func(t *testing.T, sup *Conn) { sup.Close() }, ErrParentGone},
		{"stats then drain", func(t *testing.T, sup *Conn) {
			if err := sup.Send(Msg{Type: TypeStats}); err != nil {
				t.Fatal(err)
			}
			m, err := sup.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if m.Type != TypeStats || m.Requests != 42 || m.Connections != 7 {
				t.Errorf("stats answer = %+v, want type stats, 42 requests, 7 connections", m)
			}
			sup.Send(Msg{Type: TypeDrain})
		}, ErrDrain},
		{"unknown message is ignored", func(t *testing.T, sup *Conn) {
			sup.Send(Msg{Type: "future-feature"})
			sup.Send(Msg{Type: TypeDrain})
		}, ErrDrain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup, childFile, err := Pair()
			if err != nil {
				t.Fatal(err)
			}
			defer sup.Close()
			child, err := FromFile(childFile)
			if err != nil {
				t.Fatal(err)
			}
			defer child.Close()
			done := make(chan error, 1)
			go func() {
				done <- child.Serve(context.Background(), func() Msg { return Msg{Requests: 42, Connections: 7} })
			}()
			tt.act(t, sup)
			select {
			case err := <-done:
				if !errors.Is(err, tt.want) {
					t.Errorf("Serve = %v, want %v", err, tt.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not return")
			}
		})
	}
}

func TestServeStopsWithContext(t *testing.T) {
	sup, childFile, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	child, err := FromFile(childFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- child.Serve(ctx, func() Msg { return Msg{} }) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Serve = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func TestRecvRejectsGarbage(t *testing.T) {
	sup, childFile, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	child, _ := FromFile(childFile)
	defer child.Close()
	sup.c.Write([]byte("not json\n"))
	if _, err := child.Recv(); err == nil {
		t.Error("Recv of garbage: got nil error, want a decode error")
	}
}

// TestServeKeepAlive: keepalive messages reach the handler in order, off then on; Serve
// without a handler ignores them.
func TestServeKeepAlive(t *testing.T) {
	tests := []struct {
		name    string
		handler bool
		want    []bool
	}{
		{"off then on", true, []bool{false, true}},
		{"no handler", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup, childFile, err := Pair()
			if err != nil {
				t.Fatal(err)
			}
			defer sup.Close()
			child, err := FromFile(childFile)
			if err != nil {
				t.Fatal(err)
			}
			defer child.Close()
			var got []bool // written by Serve's goroutine, read after it returned
			h := Handlers{Stats: func() Msg { return Msg{} }}
			if tt.handler {
				h.KeepAlive = func(on bool) { got = append(got, on) }
			}
			done := make(chan error, 1)
			go func() { done <- child.ServeWith(context.Background(), h) }()
			sup.Send(Msg{Type: TypeKeepAlive, CloseAfterResponse: true})
			sup.Send(Msg{Type: TypeKeepAlive})
			sup.Send(Msg{Type: TypeDrain})
			if err := <-done; !errors.Is(err, ErrDrain) {
				t.Fatalf("ServeWith = %v, want ErrDrain", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("keep-alive calls = %v, want %v", got, tt.want)
			}
		})
	}
}
