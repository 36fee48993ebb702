package ipc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A worker outlives its supervisor: when the channel's other end closes (the supervisor was
// killed, or re-executed itself to upgrade), a worker given EnvAdopt keeps serving its
// socket and dials that unix socket until a new supervisor answers there, for at most
// EnvAdoptWait. It sends a TypeAdopt message with its pid and slot, its listening socket
// passed along (SCM_RIGHTS), so the new supervisor takes over the very socket and its queue;
// the answer (TypeAdopted) carries the write end of a new pipe for the worker's output, as
// the old one went with the supervisor. The worker sends nothing to a listener that is not
// of its own user or root (CheckPeer): it keeps dialling for the real supervisor. A worker that finds no supervisor in time drains
// and exits, so an abandoned cluster never serves for ever.
const (
	// EnvAdopt is the path of the rendezvous socket.
	EnvAdopt = "ONEHOST_ADOPT"
	// EnvAdoptWait is how long a worker waits for a new supervisor, in milliseconds.
	EnvAdoptWait = "ONEHOST_ADOPT_WAIT_MS"
)

// Message types of the rendezvous.
const (
	TypeAdopt   = "adopt"   // worker → new supervisor: take me (pid, slot; the socket attached)
	TypeAdopted = "adopted" // new supervisor → worker: taken (the output pipe attached)
)

// Hello is what a worker says of itself at the rendezvous.
type Hello struct {
	Type string `json:"type"`
	PID  int    `json:"pid"`
	Slot int    `json:"slot"`
	// Started is the worker's start time in clock ticks since boot (/proc/PID/stat's
	// field 22), so that a supervisor never takes a reused pid for the worker.
	Started uint64 `json:"started"`
	// Proto is the rendezvous protocol the worker speaks (Proto); Rejoin fills it in.
	Proto int `json:"proto"`
}

// Proto is the version of what a worker and the supervisor that adopts it must agree on
// (these messages, the channel's, the descriptors passed): a supervisor takes no worker
// that speaks another. It changes when they do. A string, so that a build can be given
// another with -ldflags -X (cmd/supervisor's test of an upgrade to a supervisor that cannot
// take its workers over).
var protoVersion = "1"

// Proto is protoVersion as a number (0 if a build set it to something that is none).
func Proto() int {
	n, _ := strconv.Atoi(protoVersion)
	return n
}

// OutliveParent clears the calling thread's parent-death signal, which the supervisor
// sets for every worker (SIGKILL at its death, so that programs that cannot rejoin do not
// serve on unsupervised): a worker given EnvAdopt calls it to outlive a kill -9 or an
// upgrade of its supervisor and rejoin the next. The kernel keeps the signal per thread,
// on the thread that exec'd (the main thread), so call it from there: a Go program's init
// functions run on it.
func OutliveParent() error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("clear the parent-death signal: %w", err)
	}
	return nil
}

