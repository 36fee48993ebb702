package seed

// mulberry32 is the challenge's pseudo-random generator. The reference is JavaScript, so
// every step is written in uint32 arithmetic that matches Math.imul and the >>> operator,
// and the result is the float64 that JavaScript's division by 2^32 produces.
type mulberry32 struct {
	state uint32
}

// newMulberry32 returns the generator seeded as the reference seeds it.
func newMulberry32(seed uint32) *mulberry32 {
	return &mulberry32{state: seed}
}

// next returns the next float64 in [0, 1).
func (m *mulberry32) next() float64 {
	m.state += 0x6D2B79F5
	t := m.state
	t = (t ^ t>>15) * (t | 1)
	t ^= t + (t^t>>7)*(t|61)
	return float64(t^t>>14) / 4294967296
}

// intn returns floor(rand() * n): the index draw behind pick. n*r is below n, so the
// conversion's truncation is JavaScript's Math.floor.
func (m *mulberry32) intn(n int) int {
	return int(m.next() * float64(n))
}

// randInt is the reference's randInt(lo, hi) = lo + floor(rand() * (hi - lo + 1)).
func (m *mulberry32) randInt(lo, hi int) int {
	return lo + m.intn(hi-lo+1)
}

// pick is the reference's pick(list) = list[floor(rand() * len(list))].
func pick(m *mulberry32, list []string) string {
	return list[m.intn(len(list))]
}
