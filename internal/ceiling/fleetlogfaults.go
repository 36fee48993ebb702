package ceiling

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/onehost/onehost/internal/fleetspec"
)

// natsURLs are the fleet's log nodes (each at the default client port: the -fleet list
// gives none).
func (fl *logFleet) natsURLs() string {
	var u []string
	for _, h := range fl.hosts {
		u = append(u, fleetspec.Host{Name: h.name, Addr: h.addr, ClientPort: fleetspec.DefaultClientPort}.ClientURL())
	}
	return strings.Join(u, ",")
}

// lagMeter measures publish → applied per host: each message's time in the stream (its
// leader's clock, this machine's) against the time a host's report said it had applied it
// (this process's clock, the same machine).
type lagMeter struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	ts      map[uint64]time.Time
	reports map[string][]report
}

type report struct {
	seq uint64
	at  time.Time
}

func startLag(ctx context.Context, fl *logFleet) (*lagMeter, error) {
	nc, err := nats.Connect(fl.natsURLs(), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("lag: %w", err)
	}
	m := &lagMeter{nc: nc, ts: map[uint64]time.Time{}, reports: map[string][]report{}, done: make(chan struct{})}
	if _, err := nc.Subscribe(fleetspec.AppliedSubject+".*", func(msg *nats.Msg) {
		if len(msg.Data) < 8 {
			return
		}
		now := time.Now()
		host := strings.TrimPrefix(msg.Subject, fleetspec.AppliedSubject+".")
		m.mu.Lock()
		m.reports[host] = append(m.reports[host], report{binary.BigEndian.Uint64(msg.Data), now})
		m.mu.Unlock()
	}); err != nil {
		nc.Close()
		return nil, err
	}
	js, _ := jetstream.New(nc)
	cctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	cons, err := js.OrderedConsumer(cctx, fleetspec.Stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy, HeadersOnly: true})
	if err != nil {
		cancel()
		nc.Close()
		return nil, fmt.Errorf("lag: %w", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		if md, err := msg.Metadata(); err == nil {
			m.mu.Lock()
			m.ts[md.Sequence.Stream] = md.Timestamp
			m.mu.Unlock()
		}
	})
	if err != nil {
		cancel()
		nc.Close()
		return nil, fmt.Errorf("lag: %w", err)
	}
	go func() { <-cctx.Done(); cc.Stop(); close(m.done) }() // ended by stop
	return m, nil
}

// stop returns each host's lag p50 and p99 in milliseconds.
func (m *lagMeter) stop() (p50, p99 map[string]float64) {
	time.Sleep(500 * time.Millisecond) // the last reports
	m.cancel()
	<-m.done
	m.nc.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	p50, p99 = map[string]float64{}, map[string]float64{}
	var seqs []uint64
	for s := range m.ts {
		seqs = append(seqs, s)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for host, reps := range m.reports {
		h := hdrhistogram.New(1, 60_000_000, 3)
		i := 0
		for _, rp := range reps {
			for i < len(seqs) && seqs[i] <= rp.seq {
				if d := rp.at.Sub(m.ts[seqs[i]]); d > 0 {
					h.RecordValue(max(d.Microseconds(), 1))
				}
				i++
			}
		}
		if h.TotalCount() > 0 {
			p50[host], p99[host] = float64(h.ValueAtQuantile(50))/1000, float64(h.ValueAtQuantile(99))/1000
		}
	}
	return p50, p99
}

// leader names the host that leads the stream.
func (fl *logFleet) leader(ctx context.Context) (string, error) {
	nc, err := nats.Connect(fl.natsURLs(), nats.Timeout(2*time.Second))
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := js.Stream(cctx, fleetspec.Stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(cctx); err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
				cancel()
				return info.Cluster.Leader, nil
			}
		}
		cancel()
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return "", ctx.Err()
		}
	}
	return "", fmt.Errorf("the stream has no leader after 30 s")
}

// faultWriter writes at a steady rate through the balancer and keeps each success's time.
type faultWriter struct {
	mu    sync.Mutex
	acked []time.Time
	ids   []int64
	stop  chan struct{}
	done  sync.WaitGroup
}

