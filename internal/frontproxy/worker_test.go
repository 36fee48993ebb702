package frontproxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/seedtest"
)

const testSecret = "twelve-dollar-challenge"

// binDir holds the worker binary built for this test run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "frontproxy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var buildWorker struct {
	sync.Once
	path string
	err  error
}

// workerBinary builds cmd/worker once per test binary.
func workerBinary(t testing.TB) string {
	t.Helper()
	buildWorker.Do(func() {
		path := filepath.Join(binDir, "worker")
		out, err := exec.Command("go", "build", "-o", path, "github.com/onehost/onehost/cmd/worker").CombinedOutput()
		if err != nil {
			buildWorker.err = fmt.Errorf("build worker: %v\n%s", err, out)
			return
		}
		buildWorker.path = path
	})
	if buildWorker.err != nil {
		t.Fatal(buildWorker.err)
	}
	return buildWorker.path
}

// worker is a real cmd/worker process on a fresh seed copy, with the test holding the
// supervisor's end of its ipc channel, so it can read the worker's own counters.
type worker struct {
	addr string
	sup  *ipc.Conn
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs strings.Builder
	done chan error
}

func (w *worker) Logs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.logs.String()
}

func startWorker(t testing.TB) *worker {
	t.Helper()
	bin := workerBinary(t)
	sup, child, err := ipc.Pair()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-drain-timeout=5s")
	cmd.Env = []string{"SQLITE_PATH=" + seedtest.Path(t), "JWT_SECRET=" + testSecret, "HOST=127.0.0.1", "PORT=0",
		ipc.EnvFD + "=3", "PATH=" + os.Getenv("PATH")}
	cmd.ExtraFiles = []*os.File{child}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child.Close()
	w := &worker{sup: sup, cmd: cmd, done: make(chan error, 1)}
	addrc := make(chan string, 1)
	go func() { // owns stderr until EOF, then reaps the process
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			w.mu.Lock()
			w.logs.WriteString(line + "\n")
			w.mu.Unlock()
			var m struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "serving" {
				addrc <- m.Addr
			}
		}
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-w.done
			t.Errorf("worker did not stop within 10 s of SIGTERM")
		}
		sup.Close()
		if t.Failed() {
			t.Logf("worker logs:\n%s", w.Logs())
		}
	})
	select {
	case w.addr = <-addrc:
	case err := <-w.done:
		t.Fatalf("worker exited before serving: %v\n%s", err, w.Logs())
	case <-time.After(60 * time.Second):
		t.Fatalf("worker not serving after 60 s\n%s", w.Logs())
	}
	return w
}

// stats asks the worker for its counters over the ipc channel (what the supervisor does).
func (w *worker) stats(t testing.TB) ipc.Msg {
	t.Helper()
	if err := w.sup.Send(ipc.Msg{Type: ipc.TypeStats}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := w.sup.Recv()
		if err != nil {
			t.Fatalf("read worker stats: %v", err)
		}
		if m.Type == ipc.TypeStats {
			return m
		}
	}
}
