//go:build !race

package seedtest

// raceEnabled reports whether the race detector is on: it makes building the seed in
// process far too slow, so ensure runs the generator as a separate, uninstrumented program.
const raceEnabled = false
