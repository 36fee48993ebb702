package lognode

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/onehost/onehost/internal/fleetspec"
)

// freePort returns a client port P with P and P+2000 free on loopback.
func freePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		p := 20000 + rand.IntN(20000)
		ok := true
		for _, q := range []int{p, p + 2000} {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free port pair")
	return 0
}

// TestNodesCreateTheLog: three nodes on loopback form a cluster and create the stream
// once, with three replicas; a planned stop of the stream's leader hands the
// leadership to another node before it exits, and the stream keeps its messages.
func TestNodesCreateTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nats-server nodes")
	}
	var hosts []fleetspec.Host
	for i := range 3 {
		p := freePort(t)
		hosts = append(hosts, fleetspec.Host{Name: "n" + strconv.Itoa(i+1), Addr: "127.0.0.1", ClientPort: p, RoutePort: p + 2000})
	}
	nodes := map[string]*Node{}
	for _, h := range hosts {
		n, err := Start(Config{Spec: fleetspec.Spec{Hosts: hosts, Self: h.Name, Dir: t.TempDir()}})
		if err != nil {
			t.Fatal(err)
		}
		nodes[h.Name] = n
		t.Cleanup(func() { n.Kill() })
	}
	for name, n := range nodes {
		select {
		case <-n.Ready():
		case <-time.After(60 * time.Second):
			t.Fatalf("node %s: the stream not created after 60 s", name)
		}
	}
	url := ""
	for _, h := range hosts {
		url += h.ClientURL() + ","
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, fleetspec.Subject, []byte("x"), jetstream.WithMsgID("one")); err != nil {
		t.Fatal(err)
	}
	if ack, err := js.Publish(ctx, fleetspec.Subject, []byte("x"), jetstream.WithMsgID("one")); err != nil || !ack.Duplicate {
		t.Fatalf("the same message id again: %+v, %v; want a duplicate", ack, err)
	}
	st, err := js.Stream(ctx, fleetspec.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.State.Msgs != 1 {
		t.Fatalf("stream: %d replicas, %d messages; want 3 and 1", info.Config.Replicas, info.State.Msgs)
	}
	leader := info.Cluster.Leader
	began := time.Now()
	if err := nodes[leader].Stop(ctx); err != nil {
		t.Fatalf("planned stop of the leader %s: %v", leader, err)
	}
	t.Logf("the leader's planned stop took %v", time.Since(began))
	// A fresh client of the two nodes left (the first one's connection may still be
	// moving off the stopped node).
	rest := ""
	for _, h := range hosts {
		if h.Name != leader {
			rest += h.ClientURL() + ","
		}
	}
	nc2, err := nats.Connect(rest, nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		st2, err := js2.Stream(rctx, fleetspec.Stream)
		if err == nil {
			info, err = st2.Info(rctx)
		}
		rcancel()
		if err == nil && info.Cluster.Leader != "" && info.Cluster.Leader != leader {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no other leader 60 s after %s stepped down: %v", leader, err)
		}
	}
	if info.State.Msgs != 1 {
		t.Fatalf("after the step-down: %d messages, want 1", info.State.Msgs)
	}
}
