package procstat

import "testing"

func TestReadHost(t *testing.T) {
	h, err := ReadHost("testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := []CPUTime{
		{CPU: 0, User: 5, Nice: 0.25, System: 2, Idle: 40, IOWait: 0.15, IRQ: 0.05, SoftIRQ: 0.1, Steal: 0.02},
		{CPU: 1, User: 5, Nice: 0.25, System: 2, Idle: 40, IOWait: 0.15, IRQ: 0.05, SoftIRQ: 0.1, Steal: 0.03},
	}
	if len(h.CPUs) != len(want) {
		t.Fatalf("CPUs %+v, want %+v", h.CPUs, want)
	}
	for i := range want {
		if h.CPUs[i] != want[i] {
			t.Errorf("cpu %d: %+v, want %+v", i, h.CPUs[i], want[i])
		}
	}
	if h.NetRxBytes <= 0 || h.NetTxBytes <= 0 {
		t.Errorf("net bytes %d/%d", h.NetRxBytes, h.NetTxBytes)
	}
	if _, err := ReadHost(""); err != nil { // the real one
		t.Errorf("ReadHost(/proc): %v", err)
	}
}

func FuzzParseCPUs(f *testing.F) {
	f.Add("cpu  1 2 3 4\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	f.Add("cpux 1 2 3 4\n")
	f.Fuzz(func(t *testing.T, in string) {
		cpus, err := parseCPUs([]byte(in), 100)
		if err == nil && len(cpus) == 0 {
			t.Fatalf("no error and no cpu from %q", in)
		}
	})
}
