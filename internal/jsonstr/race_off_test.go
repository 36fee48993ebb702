//go:build !race

package jsonstr

// raceEnabled: the race detector changes allocation counts, so budgets are not checked.
const raceEnabled = false
