// Package proctest runs a server process for a test: it starts the command, keeps its
// stderr (JSON log lines, as zap writes them), waits for the line {"msg":"serving",
// "addr":...} that the project's servers log once they accept connections, and stops and
// reaps the process when the test ends.
package proctest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a started server process.
type Proc struct {
	Cmd  *exec.Cmd
	Addr string // from its "serving" log line

	mu   sync.Mutex
	logs strings.Builder
	done chan error
}

// Start starts cmd (its Stderr must be unset), waits up to 60 s for its "serving" line and
// returns it. When the test ends the process gets SIGTERM and 10 s to exit before it is
// killed; a failed test logs the process's output.
func Start(tb testing.TB, cmd *exec.Cmd) *Proc {
	tb.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &Proc{Cmd: cmd, done: make(chan error, 1)}
	addrc := make(chan string, 1)
	go func() { // owns stderr until EOF, then reaps the process
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			var m struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "serving" {
				select {
				case addrc <- m.Addr:
				default:
				}
			}
		}
		p.done <- cmd.Wait()
	}()
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.done
			tb.Errorf("process did not stop within 10 s of SIGTERM; logs:\n%s", p.Logs())
		}
		if tb.Failed() {
			tb.Logf("process logs:\n%s", p.Logs())
		}
	})
	select {
	case p.Addr = <-addrc:
	case err := <-p.done:
		p.done <- err // for Cleanup
		tb.Fatalf("process exited before serving: %v\n%s", err, p.Logs())
	case <-time.After(60 * time.Second):
		tb.Fatalf("process not serving after 60 s\n%s", p.Logs())
	}
	return p
}

// Logs returns what the process wrote to stderr so far.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Stop sends sig and waits up to 15 s for the exit, returning the process's exit error.
func (p *Proc) Stop(tb testing.TB, sig os.Signal) error {
	tb.Helper()
	p.Cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err // for Cleanup
		return err
	case <-time.After(15 * time.Second):
		tb.Fatalf("process did not exit after %v", sig)
		return nil
	}
}