// AdoptWait reads EnvAdoptWait from the value given ("" or invalid: 0, no waiting).
func AdoptWait(v string) time.Duration {
	ms, err := strconv.Atoi(v)
	if err != nil || ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// ErrNoSupervisor is Rejoin's error when no supervisor answered within the wait.
var ErrNoSupervisor = errors.New("no new supervisor")

// Rejoin is the worker's side of the rendezvous at path: it dials every 50 ms until a
// supervisor takes it or wait passes (ErrNoSupervisor) or ctx ends. It returns the new
// channel and the write end of the new output pipe (nil if none was sent); socket is the
// worker's listening socket, passed to the supervisor (nil in fork mode: none).
func Rejoin(ctx context.Context, path string, hello Hello, socket *os.File, wait time.Duration) (*Conn, *os.File, error) {
	hello.Type = TypeAdopt
	hello.Proto = Proto()
	line, err := json.Marshal(hello)
	if err != nil {
		return nil, nil, err
	}
	line = append(line, '\n')
	deadline := time.Now().Add(wait)
	var last error
	for {
		c, out, err := rejoinOnce(path, line, socket, deadline)
		if err == nil {
			return c, out, nil
		}
		last = err
		if errors.Is(err, errRefused) {
			return nil, nil, err
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("%w within %v: %v", ErrNoSupervisor, wait, last)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func rejoinOnce(path string, line []byte, socket *os.File, deadline time.Time) (*Conn, *os.File, error) {
	nc, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return nil, nil, err
	}
	uc := nc.(*net.UnixConn)
	// Nothing, the listening socket least of all, goes to a process of another user that
	// answers at the path: it would take over the port's traffic. Such a peer is no
	// supervisor of ours; keep dialling for the real one.
	if err := CheckPeer(uc); err != nil {
		uc.Close()
		return nil, nil, err
	}
	var oob []byte
	if socket != nil {
		oob = syscall.UnixRights(int(socket.Fd()))
	}
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := uc.WriteMsgUnix(line, oob, nil); err != nil {
		uc.Close()
		return nil, nil, fmt.Errorf("send adopt: %w", err)
	}
	m, files, err := readWithFiles(uc)
	if err != nil {
		uc.Close()
		return nil, nil, fmt.Errorf("read adopt answer: %w", err)
	}
	var reply Msg
	if err := json.Unmarshal(m, &reply); err != nil || reply.Type != TypeAdopted {
		closeAll(files)
		uc.Close()
		if err == nil && reply.Type == TypeDrain {
			return nil, nil, errRefused
		}
		return nil, nil, fmt.Errorf("adopt answer %q: not %q", m, TypeAdopted)
	}
	uc.SetDeadline(time.Time{})
	var out *os.File
	if len(files) > 0 {
		out, files = files[0], files[1:]
	}
	closeAll(files)
	return New(uc), out, nil
}

// errRefused: the new supervisor has the slot filled already and asks this worker to go.
var errRefused = fmt.Errorf("%w: the new supervisor asked this worker to drain", ErrDrain)

// AcceptRejoin is the supervisor's side: it reads a worker's hello and the socket it passed
// (nil if none) from a connection accepted on the rendezvous socket.
func AcceptRejoin(uc *net.UnixConn) (Hello, *os.File, error) {
	uc.SetReadDeadline(time.Now().Add(2 * time.Second))
	defer uc.SetReadDeadline(time.Time{})
	m, files, err := readWithFiles(uc)
	if err != nil {
		return Hello{}, nil, err
	}
	var h Hello
	if err := json.Unmarshal(m, &h); err != nil || h.Type != TypeAdopt {
		closeAll(files)
		return Hello{}, nil, fmt.Errorf("adopt hello %q: not a worker's", m)
	}
	var sock *os.File
	if len(files) > 0 {
		sock, files = files[0], files[1:]
	}
	closeAll(files)
	return h, sock, nil
}

// Answer tells an adopted worker it is taken, passing out (its new output; may be nil), and
// returns the channel; Refuse asks it to drain instead.
func Answer(uc *net.UnixConn, out *os.File) (*Conn, error) {
	line, _ := json.Marshal(Msg{Type: TypeAdopted})
	var oob []byte
	if out != nil {
		oob = syscall.UnixRights(int(out.Fd()))
	}
	if _, _, err := uc.WriteMsgUnix(append(line, '\n'), oob, nil); err != nil {
		return nil, fmt.Errorf("answer adopt: %w", err)
	}
	return New(uc), nil
}

// Refuse answers a worker that cannot be adopted: it drains and exits.
func Refuse(uc *net.UnixConn) {
	line, _ := json.Marshal(Msg{Type: TypeDrain})
	uc.Write(append(line, '\n'))
	uc.Close()
}

// readWithFiles reads one line and the descriptors sent with it. The peer sends the line
// in one sendmsg and nothing more before an answer, so the first reads hold it all.
func readWithFiles(uc *net.UnixConn) ([]byte, []*os.File, error) {
	var buf []byte
	var files []*os.File
	b := make([]byte, 4096)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for len(buf) < maxLine {
		n, oobn, _, _, err := uc.ReadMsgUnix(b, oob)
		if oobn > 0 {
			fs, perr := parseRights(oob[:oobn])
			files = append(files, fs...)
			if perr != nil {
				closeAll(files)
				return nil, nil, perr
			}
		}
		if n > 0 { // -1 with an error
			buf = append(buf, b[:n]...)
		}
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			return buf[:i], files, nil
		}
		if err != nil {
			closeAll(files)
			return nil, nil, err
		}
	}
	closeAll(files)
	return nil, nil, errors.New("message too long")
}

func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