func (f *FleetLog) startFaultWriter(ctx context.Context, fl *logFleet, tok *tokens, rate int) *faultWriter {
	w := &faultWriter{stop: make(chan struct{})}
	c := newLoadClient(256)
	w.done.Add(1)
	go func() { // stopped by finish
		defer w.done.Done()
		r := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			user := 1 + r.Int64N(f.users)
			w.done.Add(1)
			go func() {
				defer w.done.Done()
				st, b, err := c.do(ctx, "POST", fl.lb+"/posts", tok.of(user), `{"body":"during a fault"}`)
				if err != nil || st != 201 {
					return
				}
				var p struct{ Post struct{ ID int64 } }
				json.Unmarshal(b, &p)
				w.mu.Lock()
				w.acked = append(w.acked, time.Now())
				w.ids = append(w.ids, p.Post.ID)
				w.mu.Unlock()
			}()
		}
	}()
	return w
}

func (w *faultWriter) finish() ([]time.Time, []int64) {
	close(w.stop)
	w.done.Wait()
	sort.Slice(w.acked, func(i, j int) bool { return w.acked[i].Before(w.acked[j]) })
	return w.acked, w.ids
}

// outage is the longest gap between two acknowledgements from before the fault on.
func outage(acked []time.Time, fault time.Time) time.Duration {
	var worst time.Duration
	prev := fault
	for _, a := range acked {
		if a.Before(fault) {
			continue
		}
		if d := a.Sub(prev); d > worst {
			worst = d
		}
		prev = a
	}
	return worst
}

// checkAcked counts acknowledged posts missing through the balancer, and ids given twice.
func (f *FleetLog) checkAcked(ctx context.Context, fl *logFleet, ids []int64) (lost, reused int) {
	c := newLoadClient(16)
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			reused++
			continue
		}
		seen[id] = true
		if st, _, err := c.do(ctx, "GET", fl.lb+"/posts/"+strconv.FormatInt(id, 10), "", ""); err != nil || st != 200 {
			lost++
		}
	}
	return lost, reused
}

// faults measures the outages on a fleet of 3 or more (see the top of fleetlog.go).
func (f *FleetLog) faults(ctx context.Context, fl *logFleet, tok *tokens, base FleetLogRun) error {
	byName := map[string]*logHost{}
	for _, h := range fl.hosts {
		byName[h.name] = h
	}
	restart := func(h *logHost) error {
		if err := f.startHost(fl, h); err != nil {
			return err
		}
		if err := waitHealth(ctx, h.url(), 120*time.Second); err != nil {
			return err
		}
		return waitUp(ctx, fl.hp, len(fl.hosts))
	}
	for _, kind := range []string{"leader-kill", "leader-stop"} {
		name, err := fl.leader(ctx)
		if err != nil {
			return err
		}
		h := byName[name]
		if h == nil {
			return fmt.Errorf("leader %q is no host", name)
		}
		w := f.startFaultWriter(ctx, fl, tok, 200)
		sleepCtx(ctx, 3*time.Second)
		at := time.Now()
		if kind == "leader-kill" {
			killHost(h)
		} else {
			f.supervisorKill(h)
			<-h.done
		}
		sleepCtx(ctx, 15*time.Second)
		acked, ids := w.finish()
		r := base
		r.Phase = kind
		r.OutageS = outage(acked, at).Seconds()
		r.Lost, r.Reused = f.checkAcked(ctx, fl, ids)
		r.Writes = int64(len(ids))
		r.Note = "the stream's leader " + name + map[string]string{"leader-kill": " killed -9 (its whole host)", "leader-stop": " stopped by supervisor kill"}[kind]
		f.report(r)
		if err := restart(h); err != nil {
			return fmt.Errorf("restart %s: %w", name, err)
		}
	}
	// A node killed -9 under its host's applier: how long until that host applies again.
	name, err := fl.leader(ctx)
	if err != nil {
		return err
	}
	var h *logHost
	for _, x := range fl.hosts {
		if x.name != name {
			h = x
			break
		}
	}
	lag, err := startLag(ctx, fl)
	if err != nil {
		return err
	}
	w := f.startFaultWriter(ctx, fl, tok, 200)
	sleepCtx(ctx, 3*time.Second)
	pid, err := nodePID(h)
	if err != nil {
		return err
	}
	at := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	sleepCtx(ctx, 10*time.Second)
	w.finish()
	lag.mu.Lock()
	var stall time.Duration
	var prevSeq uint64
	prev := at
	for _, rp := range lag.reports[h.name] {
		if rp.at.Before(at) {
			prevSeq = rp.seq
			continue
		}
		if rp.seq > prevSeq {
			stall = max(stall, rp.at.Sub(prev))
			prev, prevSeq = rp.at, rp.seq
		}
	}
	lag.mu.Unlock()
	lag.stop()
	r := base
	r.Phase = "node-kill"
	r.OutageS = stall.Seconds()
	r.Note = "host " + h.name + "'s log node killed -9: the longest its applier went without applying"
	f.report(r)
	return nil
}

