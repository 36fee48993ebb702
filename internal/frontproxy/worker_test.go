package frontproxy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/onehost/onehost/internal/ipc"
	"github.com/onehost/onehost/internal/proctest"
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
	*proctest.Proc
	sup *ipc.Conn
}

func startWorker(t testing.TB) *worker {
	t.Helper()
	bin := workerBinary(t)
	sup, child, err := ipc.Pair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Close() }) // runs after the process's own cleanup has reaped it
	cmd := exec.Command(bin, "-drain-timeout=5s")
	cmd.Env = []string{"SQLITE_PATH=" + seedtest.Path(t), "JWT_SECRET=" + testSecret, "HOST=127.0.0.1", "PORT=0",
		ipc.EnvFD + "=3", "PATH=" + os.Getenv("PATH")}
	cmd.ExtraFiles = []*os.File{child}
	defer child.Close() // the worker holds its own copy once started
	return &worker{Proc: proctest.Start(t, cmd), sup: sup}
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
