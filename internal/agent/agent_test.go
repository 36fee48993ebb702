package agent

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

func TestAnswer(t *testing.T) {
	tests := []struct {
		name string
		st   State
		want string
	}{
		{"all online", State{Online: 4, Desired: 4}, "up ready 100%\n"},
		{"1 of 4", State{Online: 1, Desired: 4}, "up ready 25%\n"},
		{"3 of 4", State{Online: 3, Desired: 4}, "up ready 75%\n"},
		{"1 of 200 clamps to 1%", State{Online: 1, Desired: 200}, "up ready 1%\n"},
		{"more online than wanted (scale-down) clamps to 100%", State{Online: 5, Desired: 4}, "up ready 100%\n"},
		{"none serving", State{Online: 0, Desired: 4}, "down #no worker serves\n"},
		{"no slots", State{}, "down #no worker serves\n"},
		{"drained", State{Online: 4, Desired: 4, Drained: true}, "drain #drained\n"},
		{"drained with none serving", State{Online: 0, Desired: 4, Drained: true}, "drain #drained\n"},
		{"stopping", State{Online: 4, Desired: 4, Stopping: true}, "drain #stopping\n"},
		{"stopping, workers gone", State{Desired: 4, Stopping: true}, "drain #stopping\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Answer(tt.st); got != tt.want {
				t.Errorf("Answer(%+v) = %q, want %q", tt.st, got, tt.want)
			}
		})
	}
}

// check is what HAProxy does: connect, send agent-send's text if any, read to the end.
func check(t *testing.T, addr, send string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if send != "" {
		io.WriteString(c, send)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	return string(b)
}

func TestServer(t *testing.T) {
	var st atomic.Pointer[State]
	st.Store(&State{Online: 2, Desired: 2})
	s, err := Listen("127.0.0.1:0", Config{State: func() State { return *st.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	tests := []struct {
		name, send string
		st         State
		want       string
	}{
		{"plain check", "", State{Online: 2, Desired: 2}, "up ready 100%\n"},
		{"with agent-send text", "be_web/h1\n", State{Online: 1, Desired: 2}, "up ready 50%\n"},
		{"drained", "", State{Online: 2, Desired: 2, Drained: true}, "drain #drained\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st.Store(&tt.st)
			if got := check(t, addr, tt.send); got != tt.want {
				t.Errorf("answer %q, want %q", got, tt.want)
			}
		})
	}
	// A client that never closes is cut off at Timeout, and Close waits for nothing more.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("still accepting after Close")
	}
}