// pairs is the check as a measurement: 3 × 600 POST→GET pairs through round robin
// (each GET sent after its POST's answer, on the balancer's next host), every id distinct,
// 100 users each liking one post 3 times (one accepted as new), and the hosts' files
// holding the same rows once every host has applied the same sequence.
func (f *FleetLog) pairs(ctx context.Context, fl *logFleet, tok *tokens, r *FleetLogRun) error {
	c := newLoadClient(1) // one connection: HAProxy's round robin takes each request to the next host
	seen := map[int64]bool{}
	for round := range 3 {
		for i := range 600 {
			user := int64(1 + (round*600+i)%int(f.users))
			st, b, err := c.do(ctx, "POST", fl.lb+"/posts", tok.of(user), `{"body":"pair"}`)
			if err != nil || st != 201 {
				return fmt.Errorf("pair %d: POST: %d %s %v", i, st, b, err)
			}
			var p struct{ Post struct{ ID int64 } }
			json.Unmarshal(b, &p)
			if seen[p.Post.ID] {
				r.Reused++
			}
			seen[p.Post.ID] = true
			if st, _, err := c.do(ctx, "GET", fl.lb+"/posts/"+strconv.FormatInt(p.Post.ID, 10), "", ""); err != nil || st != 200 {
				r.Stale++
			}
			r.Pairs++
		}
	}
	post := int64(1)
	for u := int64(1); u <= 100; u++ {
		created := 0
		for range 3 {
			st, _, err := c.do(ctx, "POST", fl.lb+"/posts/"+strconv.FormatInt(post, 10)+"/like", tok.of(1000+u), "")
			if err == nil && st == 201 {
				created++
			}
		}
		// A user who had liked post 1 in the seed already gets no 201: more than one is wrong.
		r.Repeated += max(created-1, 0)
	}
	r.Files = f.sameFiles(ctx, fl)
	return nil
}

// sameFiles waits until every host's file holds the same sequence, then compares their
// rows; it says "identical" or what differs.
func (f *FleetLog) sameFiles(ctx context.Context, fl *logFleet) string {
	if len(fl.hosts) == 1 {
		return "identical (one host)"
	}
	var last []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); sleepCtx(ctx, 500*time.Millisecond) {
		set := map[string]bool{}
		last = last[:0]
		for _, h := range fl.hosts {
			d, err := fileDigest(h.db)
			if err != nil {
				d = err.Error()
			}
			set[d] = true
			last = append(last, h.name+" "+d)
		}
		if len(set) == 1 {
			return "identical"
		}
	}
	return "differ: " + strings.Join(last, "; ")
}

// fileDigest is a digest of the feed's rows and the sequence the file holds.
func fileDigest(path string) (string, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return "", err
	}
	defer db.Close()
	h := sha256.New()
	for _, q := range []string{
		`SELECT id, user_id, body, created_at FROM posts ORDER BY id`,
		`SELECT user_id, post_id, created_at FROM likes ORDER BY user_id, post_id`,
		`SELECT (SELECT user_version FROM pragma_user_version), (SELECT application_id FROM pragma_application_id), 0, 0`,
	} {
		rows, err := db.Query(q)
		if err != nil {
			return "", err
		}
		cols, _ := rows.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				rows.Close()
				return "", err
			}
			fmt.Fprintln(h, vals...)
		}
		rows.Close()
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
