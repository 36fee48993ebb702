package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onehost/onehost/internal/challenge"
	"github.com/onehost/onehost/internal/seedtest"
)

// TestChallengeEndToEnd runs `ceiling challenge` with the real worker and generator: one
// short trial of a few hundred users, in a CPU quota where this machine lets the test make
// one (else unlimited, as the command says), and checks the report and the JSON. Like
// TestChallengeLoadHosts it asserts the plumbing and that the score follows the verdict,
// not the verdict, which is the machine's load of the moment.
func TestChallengeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker and the generator and runs a trial")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/onehost/onehost/cmd/worker",
		"github.com/onehost/onehost/bench/autocannon")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	seed := seedtest.Path(t)
	tokens := filepath.Join(dir, "tokens.json")
	if out, err := exec.Command(filepath.Join(dir, "worker"), "seed", "-db", seed, "-tokens", tokens, "-n", "500").CombinedOutput(); err != nil {
		t.Fatalf("tokens: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "scores.json")
	// The test binary is `ceiling` here (TestMain), so that `ceiling pin`, which the
	// command runs as its own executable to start the server, exists.
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "challenge", "-users", "300", "-time-scale", "5",
		"-ramp", "1s", "-hold", "3s", "-rampdown", "1s", "-seed", seed, "-tokens", tokens,
		// A busy machine's stalls must not make the trial invalid here; the verdict's own
		// tests are genhealth's and the generators'. Nor may the other test packages
		// beside it make it host-busy: TestChallengeHostBusy tests that rule.
		"-saturation", "hiccup=1s,send-lag=1s,cpu=100", "-other-cores", "64",
		"-worker", filepath.Join(dir, "worker"), "-autocannon", filepath.Join(dir, "autocannon"), "-out", out)
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("output:\n%s%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	report := stdout.String()
	for _, want := range []string{"worker: trial 300 users (1,500 user-equivalents): ", "score (user-equivalents)", challenge.Published} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if !strings.Contains(report, "CPU quota: 0.2 cores") && !strings.Contains(report, "No CPU quota") {
		t.Errorf("the report does not say whether the quota was had")
	}
	s := readScore(t, out)
	tr := s.Trials
	if len(tr) != 1 || tr[0].PerRequest <= 0 || tr[0].Result.Requests == 0 {
		t.Fatalf("trial %+v: want requests and a CPU per request", tr)
	}
	if h := tr[0].Result.Health; h.Windows == 0 || h.Thresholds.CPUShare != 100 {
		t.Errorf("trial's generator verdict %s (%d windows, thresholds %+v): want one, measured under the given thresholds", h, h.Windows, h.Thresholds)
	}
	scoreFollowsVerdict(t, s, 300, 1500)
}

// readScore reads the one score in `ceiling challenge -out`'s file at path.
func readScore(t *testing.T, path string) challenge.Score {
	t.Helper()
	var got struct {
		Scores []challenge.Score `json:"scores"`
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &got)
	}
	if err != nil || len(got.Scores) != 1 {
		t.Fatalf("scores JSON: %v %+v", err, got.Scores)
	}
	return got.Scores[0]
}

// scoreFollowsVerdict checks s, a score of one trial of users users (ue user-equivalents):
// that users if the trial passed; 0 and the generator's limit there if the trial was
// invalid (its generator saturated); 0 if it failed; 0 and no limit if it was host-busy.
func scoreFollowsVerdict(t *testing.T, s challenge.Score, users int, ue float64) {
	t.Helper()
	switch v := s.Trials[0]; {
	case v.HostBusy && (v.Pass || s.HostBusy == nil || s.Users != 0 || s.UserEquivalents != 0 || s.GeneratorLimit != 0):
		t.Errorf("trial host-busy (pass %v), score %d users (%g user-equivalents), generator limit %d, host busy %+v; want not passed, 0, none, the trial", v.Pass, s.Users, s.UserEquivalents, s.GeneratorLimit, s.HostBusy)
	case v.HostBusy:
		t.Logf("the trial ran beside other work on this machine now: %.2f cores", v.OtherCores)
	case v.Pass && (s.Users != users || s.UserEquivalents != ue || s.GeneratorLimit != 0):
		t.Errorf("trial passed, score %d users (%g user-equivalents), generator limit %d; want %d (%g), none", s.Users, s.UserEquivalents, s.GeneratorLimit, users, ue)
	case v.Invalid && (v.Pass || !v.Result.Health.Saturated || s.Users != 0 || s.GeneratorLimit != users):
		t.Errorf("trial invalid (pass %v, generator %s), score %d users, generator limit %d; want not passed, saturated, 0, %d", v.Pass, v.Result.Health, s.Users, s.GeneratorLimit, users)
	case !v.Pass && !v.Invalid && (s.Users != 0 || s.GeneratorLimit != 0):
		t.Errorf("trial failed, score %d users, generator limit %d; want 0, none", s.Users, s.GeneratorLimit)
	case !v.Pass:
		t.Logf("the trial did not pass on this machine now (invalid %v): %s", v.Invalid, v.Result.Health)
	}
}
