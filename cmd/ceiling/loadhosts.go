package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/onehost/onehost/internal/journey"
	"github.com/onehost/onehost/internal/loadhosts"
)

// loadHostFlags are the flags challenge and sweep share for running the generator on
// other hosts over ssh.
type loadHostFlags struct {
	hosts      []loadhosts.Host
	sshOptions []string
	serverHost string
	lead       time.Duration
}

// addLoadHostFlags defines -load-hosts, -ssh-option, -server-host and -load-lead on fs;
// what says what the hosts get copied.
func addLoadHostFlags(fs *flag.FlagSet, what string) *loadHostFlags {
	l := &loadHostFlags{}
	fs.Func("load-hosts", "run the generator on these hosts over ssh, each on its share of the load: user@host[:port],... ("+what+" copied there)", func(v string) error {
		h, err := loadhosts.ParseHosts(v)
		l.hosts = h
		return err
	})
	fs.Func("ssh-option", "an ssh/scp -o option for -load-hosts (repeatable), e.g. IdentityFile=~/.ssh/load", func(v string) error {
		l.sshOptions = append(l.sshOptions, v)
		return nil
	})
	fs.StringVar(&l.serverHost, "server-host", "127.0.0.1", "address the server listens on (with -load-hosts: one the hosts reach)")
	fs.DurationVar(&l.lead, "load-lead", 5*time.Second, "with -load-hosts: every run starts this long after it is launched, at one wall-clock time on all hosts (ssh's connection set-up and the hosts' clocks must fit in it)")
	return l
}

func (l *loadHostFlags) ssh() loadhosts.Config { return loadhosts.Config{Options: l.sshOptions} }

// note says where the generator runs, for the report.
func (l *loadHostFlags) note() string {
	if len(l.hosts) == 0 {
		return ""
	}
	return fmt.Sprintf(" The generator runs on %d load host(s) over ssh: %v.", len(l.hosts), l.hosts)
}

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
	copies     loadhosts.Copies
}

func (h *hostsTrial) trial(ctx context.Context, rc journey.Config) (journey.Result, error) {
	k := len(h.hosts)
	lead := h.lead
	if lead <= 0 {
		lead = 5 * time.Second // ssh connections and the hosts' clocks
	}
	// The copies first (the first trial's binary and tokens): the lead is for ssh's
	// connection set-up alone, and a start time agreed before a copy would pass during it.
	bins, tokens := make([]string, k), make([]string, k)
	err := loadhosts.Each(ctx, h.hosts, func(ctx context.Context, i int) (err error) {
		if journey.Share(rc.Users, k, i) == 0 {
			return nil
		}
		if bins[i], err = h.copies.Ensure(ctx, h.ssh, h.hosts[i], h.autocannon, "autocannon"); err != nil {
			return err
		}
		tokens[i], err = h.copies.Ensure(ctx, h.ssh, h.hosts[i], h.tokens, "tokens.json")
		return err
	})
	if err != nil {
		return journey.Result{}, err
	}
	start := time.Now().Add(lead)
	seed := rc.Seed
	if seed == 0 {
		seed = uint64(start.UnixNano()) // one seed for all: user n's choices stay its own
	}
	first := make([]int, k) // host i's users are first[i] .. first[i]+Share-1
	for i, f := 0, 1; i < k; i++ {
		first[i] = f
		f += journey.Share(rc.Users, k, i)
	}
	outs := h.ssh.RunAll(ctx, h.hosts, func(ctx context.Context, i int) ([]string, error) {
		n := journey.Share(rc.Users, k, i)
		if n == 0 {
			return nil, nil
		}
		return usersArgv(bins[i], tokens[i], rc, n, "-first-user", strconv.Itoa(first[i]), "-total-users", strconv.Itoa(rc.Users),
			"-start-at", strconv.FormatInt(start.UnixMilli(), 10), "-seed", strconv.FormatUint(seed, 10)), nil
	})
	var got []journey.Result
	for i, o := range outs {
		if journey.Share(rc.Users, k, i) == 0 {
			continue
		}
		// autocannon users exits 1 on a failed trial, with its result on stdout.
		var p journey.Result
		if err := json.Unmarshal(o.Stdout, &p); err != nil || p.Requests == 0 && o.Err != nil {
			return journey.Result{}, fmt.Errorf("host %s: %v %v: %s", h.hosts[i], o.Err, err, strings.TrimSpace(string(o.Stderr)))
		}
		if p.Requests > 0 || p.Users > 0 {
			got = append(got, p)
		}
	}
	return journey.Merge(got...), nil
}
