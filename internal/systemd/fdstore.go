package systemd

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"
)

// Under systemd the slots' sockets also live in the unit's file descriptor store
// (FDSTORE=1 with FDNAME=slot-N, APP.slot-N with several apps; the unit's
// FileDescriptorStoreMax= allows them): when the supervisor stops or dies, systemd keeps
// them open, connections wait in their queues instead of being refused, and the next
// start gets them back as LISTEN_FDS and serves them (cluster.Options.Inherited).

// ListenFDs takes the descriptors systemd passed to this process (LISTEN_FDS of them from
// fd 3, named by LISTEN_FDNAMES), by name. Only when LISTEN_PID names this process, as
// sd_listen_fds(3) requires: otherwise they were meant for another.
func ListenFDs(getenv func(string) string) (map[string]*os.File, error) {
	v := getenv("LISTEN_FDS")
	if v == "" || getenv("LISTEN_PID") != strconv.Itoa(os.Getpid()) {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 4096 {
		return nil, fmt.Errorf("LISTEN_FDS=%q: want a count", v)
	}
	names := strings.Split(getenv("LISTEN_FDNAMES"), ":")
	out := map[string]*os.File{}
	for i := range n {
		fd := 3 + i
		syscall.CloseOnExec(fd) // ours: the workers get only what spawn passes them
		name := ""
		if i < len(names) {
			name = names[i]
		}
		if name == "" || out[name] != nil {
			name = "unnamed-" + strconv.Itoa(fd)
		}
		out[name] = os.NewFile(uintptr(fd), name)
	}
	return out, nil
}

// storeName is the store's name of an app's slot: slot-N, APP.slot-N with several apps.
func storeName(app string, multi bool, slot int) string {
	return storePrefix(app, multi) + strconv.Itoa(slot)
}

func storePrefix(app string, multi bool) string {
	if multi {
		return app + ".slot-"
	}
	return "slot-"
}

// TakeInherited takes an app's sockets out of fds, by slot.
func TakeInherited(fds map[string]*os.File, app string, multi bool) map[int]*os.File {
	out := map[int]*os.File{}
	for name, f := range fds {
		rest, ok := strings.CutPrefix(name, storePrefix(app, multi))
		if !ok {
			continue
		}
		if slot, err := strconv.Atoi(rest); err == nil && slot >= 0 {
			out[slot] = f
			delete(fds, name)
		}
	}
	return out
}

// FDStore is the cluster's SocketStore hook: each slot's socket in the store under its
// name, replaced when the slot's socket changes, removed when the slot gives it up.
func FDStore(n *Notifier, app string, multi bool, log *zap.Logger) func(int, *os.File) {
	return func(slot int, f *os.File) {
		name := storeName(app, multi, slot)
		err := n.Notify("FDSTOREREMOVE=1\nFDNAME=" + name)
		if err == nil && f != nil {
			err = n.NotifyFiles("FDSTORE=1\nFDNAME="+name, f)
		}
		if err != nil {
			log.Warn("systemd's file descriptor store: a slot's socket not kept", zap.Int("slot", slot), zap.Error(err))
		}
	}
}
