package main

// A headless Chromium driven over the DevTools protocol through --remote-debugging-pipe:
// JSON messages, each ended by a NUL byte, written to the browser's fd 3 and read from its
// fd 4. No port, no websocket, no Node: the few commands the dashboard test needs.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/proctest"
)

// chromiumFlags are what headless Chromium needs in a container and on a machine with no
// network: no sandbox (no user namespaces), no GPU, and none of its own traffic (updates,
// sync, QUIC probes) to wait on or fail.
var chromiumFlags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
	"--mute-audio", "--remote-debugging-pipe"}

// browser is one Chromium process and the protocol messages it has sent.
type browser struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     *os.File // the browser reads commands here (its fd 3)
	stderr *syncBuffer

	mu      sync.Mutex
	next    int
	waiting map[int]chan cdpMessage
	events  []cdpMessage
	gone    chan struct{} // closed when the reader has seen the browser's end of the pipe close
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser starts headless Chromium with a fresh profile; it is closed when t ends.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	proctest.Need(t, "chromium")
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, in: cmdW, stderr: &syncBuffer{}, waiting: map[int]chan cdpMessage{}, gone: make(chan struct{})}
	args := append(append([]string{}, chromiumFlags...), "--user-data-dir="+t.TempDir(), "about:blank")
	b.cmd = exec.Command("chromium", args...)
	b.cmd.ExtraFiles = []*os.File{cmdR, outW} // fd 3, fd 4
	b.cmd.Stdout, b.cmd.Stderr = b.stderr, b.stderr
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its helpers go with it
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	cmdR.Close()
	outW.Close()
	// The reader is the browser's: it ends when the browser closes its end of the pipe.
	go func() {
		defer close(b.gone)
		defer outR.Close()
		r := bufio.NewReaderSize(outR, 1<<20)
		for {
			line, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var m cdpMessage
			if json.Unmarshal(bytes.TrimSuffix(line, []byte{0}), &m) != nil {
				continue
			}
			b.mu.Lock()
			if ch, ok := b.waiting[m.ID]; ok && m.ID != 0 {
				delete(b.waiting, m.ID)
				ch <- m
			} else if m.Method != "" {
				b.events = append(b.events, m)
			}
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		b.call(ctx, "", "Browser.close", nil, nil)
		select {
		case <-b.gone:
		case <-time.After(5 * time.Second):
			syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.gone
		}
		b.in.Close()
		b.cmd.Wait()
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) // any helper left behind
		if t.Failed() {
			t.Logf("chromium's output:\n%s", b.stderr)
		}
	})
	return b
}

// call sends method to the browser (session "") or to a page's session and decodes the
// result into result (when not nil).
func (b *browser) call(ctx context.Context, session, method string, params, result any) error {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	buf, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode %s: %w", method, err)
	}
	if _, err := b.in.Write(append(buf, 0)); err != nil {
		return fmt.Errorf("send %s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				return fmt.Errorf("decode %s: %w", method, err)
			}
		}
		return nil
	case <-b.gone:
		return fmt.Errorf("%s: chromium exited", method)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// page opens a new tab of the given size and returns its session.
func (b *browser) page(ctx context.Context, width, height int) (string, error) {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return "", err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return "", err
	}
	s := att.SessionID
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		if err := b.call(ctx, s, m, nil, nil); err != nil {
			return "", err
		}
	}
	err := b.call(ctx, s, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
	return s, err
}

// navigate loads url in the session's page and waits for its load event.
func (b *browser) navigate(ctx context.Context, session, url string) error {
	b.mu.Lock()
	seen := len(b.events)
	b.mu.Unlock()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := b.call(ctx, session, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return err
	}
	if nav.ErrorText != "" {
		return fmt.Errorf("navigate to %s: %s", url, nav.ErrorText)
	}
	for {
		b.mu.Lock()
		for _, e := range b.events[seen:] {
			if e.SessionID == session && e.Method == "Page.loadEventFired" {
				b.mu.Unlock()
				return nil
			}
		}
		seen = len(b.events)
		b.mu.Unlock()
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to load: %w", url, ctx.Err())
		}
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value into v.
func (b *browser) eval(ctx context.Context, session, expr string, v any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := b.call(ctx, session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("evaluate %q: %s", expr, r.ExceptionDetails.Text)
	}
	return json.Unmarshal(r.Result.Value, v)
}

// screenshot is the page as a PNG.
func (b *browser) screenshot(ctx context.Context, session string) ([]byte, error) {
	var r struct {
		Data []byte `json:"data"` // base64 in the message: encoding/json decodes it
	}
	if err := b.call(ctx, session, "Page.captureScreenshot", map[string]any{"format": "png"}, &r); err != nil {
		return nil, err
	}
	return r.Data, nil
}

// consoleErrors are the errors the session's page reported: console.error and assert
// calls, uncaught exceptions, and the browser's own log entries of level error (a
// resource that failed to load, a Content-Security-Policy violation).
func (b *browser) consoleErrors(session string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []string
	for _, e := range b.events {
		if e.SessionID != session {
			continue
		}
		switch e.Method {
		case "Runtime.consoleAPICalled":
			var p struct {
				Type string `json:"type"`
				Args []struct {
					Value       any    `json:"value"`
					Description string `json:"description"`
				} `json:"args"`
			}
			if json.Unmarshal(e.Params, &p) == nil && (p.Type == "error" || p.Type == "assert") {
				errs = append(errs, fmt.Sprintf("console.%s %v", p.Type, p.Args))
			}
		case "Runtime.exceptionThrown":
			errs = append(errs, "exception: "+string(e.Params))
		case "Log.entryAdded":
			var p struct {
				Entry struct {
					Level, Source, Text, URL string
				} `json:"entry"`
			}
			if json.Unmarshal(e.Params, &p) == nil && p.Entry.Level == "error" {
				errs = append(errs, fmt.Sprintf("%s: %s %s", p.Entry.Source, p.Entry.Text, p.Entry.URL))
			}
		}
	}
	return errs
}
