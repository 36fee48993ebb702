//go:build !race

package seed

// raceEnabled reports whether the race detector is on; it skews allocation counts.
const raceEnabled = false
