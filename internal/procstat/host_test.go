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
	if want := (CPUTime{CPU: -1, User: 10, Nice: 0.5, System: 4, Idle: 80, IOWait: 0.3, IRQ: 0.1, SoftIRQ: 0.2, Steal: 0.05}); h.All != want {
		t.Errorf("all cpus %+v, want %+v", h.All, want)
	}
	if h.NetRxBytes != 6200 || h.NetTxBytes != 5300 || h.LoRxBytes != 5000 || h.LoTxBytes != 5000 {
		t.Errorf("net bytes %d/%d, loopback %d/%d; want 6200/5300, 5000/5000", h.NetRxBytes, h.NetTxBytes, h.LoRxBytes, h.LoTxBytes)
	}
	if _, err := ReadHost(""); err != nil { // the real one
		t.Errorf("ReadHost(/proc): %v", err)
	}
}

func TestHostCPUSince(t *testing.T) {
	h0 := Host{All: CPUTime{CPU: -1, User: 10, System: 10, Idle: 10}}
	h1 := Host{All: CPUTime{CPU: -1, User: 11, Nice: 1, System: 10.5, Idle: 11, IRQ: 0.5}}
	// deltas: user 1 + nice 1, system 0.5 + irq 0.5, idle 1: 4 s in all.
	if got, want := h1.CPUSince(h0), (HostCPU{User: 50, System: 25, Idle: 25}); !nearHostCPU(got, want) {
		t.Errorf("CPUSince = %+v, want %+v", got, want)
	}
}

func TestOtherCores(t *testing.T) {
	for _, tc := range []struct {
		name      string
		c         HostCPU
		cores     int
		accounted float64
		want      float64
	}{
		{"quiet: the measured processes are all the host did", HostCPU{User: 35, System: 15, Idle: 50}, 2, 1, 0},
		{"a busy loop beside them", HostCPU{User: 80, System: 15, Idle: 5}, 2, 0.9, 1},
		{"I/O wait is not work", HostCPU{User: 25, Idle: 25, IOWait: 50}, 4, 1, 0},
		{"steal counts", HostCPU{User: 25, Steal: 25, Idle: 50}, 4, 1, 1},
		{"more accounted than busy (ticks): 0", HostCPU{User: 10, Idle: 90}, 2, 0.5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.OtherCores(tc.cores, tc.accounted); got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("OtherCores(%d, %v) = %v, want %v", tc.cores, tc.accounted, got, tc.want)
			}
		})
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
