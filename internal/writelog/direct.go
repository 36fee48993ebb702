package writelog

// Reading the stream by sequence, without a consumer: a batched direct get
// ($JS.API.DIRECT.GET.<stream>, {"seq":N,"batch":B}) that any replica answers (the stream
// allows direct gets), this host's node first. It needs neither the stream's leader nor the
// meta group's, so an applier keeps applying while the log elects them; Follow uses it
// while it cannot make a consumer.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/onehost/onehost/internal/fleetspec"
)

// directPoll is how often followDirect asks again when the stream had nothing new.
const directPoll = 20 * time.Millisecond

// followDirect applies what direct gets return, from *next on, for d (then it returns an
// error, so that Follow tries a consumer again) or until apply fails or ctx ends.
func (l *Log) followDirect(ctx context.Context, next *uint64, apply func([]Msg) error, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return nil
		}
		msgs, err := l.directBatch(ctx, *next)
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(directPoll):
			}
			continue
		}
		if msgs[0].Seq > *next {
			return l.gap(ctx, *next, msgs[0].Seq)
		}
		if err := apply(msgs); err != nil {
			return applyError{err}
		}
		*next = msgs[len(msgs)-1].Seq + 1
		l.prog.applied(msgs[len(msgs)-1].Seq, 0)
	}
	return errors.New("read by sequence for a while: trying a consumer again")
}

// directBatch returns up to maxBatch consecutive messages from seq on (none when the
// stream has nothing there yet).
func (l *Log) directBatch(ctx context.Context, seq uint64) ([]Msg, error) {
	inbox := nats.NewInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("direct get: %w", err)
	}
	defer sub.Unsubscribe()
	req := []byte(`{"seq":` + strconv.FormatUint(seq, 10) + `,"batch":` + strconv.Itoa(maxBatch) + `}`)
	if err := l.nc.PublishRequest("$JS.API.DIRECT.GET."+fleetspec.Stream, inbox, req); err != nil {
		return nil, fmt.Errorf("direct get: %w", err)
	}
	var out []Msg
	want := seq
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			if len(out) > 0 {
				return out, nil
			}
			return nil, fmt.Errorf("direct get from %d: %w", seq, err)
		}
		if st := m.Header.Get("Status"); st != "" {
			// 404: nothing at seq yet; 204: the end of the batch; 503: no replica answers.
			if st == "503" && len(out) == 0 {
				return nil, fmt.Errorf("direct get from %d: no replica answers", seq)
			}
			return out, nil
		}
		s, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil || s < want {
			continue
		}
		if len(out) > 0 && s != want {
			return out, nil // a hole in this answer: the rest next time
		}
		out = append(out, Msg{Seq: s, ID: m.Header.Get("Nats-Msg-Id"), Data: m.Data})
		want = s + 1
	}
}
