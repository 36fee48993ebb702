package sqlitec

import (
	"syscall"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// SQLite takes and drops a POSIX lock on its -shm file (fcntl F_SETLK) at the start and end
// of every read transaction in WAL mode: two fcntl calls per request in the feed worker.
// Through modernc's libc each one is a Go syscall.Syscall, which enters the scheduler's
// syscall state, and entering it while the runtime's sysmon sleeps (as it does whenever
// the process was idle, i.e. between most requests at the challenge's rates) wakes
// sysmon, which then polls every 20 µs until the process is idle again. Measured in a
// GOMAXPROCS=1 worker at ~2,000 requests a second: sysmon woke ~1,800 times a second and
// was 17 % of the process's CPU (perf, docs/performance.md).
//
// F_SETLK and F_GETLK never block (SQLite is built without SQLITE_ENABLE_SETLK_TIMEOUT,
// so it never asks for F_SETLKW), so they are made as raw system calls, which leave the
// scheduler alone, through SQLite's own hook for replacing the unix VFS's system calls
// (xSetSystemCall). Every other fcntl command goes to the original function.

// Commands that only test or set a lock without waiting: <fcntl.h> on Linux.
const (
	fGetLK    = 5
	fSetLK    = 6
	fOFDGetLK = 36
	fOFDSetLK = 37
)

// libcFcntl is the unix VFS's fcntl before the replacement.
var libcFcntl uintptr

func init() {
	// xSetSystemCall is not thread safe; init runs before any goroutine can use SQLite.
	tls := libc.NewTLS()
	defer tls.Close()
	vfs := sqlite3.Xsqlite3_vfs_find(tls, 0)
	if vfs == 0 {
		return
	}
	v := (*sqlite3.Tsqlite3_vfs)(cptr(vfs))
	if v.FiVersion < 3 || v.FxSetSystemCall == 0 || v.FxGetSystemCall == 0 {
		return
	}
	name, err := libc.CString("fcntl")
	if err != nil {
		return
	}
	defer libc.Xfree(tls, name)
	get := *(*func(*libc.TLS, uintptr, uintptr) uintptr)(unsafe.Pointer(&struct{ uintptr }{v.FxGetSystemCall}))
	set := *(*func(*libc.TLS, uintptr, uintptr, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{v.FxSetSystemCall}))
	orig := get(tls, vfs, name)
	if orig == 0 {
		return
	}
	libcFcntl = orig
	if set(tls, vfs, name, cFuncPointer(rawFcntl)) != sqlite3.SQLITE_OK {
		libcFcntl = 0
	}
}

// rawFcntl has the signature modernc gives fcntl(int fd, int cmd, ...): the variadic
// argument arrives as a pointer to a va_list.
func rawFcntl(tls *libc.TLS, fd, cmd int32, va uintptr) int32 {
	switch cmd {
	case fGetLK, fSetLK, fOFDGetLK, fOFDSetLK:
		ap := va
		arg := libc.VaUintptr(&ap)
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), arg)
			if e == syscall.EINTR {
				continue
			}
			if e != 0 {
				*(*int32)(cptr(libc.X__errno_location(tls))) = int32(e)
				return -1
			}
			return int32(r)
		}
	}
	orig := *(*func(*libc.TLS, int32, int32, uintptr) int32)(unsafe.Pointer(&struct{ uintptr }{libcFcntl}))
	return orig(tls, fd, cmd, va)
}

// cFuncPointer makes a C function pointer of f as modernc represents one (the Go func
// value's word), as modernc.org/sqlite does for its own callbacks.
func cFuncPointer[T any](f T) uintptr { return *(*uintptr)(unsafe.Pointer(&f)) }
