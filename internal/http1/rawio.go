package http1

import (
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"
)

// rawIO reads and writes a socket with raw system calls on its non-blocking descriptor,
// inside syscall.RawConn's Read and Write, so the runtime's poller still parks the
// goroutine on EAGAIN and still enforces the deadlines.
//
// Why: net.Conn's Read and Write enter the scheduler's syscall state for every call. A
// loopback write of a response costs ~10–30 µs (it runs the receiver's TCP stack and wakes
// it), longer than a tick of the runtime's sysmon, which then takes the P away from the
// writing thread and starts another thread to run it. In a GOMAXPROCS=1 worker under the
// challenge's journey that was ~2,700 thread switches a second at ~2,000 requests a second,
// and sysmon, kept in its fastest polling mode, alone cost ~17 µs per request. A
// non-blocking socket call never blocks, so there is nothing for the scheduler to hand off.
type rawIO struct {
	rc  syscall.RawConn
	buf []byte // the operation's buffer: read into, or written from
	n   int    // bytes read, or written so far
	err error

	done bool // write: all written, or failed, in the first pass

	setWriteDeadline func(time.Time) error
	readFn, writeFn  func(fd uintptr) bool // bound once, so no call allocates a closure
	tryWriteFn       func(fd uintptr)
}

// newRawIO returns nil where nc has no descriptor to call on (a net.Pipe in tests, a
// wrapped connection): those use nc's own Read and Write.
func newRawIO(nc net.Conn) *rawIO {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawIO{rc: rc, setWriteDeadline: nc.SetWriteDeadline}
	r.readFn, r.writeFn, r.tryWriteFn = r.readOnce, r.writeSome, r.tryWrite
	return r
}

// read reads into b once data is there, as net.Conn's Read does: (0, io.EOF) at the end.
func (r *rawIO) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.buf, r.n, r.err = b, 0, nil
	if err := r.rc.Read(r.readFn); err != nil {
		r.buf = nil
		return 0, err // a deadline, or the connection closed under us
	}
	r.buf = nil
	if r.err != nil {
		return r.n, r.err
	}
	if r.n == 0 {
		return 0, io.EOF
	}
	return r.n, nil
}

func (r *rawIO) readOnce(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)))
		switch e {
		case 0:
			r.n = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // park until readable
		default:
			r.err = wrapErrno("read", e)
			return true
		}
	}
}

// write writes all of b. It writes what the socket takes at once without any deadline;
// only when the socket's buffer is full does it arm a write deadline of timeout and wait
// for room, as often as needed. Arming a deadline per write would update a runtime timer
// per response, and a timer moved later stays in the heap at its old time, waking the
// process for nothing when that time comes (at 10,000 connections: ~1,400 times a second).
func (r *rawIO) write(b []byte, timeout time.Duration) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.buf, r.n, r.err, r.done = b, 0, nil, false
	defer func() { r.buf = nil }()
	if err := r.rc.Control(r.tryWriteFn); err != nil {
		return 0, err
	}
	if !r.done {
		r.setWriteDeadline(time.Now().Add(timeout))
		if err := r.rc.Write(r.writeFn); err != nil {
			return r.n, err // the deadline passed, or the connection closed under us
		}
	}
	return r.n, r.err
}

// tryWrite is write's first pass, through Control: it must not wait, and it must not fail
// on a write deadline that passed long ago with no write waiting.
func (r *rawIO) tryWrite(fd uintptr) { r.done = r.writeSome(fd) }

func (r *rawIO) writeSome(fd uintptr) bool {
	for r.n < len(r.buf) {
		rest := r.buf[r.n:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch e {
		case 0:
			r.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // park until writable, then go on from r.n
		default:
			r.err = wrapErrno("write", e)
			return true
		}
	}
	return true
}

func wrapErrno(op string, e syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Err: e}
}
