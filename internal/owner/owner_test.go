package owner

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the helper process: with OWNER_HELPER_KEY set it joins that
// election, echoes requests when it owns the key, prints its role, and waits to be killed.
func TestMain(m *testing.M) {
	if key := os.Getenv("OWNER_HELPER_KEY"); key != "" {
		helper(key)
		return
	}
	os.Exit(m.Run())
}

func helper(key string) {
	delay, _ := time.ParseDuration(os.Getenv("OWNER_HELPER_DELAY"))
	n, err := Join(Config{Key: key, Serve: func(p *Peer, id uint64, payload []byte) {
		reply := append([]byte("echo:"), payload...)
		if delay > 0 {
			time.AfterFunc(delay, func() { p.Reply(id, reply) })
			return
		}
		p.Reply(id, reply)
	}})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("role", n.Role())
	select {}
}

// uniqueKey is a key no other test (or test run) uses.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("onehost-owner-test/%d/%s/%d", os.Getpid(), t.Name(), time.Now().UnixNano())
}

// echo answers every request with "echo:" and the payload.
func echo(p *Peer, id uint64, payload []byte) { p.Reply(id, append([]byte("echo:"), payload...)) }

func join(t *testing.T, key string, serve func(*Peer, uint64, []byte), tweak ...func(*Config)) *Node {
	t.Helper()
	cfg := Config{Key: key, Serve: serve}
	for _, f := range tweak {
		f(&cfg)
	}
	n, err := Join(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func waitRole(t *testing.T, n *Node, want string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for n.Role() != want {
		if time.Since(start) > within {
			t.Fatalf("role %s after %v, want %s", n.Role(), within, want)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

func TestElection(t *testing.T) {
	key := uniqueKey(t)
	a := join(t, key, echo)
	b := join(t, key, echo)
	c := join(t, key, echo)
	if a.Role() != RoleOwner || b.Role() != RoleFollower || c.Role() != RoleFollower {
		t.Fatalf("roles %s %s %s, want owner follower follower", a.Role(), b.Role(), c.Role())
	}
	if _, err := a.Forward([]byte("x"), nil); !errors.Is(err, ErrNoOwner) {
		t.Errorf("Forward on the owner: %v, want ErrNoOwner", err)
	}
	for _, n := range []*Node{b, c} {
		got, err := n.Forward([]byte("hello"), []byte("prefix:"))
		if err != nil || string(got) != "prefix:echo:hello" {
			t.Errorf("Forward = %q, %v; want prefix:echo:hello", got, err)
		}
		if st := n.Stats(); st.OwnerPID != os.Getpid() || st.Forwarded != 1 {
			t.Errorf("follower stats %+v, want owner pid %d and 1 forwarded", st, os.Getpid())
		}
	}
	if st := a.Stats(); st.Followers != 2 || st.Served != 2 {
		t.Errorf("owner stats %+v, want 2 followers and 2 served", st)
	}
	other := join(t, uniqueKey(t)+"-other", echo)
	if other.Role() != RoleOwner {
		t.Errorf("another key: role %s, want owner", other.Role())
	}
}

func TestConcurrentForwards(t *testing.T) {
	key := uniqueKey(t)
	join(t, key, func(p *Peer, id uint64, payload []byte) {
		reply := append([]byte(nil), payload...)
		go p.Reply(id, reply) // answers out of order
	})
	f := join(t, key, echo)
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := range 200 {
				req := strconv.Itoa(g*1000 + i)
				var err error
				buf, err = f.Forward([]byte(req), buf[:0])
				if err != nil || string(buf) != req {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d of 3200 concurrent forwards got a wrong answer or an error", bad.Load())
	}
}

// A graceful Close of the owner under a steady stream of forwards: every request is
// answered or was never sent (ErrNoOwner); none is lost; a follower owns the key at once.
func TestHandoverLosesNothing(t *testing.T) {
	key := uniqueKey(t)
	owner, err := Join(Config{Key: key, Serve: func(p *Peer, id uint64, payload []byte) {
		reply := append([]byte(nil), payload...)
		time.AfterFunc(2*time.Millisecond, func() { p.Reply(id, reply) }) // a batch window
	}})
	if err != nil {
		t.Fatal(err)
	}
	f1 := join(t, key, echo)
	f2 := join(t, key, echo)
	var answered, notSent, lost atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range []*Node{f1, f2} {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					got, err := f.Forward([]byte("w"), nil)
					switch {
					case err == nil && string(got) == "w", err == nil && string(got) == "echo:w":
						answered.Add(1)
					case errors.Is(err, ErrNoOwner):
						notSent.Add(1)
						time.Sleep(100 * time.Microsecond)
					default:
						lost.Add(1)
						t.Errorf("Forward during the handover: %q, %v", got, err)
					}
				}
			}()
		}
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	owner.Close()
	closeTook := time.Since(start)
	deadline := time.Now().Add(time.Second)
	for f1.Role() != RoleOwner && f2.Role() != RoleOwner {
		if time.Now().After(deadline) {
			t.Fatalf("no new owner a second after the handover: %s, %s", f1.Role(), f2.Role())
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	roles := []string{f1.Role(), f2.Role()}
	if !(roles[0] == RoleOwner && roles[1] == RoleFollower) && !(roles[0] == RoleFollower && roles[1] == RoleOwner) {
		t.Errorf("roles after the handover %v, want one owner and one follower", roles)
	}
	t.Logf("handover: Close took %v, new owner after %v; %d answered, %d done locally meanwhile, %d lost",
		closeTook.Round(time.Microsecond), took.Round(time.Microsecond), answered.Load(), notSent.Load(), lost.Load())
	if lost.Load() != 0 {
		t.Errorf("%d requests lost in a graceful handover", lost.Load())
	}
}

// The owner is killed (-9) with requests in flight: they fail with ErrOwnerLost, and the
// follower owns the key within a second.
func TestOwnerKilled(t *testing.T) {
	key := uniqueKey(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "OWNER_HELPER_KEY="+key, "OWNER_HELPER_DELAY=10s")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "role owner\n" {
		t.Fatalf("helper said %q, %v; want role owner", line, err)
	}
	f := join(t, key, echo)
	if f.Role() != RoleFollower || f.Stats().OwnerPID != cmd.Process.Pid {
		t.Fatalf("follower: %+v, want to follow pid %d", f.Stats(), cmd.Process.Pid)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := f.Forward([]byte("undecided"), nil)
			errs <- err
		}()
	}
	for f.Stats().Forwarded < 4 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the requests reach the owner
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := <-errs; !errors.Is(err, ErrOwnerLost) {
			t.Errorf("request in flight when the owner died: %v, want ErrOwnerLost", err)
		}
	}
	took := waitRole(t, f, RoleOwner, time.Second)
	t.Logf("owner killed: follower owns the key %v after the kill", took+time.Since(killed)-took)
	if st := f.Stats(); st.Lost != 4 {
		t.Errorf("stats %+v, want 4 lost", st)
	}
}

// An owner that stops answering: requests fail with ErrOwnerTimeout after CallTimeout; from
// SuspectAfter on, new requests are not sent (ErrNoOwner); an answer clears the suspicion.
func TestOwnerNotAnswering(t *testing.T) {
	key := uniqueKey(t)
	var mu sync.Mutex
	var held []func()
	join(t, key, func(p *Peer, id uint64, payload []byte) {
		mu.Lock()
		held = append(held, func() { p.Reply(id, []byte("late")) })
		mu.Unlock()
	}, func(c *Config) { c.HandoverTimeout = 50 * time.Millisecond })
	f := join(t, key, echo, func(c *Config) {
		c.CallTimeout = 400 * time.Millisecond
		c.SuspectAfter = 100 * time.Millisecond
	})
	start := time.Now()
	_, err := f.Forward([]byte("x"), nil)
	waited := time.Since(start)
	if !errors.Is(err, ErrOwnerTimeout) || waited < 400*time.Millisecond || waited > 2*time.Second {
		t.Fatalf("Forward to a silent owner: %v after %v, want ErrOwnerTimeout after 400ms", err, waited)
	}
	if _, err := f.Forward([]byte("y"), nil); !errors.Is(err, ErrNoOwner) {
		t.Errorf("Forward to a suspect owner: %v, want ErrNoOwner (not sent)", err)
	}
	mu.Lock()
	for _, reply := range held {
		reply() // the late answer: dropped, but the owner was heard
	}
	held = nil
	mu.Unlock()
	deadline := time.Now().Add(time.Second)
	for {
		_, err := f.Forward([]byte("z"), nil)
		if !errors.Is(err, ErrNoOwner) {
			break // sent again (it will time out: the owner holds it)
		}
		if time.Now().After(deadline) {
			t.Fatal("the owner answered, yet requests are still not sent")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := f.Stats(); st.Timeouts < 1 {
		t.Errorf("stats %+v, want a timeout counted", st)
	}
}

func TestJoinRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no key", Config{Serve: echo}, "want 1 to 107 bytes"},
		{"long key", Config{Key: strings.Repeat("k", 108), Serve: echo}, "want 1 to 107 bytes"},
		{"no serve", Config{Key: "k"}, "Serve is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Join(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Join: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestFrames(t *testing.T) {
	var b []byte
	b = appendFrame(b, kindRequest, 1, []byte("one"))
	b = appendFrame(b, kindAnswer, 1<<60, nil)
	b = appendFrame(b, kindGoaway, 0, bytes.Repeat([]byte{'x'}, MaxPayload))
	br := bufio.NewReaderSize(bytes.NewReader(b), headerLen+MaxPayload)
	for _, want := range []struct {
		kind byte
		id   uint64
		n    int
	}{{kindRequest, 1, 3}, {kindAnswer, 1 << 60, 0}, {kindGoaway, 0, MaxPayload}} {
		kind, id, payload, err := readFrame(br)
		if err != nil || kind != want.kind || id != want.id || len(payload) != want.n {
			t.Fatalf("readFrame = %q %d %d bytes %v, want %q %d %d bytes", kind, id, len(payload), err, want.kind, want.id, want.n)
		}
	}
	if _, _, _, err := readFrame(br); err == nil || err.Error() != "EOF" {
		t.Errorf("after the last frame: %v, want EOF", err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"short length", []byte{0, 0, 0, 8, 'q', 0, 0, 0, 0, 0, 0, 0, 0}},
		{"too long", appendFrame(nil, kindRequest, 1, make([]byte, MaxPayload+1))},
		{"unknown kind", appendFrame(nil, 'x', 1, nil)},
		{"cut header", appendFrame(nil, kindRequest, 1, nil)[:7]},
		{"cut payload", appendFrame(nil, kindRequest, 1, []byte("abc"))[:15]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(bytes.NewReader(tc.in), headerLen+MaxPayload)
			if _, _, _, err := readFrame(br); err == nil || err.Error() == "EOF" {
				t.Errorf("readFrame(%q) = %v, want an error", tc.in, err)
			}
		})
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, kindRequest, 7, []byte("L\x00\x00")))
	f.Add(appendFrame(appendFrame(nil, kindAnswer, 1, nil), kindGoaway, 0, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'q'})
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), headerLen+MaxPayload)
		var again []byte
		for {
			kind, id, payload, err := readFrame(br)
			if err != nil {
				break
			}
			if len(payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(payload))
			}
			again = appendFrame(again, kind, id, payload)
		}
		if !bytes.HasPrefix(in, again) {
			t.Fatalf("frames read do not re-encode to a prefix of the input")
		}
	})
}

// A follower that leaves (a worker draining) lets its requests in flight finish: none is
// lost, and Forward is refused (ErrNoOwner) from the start of Close on.
func TestFollowerCloseFinishesInFlight(t *testing.T) {
	key := uniqueKey(t)
	join(t, key, func(p *Peer, id uint64, payload []byte) {
		reply := append([]byte(nil), payload...)
		time.AfterFunc(50*time.Millisecond, func() { p.Reply(id, reply) })
	})
	f, err := Join(Config{Key: key, Serve: echo})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			got, err := f.Forward([]byte{byte(i)}, nil)
			if err == nil && (len(got) != 1 || got[0] != byte(i)) {
				err = fmt.Errorf("answer %q to request %d", got, i)
			}
			errs <- err
		}()
	}
	for f.Stats().Forwarded < 4 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { f.Close(); close(closed) }()
	for f.Role() != RoleNone {
		time.Sleep(time.Millisecond)
	}
	if _, err := f.Forward([]byte("late"), nil); !errors.Is(err, ErrNoOwner) {
		t.Errorf("Forward while closing: %v, want ErrNoOwner", err)
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("request in flight when the follower closed: %v", err)
		}
	}
	<-closed
}
