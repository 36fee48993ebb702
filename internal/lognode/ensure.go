package lognode

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/fleetspec"
)

// StreamConfig is the write log's stream: file storage, one subject, min(3, hosts)
// replicas, and no limit on its size: it is bounded by the purges that follow each
// snapshot (internal/writelog), because a limit that dropped messages on its own would
// drop writes some host has not applied yet.
func StreamConfig(spec fleetspec.Spec) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       fleetspec.Stream,
		Subjects:   []string{fleetspec.Subject},
		Storage:    jetstream.FileStorage,
		Replicas:   spec.Replicas(),
		Duplicates: fleetspec.Duplicates,
		Retention:  jetstream.LimitsPolicy,
		Discard:    jetstream.DiscardOld,
		// Direct gets let any replica answer a read of one message (the tests' checks).
		AllowDirect: true,
	}
}

// ensure creates the stream and the snapshot bucket unless they exist, retrying until it
// can (the cluster needs a meta leader and enough nodes for the replicas) or ctx ends.
func (n *Node) ensure(ctx context.Context) error {
	js, err := jetstream.New(n.nc)
	if err != nil {
		return err
	}
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := n.ensureOnce(ctx, js)
		if err == nil {
			n.log.Info("write log ready", zap.String("stream", fleetspec.Stream), zap.Int("replicas", n.cfg.Spec.Replicas()))
			return nil
		}
		if attempt%20 == 0 { // every ~10 s: a fleet short of nodes says why it waits
			n.log.Warn("write log not created yet (waiting for the other hosts' nodes)", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func (n *Node) ensureOnce(ctx context.Context, js jetstream.JetStream) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := js.CreateStream(cctx, StreamConfig(n.cfg.Spec))
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return err
	}
	_, err = js.CreateObjectStore(cctx, jetstream.ObjectStoreConfig{
		Bucket:   fleetspec.SnapshotBucket,
		Storage:  jetstream.FileStorage,
		Replicas: n.cfg.Spec.Replicas(),
	})
	if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		return err
	}
	return nil
}
