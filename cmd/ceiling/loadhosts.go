package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/loadhosts"
)

// hostsTrial runs one trial from several load hosts (challenge -load-hosts): each host
// runs `autocannon users` over ssh for its share of the users (its own user range, so its
// own tokens), all starting at one agreed wall-clock time; their results, whose
// histograms add bucket by bucket, are merged and judged as one run (journey.Merge).
type hostsTrial struct {
	ssh        loadhosts.Config
	hosts      []loadhosts.Host
	autocannon string // local binary, copied to each host when missing or different
	tokens     string // local token file, copied the same way
	lead       time.Duration

	mu     sync.Mutex
	remote map[int][2]string // host index → remote autocannon and tokens paths
}

func (h *hostsTrial) prepare(ctx context.Context, i int) (bin, tokens string, err error) {
	h.mu.Lock()
	p, ok := h.remote[i]
	h.mu.Unlock()
	if ok {
		return p[0], p[1], nil
	}
	if bin, err = h.ssh.EnsureBinary(ctx, h.hosts[i], h.autocannon, "autocannon"); err != nil {
		return "", "", err
	}
	if tokens, err = h.ssh.EnsureBinary(ctx, h.hosts[i], h.tokens, "tokens.json"); err != nil {
		return "", "", err
	}
	h.mu.Lock()
	if h.remote == nil {
		h.remote = map[int][2]string{}
	}
	h.remote[i] = [2]string{bin, tokens}
	h.mu.Unlock()
	return bin, tokens, nil
}

func (h *hostsTrial) trial(ctx context.Context, rc journey.Config) (journey.Result, error) {
	k := len(h.hosts)
	lead := h.lead
	if lead == 0 {
		lead = 5 * time.Second // ssh connections and the hosts' clocks
	}
	start := time.Now().Add(lead)
	seed := rc.Seed
	if seed == 0 {
		seed = uint64(start.UnixNano()) // one seed for all: user n's choices stay its own
	}
	parts := make([]journey.Result, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	first := 1
	for i := range k {
		n := journey.Share(rc.Users, k, i)
		if n == 0 {
			continue
		}
		f := first
		first += n
		wg.Add(1)
		go func() { // owned by trial: ends when the remote generator exits or is killed
			defer wg.Done()
			bin, tokens, err := h.prepare(ctx, i)
			if err != nil {
				errs[i] = err
				return
			}
			argv := usersArgv(bin, tokens, rc, n, "-first-user", strconv.Itoa(f), "-total-users", strconv.Itoa(rc.Users),
				"-start-at", strconv.FormatInt(start.UnixMilli(), 10), "-seed", strconv.FormatUint(seed, 10))
			var out, errb bytes.Buffer
			runErr := h.ssh.Run(ctx, h.hosts[i], argv, &out, &errb)
			// autocannon users exits 1 on a failed trial, with its result on stdout.
			if err := json.Unmarshal(out.Bytes(), &parts[i]); err != nil || parts[i].Requests == 0 && runErr != nil {
				errs[i] = fmt.Errorf("host %s: %v %v: %s", h.hosts[i], runErr, err, strings.TrimSpace(errb.String()))
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return journey.Result{}, err
		}
	}
	var got []journey.Result
	for _, p := range parts {
		if p.Requests > 0 || p.Users > 0 {
			got = append(got, p)
		}
	}
	return journey.Merge(got...), nil
}
